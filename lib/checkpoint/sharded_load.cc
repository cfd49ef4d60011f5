// CheckpointReader and read_tracker: the loading half of sharded_checkpoint.h.
// The manifest is untrusted input: every field is type- and bounds-checked.
#include <algorithm>
#include <cctype>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/sharded_checkpoint.h"
#include "common/atomic_file.h"
#include "common/errors.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "nlohmann/json.hpp"

namespace mtrain::checkpoint {

using json = nlohmann::json;

namespace {

constexpr int64_t kMaxManifestBytes = int64_t{256} << 20;
constexpr size_t kMaxDims = 64;
constexpr int64_t kMaxNumel = int64_t{1} << 48;

[[noreturn]] void bad_manifest(const std::string& path, const std::string& what) {
  throw CheckpointError(fmt::format("{}: invalid checkpoint manifest: {}", path, what),
                        "the checkpoint is damaged; load an older one with an explicit iteration");
}

const json& field(const std::string& path, const json& obj, const char* key, json::value_t type,
                  const std::string& in) {
  if (!obj.is_object() || !obj.contains(key)) bad_manifest(path, fmt::format("{} has no \"{}\"", in, key));
  const json& v = obj.at(key);
  const bool ok = type == json::value_t::number_unsigned ? v.is_number_integer() : v.type() == type;
  if (!ok) bad_manifest(path, fmt::format("\"{}\" of {} has the wrong type", key, in));
  return v;
}

std::vector<int64_t> dims_of(const std::string& path, const json& obj, const char* key, const std::string& in) {
  const json& a = field(path, obj, key, json::value_t::array, in);
  if (a.size() > kMaxDims) bad_manifest(path, fmt::format("\"{}\" of {} has {} dims", key, in, a.size()));
  std::vector<int64_t> out;
  int64_t numel = 1;
  for (const json& v : a) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxNumel) {
      bad_manifest(path, fmt::format("\"{}\" of {} is not a list of non-negative integers", key, in));
    }
    out.push_back(v.get<int64_t>());
    if (__builtin_mul_overflow(numel, std::max<int64_t>(out.back(), 1), &numel) || numel > kMaxNumel) {
      bad_manifest(path, fmt::format("\"{}\" of {} is too large", key, in));
    }
  }
  return out;
}

bool safe_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos && s.find('\0') == std::string::npos;
}

uint32_t parse_crc(const std::string& path, const std::string& s, const std::string& in) {
  if (s.size() != 8 || !std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(c) != 0; })) {
    bad_manifest(path, fmt::format("crc32 \"{}\" of {} is not 8 hex digits", s, in));
  }
  return static_cast<uint32_t>(std::stoul(s, nullptr, 16));
}

}  // namespace

int64_t read_tracker(FileSystem& fs, const std::string& load_dir) {
  const std::string path = load_dir + "/" + kTrackerFileName;
  std::string text;
  try {
    text = read_small_text_file(fs, path);
  } catch (const IoError& e) {
    throw CheckpointError(fmt::format("cannot read the checkpoint tracker {}: {}", path, e.what()),
                          "is --load a directory written by a save?");
  }
  std::string s = text;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  const bool digits =
      !s.empty() && s.size() <= 15 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) {
    throw CheckpointError(
        fmt::format("{}: expected an iteration number, found \"{}\"", path, s.substr(0, 40)),
        "the tracker is damaged; pass the iteration to load explicitly or rewrite the file with the iteration");
  }
  return std::stoll(s);
}

CheckpointReader CheckpointReader::open(FileSystem& fs, const std::string& load_dir, std::optional<int64_t> iteration) {
  CheckpointReader r;
  r.iteration_ = iteration ? *iteration : read_tracker(fs, load_dir);
  r.dir_ = iteration_dir(load_dir, r.iteration_);
  r.manifest_path_ = r.dir_ + "/" + kManifestFileName;
  std::string text;
  try {
    text = fs.read_file(r.manifest_path_, kMaxManifestBytes);
  } catch (const IoError& e) {
    throw CheckpointError(fmt::format("cannot read the checkpoint manifest {}: {}", r.manifest_path_, e.what()),
                          "the checkpoint is incomplete or damaged; load an older one with an explicit iteration");
  }
  r.load_manifest(text);
  r.open_files(fs);
  return r;
}

void CheckpointReader::load_manifest(const std::string& text) {
  const std::string& p = manifest_path_;
  json m;
  try {
    m = json::parse(text);
  } catch (const json::exception& e) {
    bad_manifest(p, fmt::format("not JSON: {}", e.what()));
  }
  if (!m.is_object()) bad_manifest(p, "not a JSON object");
  if (field(p, m, "format", json::value_t::string, "the manifest") != "mtrain-sharded-checkpoint") {
    bad_manifest(p, "\"format\" is not \"mtrain-sharded-checkpoint\"");
  }
  const int64_t version = field(p, m, "version", json::value_t::number_unsigned, "the manifest").get<int64_t>();
  if (version != kShardedFormatVersion) {
    bad_manifest(p, fmt::format("format version {}, this mtrain reads version {}", version, kShardedFormatVersion));
  }
  const int64_t it = field(p, m, "iteration", json::value_t::number_unsigned, "the manifest").get<int64_t>();
  if (it != iteration_) bad_manifest(p, fmt::format("iteration {}, expected {}", it, iteration_));
  for (const json& f : field(p, m, "files", json::value_t::array, "the manifest")) {
    const std::string name = field(p, f, "name", json::value_t::string, "a file entry");
    if (!safe_file_name(name) || file_digests_.count(name) != 0) bad_manifest(p, "bad or repeated file " + name);
    const int64_t size = field(p, f, "size", json::value_t::number_unsigned, name).get<int64_t>();
    if (size < 0) bad_manifest(p, fmt::format("negative size of {}", name));
    file_digests_[name] = {size, parse_crc(p, field(p, f, "crc32", json::value_t::string, name), name)};
  }
  for (const auto& [name, t] : field(p, m, "tensors", json::value_t::object, "the manifest").items()) {
    Tensor& out = tensors_[name];
    out.global_shape = dims_of(p, t, "global_shape", "tensor " + name);
    for (const json& b : field(p, t, "blocks", json::value_t::array, "tensor " + name)) {
      SavedBlock sb;
      sb.file = field(p, b, "file", json::value_t::string, "a block of " + name);
      sb.key = field(p, b, "key", json::value_t::string, "a block of " + name);
      sb.offsets = dims_of(p, b, "offsets", "a block of " + name);
      sb.shape = dims_of(p, b, "shape", "a block of " + name);
      if (file_digests_.count(sb.file) == 0) bad_manifest(p, fmt::format("tensor {}: unknown file {}", name, sb.file));
      if (sb.offsets.size() != out.global_shape.size() || sb.shape.size() != out.global_shape.size()) {
        bad_manifest(p, fmt::format("tensor {}: a block's rank differs from the tensor's", name));
      }
      for (size_t d = 0; d < sb.shape.size(); ++d) {
        if (sb.offsets[d] > out.global_shape[d] - sb.shape[d]) {
          bad_manifest(p, fmt::format("tensor {}: block {} at offset {} exceeds dim {} of {}", name,
                                      shape_str(sb.shape), sb.offsets[d], d, shape_str(out.global_shape)));
        }
      }
      out.blocks.push_back(std::move(sb));
    }
  }
  state_json_ = field(p, m, "state", json::value_t::object, "the manifest").dump();
}

void CheckpointReader::open_files(FileSystem& fs) {
  for (const auto& [name, digest] : file_digests_) {
    const std::string path = dir_ + "/" + name;
    verify_file_digest(fs, path, digest);
    files_[name] = std::make_unique<SafetensorsFile>(SafetensorsFile::open(fs, path));
  }
  for (const auto& [name, t] : tensors_) {
    for (const SavedBlock& b : t.blocks) {
      const SafetensorsFile& f = *files_.at(b.file);
      const TensorInfo* info = f.find(b.key);
      if (info == nullptr || info->dtype != StDType::kF32 || info->shape != b.shape) {
        throw CheckpointError(fmt::format("{}: tensor {} (key {}) is missing or is not F32 of shape {}", f.path(), name,
                                          b.key, shape_str(b.shape)));
      }
    }
  }
}

CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;
CheckpointReader::~CheckpointReader() = default;

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

Shape CheckpointReader::global_shape(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw CheckpointError(fmt::format("{}: no tensor {}", dir_, name));
  return it->second.global_shape;
}

const std::vector<SavedBlock>& CheckpointReader::blocks(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw CheckpointError(fmt::format("{}: no tensor {}", dir_, name));
  return it->second.blocks;
}

void CheckpointReader::read_block(const std::string& name, const std::vector<int64_t>& offsets, const Shape& shape,
                                  float* out) const {
  assemble(name, offsets, shape, out);
}

void CheckpointReader::check_block(const std::string& name, const std::vector<int64_t>& offsets,
                                   const Shape& shape) const {
  assemble(name, offsets, shape, nullptr);
}

// read_block; with out == nullptr only the bounds and the coverage are checked.
void CheckpointReader::assemble(const std::string& name, const std::vector<int64_t>& offsets, const Shape& shape,
                                float* out) const {
  const Shape global = global_shape(name);
  bool ok = offsets.size() == global.size() && shape.size() == global.size();
  for (size_t d = 0; ok && d < global.size(); ++d) {
    ok = offsets[d] >= 0 && shape[d] >= 0 && offsets[d] <= global[d] - shape[d];
  }
  if (!ok) {
    throw CheckpointError(fmt::format("tensor {}: requested block {} at offsets [{}] is outside its global shape {}",
                                      name, shape_str(shape), fmt::join(offsets, ", "), shape_str(global)));
  }
  std::vector<uint8_t> covered(static_cast<size_t>(shape_numel(shape)), 0);
  for (const SavedBlock& b : tensors_.at(name).blocks) copy_overlap(b, offsets, shape, out, covered);
  const auto hole = std::find(covered.begin(), covered.end(), uint8_t{0});
  if (hole != covered.end()) {
    throw CheckpointError(
        fmt::format("{}: tensor {}: element {} of the requested block {} at offsets [{}] is in no saved block", dir_,
                    name, hole - covered.begin(), shape_str(shape), fmt::join(offsets, ", ")),
        "the checkpoint does not hold the whole tensor (a rank's blocks missing from the save?)");
  }
}

// Copies the intersection of saved block `b` with the requested block, one
// contiguous run along the last dimension at a time.
void CheckpointReader::copy_overlap(const SavedBlock& b, const std::vector<int64_t>& offsets, const Shape& shape,
                                    float* out, std::vector<uint8_t>& covered) const {
  const size_t dims = shape.size();
  const TensorInfo& info = files_.at(b.file)->get(b.key);
  if (dims == 0) {
    if (out) files_.at(b.file)->read_f32(info, 0, 1, std::span<float>(out, 1));
    covered[0] = 1;
    return;
  }
  std::vector<int64_t> lo(dims), hi(dims);
  for (size_t d = 0; d < dims; ++d) {
    lo[d] = std::max(offsets[d], b.offsets[d]);
    hi[d] = std::min(offsets[d] + shape[d], b.offsets[d] + b.shape[d]);
    if (lo[d] >= hi[d]) return;
  }
  std::vector<int64_t> idx = lo;  // global index of the run's first element
  const int64_t run = hi[dims - 1] - lo[dims - 1];
  while (true) {
    int64_t src = 0, dst = 0;
    for (size_t d = 0; d < dims; ++d) {
      src = src * b.shape[d] + (idx[d] - b.offsets[d]);
      dst = dst * shape[d] + (idx[d] - offsets[d]);
    }
    if (out) files_.at(b.file)->read_f32(info, src, run, std::span<float>(out + dst, static_cast<size_t>(run)));
    std::fill_n(covered.begin() + dst, run, uint8_t{1});
    size_t d = dims - 1;  // odometer over all but the last dim
    while (d > 0) {
      --d;
      if (++idx[d] < hi[d]) break;
      idx[d] = lo[d];
      if (d == 0) return;
    }
    if (dims == 1) return;
  }
}

}  // namespace mtrain::checkpoint

// HfModelReader: an HF model directory checked whole at open, then read as
// mtrain tensors (hf_model_dir.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <mutex>

#include "checkpoint/hf_model_dir.h"
#include "common/errors.h"

namespace mtrain::checkpoint {

namespace {

constexpr int64_t kMaxConfigBytes = int64_t{16} << 20;
constexpr int64_t kMaxIndexBytes = int64_t{64} << 20;

std::string read_text(FileSystem& fs, const std::string& path, int64_t max_bytes) {
  try {
    return fs.read_file(path, max_bytes);
  } catch (const IoError& e) {
    throw CheckpointError(fmt::format("cannot read {}: {}", path, e.what()));
  }
}

// Copies the block at `offsets` (shape `shape`) out of the row-major tensor `full` of shape `global`,
// one contiguous run along the last dimension at a time.
void copy_block(const float* full, const Shape& global, const std::vector<int64_t>& offsets, const Shape& shape,
                float* out) {
  const size_t dims = global.size();
  if (shape_numel(shape) == 0) return;
  if (dims == 0) {
    out[0] = full[0];
    return;
  }
  std::vector<int64_t> idx(dims, 0);  // index inside the block, last dim always 0
  const int64_t run = shape[dims - 1];
  for (int64_t dst = 0;; dst += run) {
    int64_t src = 0;
    for (size_t d = 0; d < dims; ++d) src = src * global[d] + offsets[d] + idx[d];
    std::memcpy(out + dst, full + src, static_cast<size_t>(run) * sizeof(float));
    size_t d = dims - 1;  // odometer over all but the last dim
    while (d > 0 && ++idx[d - 1] == shape[d - 1]) idx[--d] = 0;
    if (d == 0) return;
  }
}

}  // namespace

struct HfModelReader::Cache {
  std::mutex mu;
  std::string name;  // "" = empty
  std::vector<float> data;
};

HfModelReader::HfModelReader() : cache_(std::make_unique<Cache>()) {}
HfModelReader::HfModelReader(HfModelReader&&) noexcept = default;
HfModelReader& HfModelReader::operator=(HfModelReader&&) noexcept = default;
HfModelReader::~HfModelReader() = default;

HfModelReader HfModelReader::open(FileSystem& fs, const std::string& dir, int64_t padded_vocab) {
  HfModelReader r;
  r.dir_ = dir;
  const std::string config = dir + "/" + kHfConfigFile;
  if (!fs.exists(config))
    throw CheckpointError(fmt::format("{}: no {} in the model directory", dir, kHfConfigFile),
                          "a Hugging Face model directory holds config.json and model*.safetensors");
  r.shape_ = parse_hf_config(read_text(fs, config, kMaxConfigBytes), config);
  r.shape_.padded_vocab = padded_vocab;
  validate_hf_shape(r.shape_, config);
  r.open_weight_files(fs);
  r.check_complete();
  return r;
}

void HfModelReader::open_weight_files(FileSystem& fs) {
  const std::string single = dir_ + "/" + kHfSingleFile, index = dir_ + "/" + kHfIndexFile;
  if (fs.exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(fs, single)));
    for (const TensorInfo& t : files_[0]->tensors()) index_tensor(0, t);
    return;
  }
  if (!fs.exists(index))
    throw CheckpointError(fmt::format("{}: no {} and no {}", dir_, kHfSingleFile, kHfIndexFile),
                          "the model directory has no weights in safetensors format (.bin weights are not read)");
  const std::map<std::string, std::string> weight_map = parse_hf_index(read_text(fs, index, kMaxIndexBytes), index);
  std::map<std::string, size_t> file_numbers;
  for (const auto& [tensor, file] : weight_map) file_numbers.emplace(file, 0);
  for (auto& [file, number] : file_numbers) {
    number = files_.size();
    const std::string path = dir_ + "/" + file;
    if (!fs.exists(path))
      throw CheckpointError(fmt::format("{}: file {} named in {} is missing", dir_, file, kHfIndexFile),
                            "the download is incomplete");
    files_.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(fs, path)));
  }
  for (const auto& [tensor, file] : weight_map) {
    const SafetensorsFile& f = *files_[file_numbers.at(file)];
    const TensorInfo* info = f.find(tensor);
    if (info == nullptr)
      throw CheckpointError(
          fmt::format("{}: tensor '{}' is not in {}, where {} says it is", f.path(), tensor, file, kHfIndexFile));
    index_tensor(file_numbers.at(file), *info);
  }
  for (const auto& f : files_)
    for (const TensorInfo& t : f->tensors())
      if (weight_map.count(t.name) == 0 || files_[file_numbers.at(weight_map.at(t.name))].get() != f.get())
        throw CheckpointError(
            fmt::format("{}: tensor '{}' is not listed for this file in {}", f->path(), t.name, kHfIndexFile));
}

// Checks one tensor of file `file` against the architecture and records where it is.
void HfModelReader::index_tensor(size_t file, const TensorInfo& info) {
  const std::string& path = files_[file]->path();
  std::optional<HfSource> source;
  try {
    source = hf_source_for(info.name, shape_);
  } catch (const CheckpointError& e) {
    throw CheckpointError(fmt::format("{}: {}", path, e.what()),
                          fmt::format("{}/config.json describes a {} with {} layers; the weights do not match it", dir_,
                                      hf_arch_class(shape_.arch), shape_.num_layers));
  }
  if (!source) return;  // a tensor mtrain has no use for (tied lm_head, rotary inv_freq)
  const HfTensorMap m = hf_map_for_mcore(source->mcore_name, shape_);
  check_hf_shape(m, source->part, info.shape, path);
  if (!st_dtype_is_float16_or_32(info.dtype))
    throw CheckpointError(fmt::format("{}: tensor '{}' has dtype {}; weights must be F32, BF16 or F16", path, info.name,
                                      st_dtype_name(info.dtype)));
  if (!hf_tensors_.emplace(info.name, Location{file, &info}).second)
    throw CheckpointError(fmt::format("{}: tensor '{}' is stored twice", path, info.name));
}

void HfModelReader::check_complete() const {
  for (const HfTensorMap& m : hf_tensor_maps(shape_))
    for (const std::string& hf : m.hf_names)
      if (hf_tensors_.count(hf) == 0)
        throw CheckpointError(
            fmt::format("{}: tensor '{}' is missing (needed for {})", dir_, hf, m.mcore_name),
            fmt::format("config.json describes a {} with {} layers{}; the weight files are incomplete or belong to "
                        "another model",
                        hf_arch_class(shape_.arch), shape_.num_layers,
                        shape_.tie_word_embeddings ? ", tied embeddings" : ", untied lm_head"));
}

std::vector<std::string> HfModelReader::files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

std::vector<std::string> HfModelReader::names() const {
  std::vector<std::string> out;
  for (const HfTensorMap& m : hf_tensor_maps(shape_)) out.push_back(m.mcore_name);
  return out;
}

HfTensorMap HfModelReader::map_for(const std::string& name) const {
  try {
    return hf_map_for_mcore(name, shape_);
  } catch (const CheckpointError& e) {
    throw CheckpointError(fmt::format("{}: {}", dir_, e.what()), e.hint());
  }
}

bool HfModelReader::has(const std::string& name) const {
  try {
    hf_map_for_mcore(name, shape_);
    return true;
  } catch (const CheckpointError&) {
    return false;
  }
}

Shape HfModelReader::global_shape(const std::string& name) const { return map_for(name).mcore_shape; }

std::vector<float> HfModelReader::assemble(const HfTensorMap& m) const {
  std::vector<std::vector<float>> parts;
  std::vector<std::span<const float>> views;
  for (const std::string& hf : m.hf_names) {
    const Location& loc = hf_tensors_.at(hf);
    parts.emplace_back(static_cast<size_t>(loc.info->numel));
    files_[loc.file]->read_f32(*loc.info, parts.back());
  }
  for (const auto& p : parts) views.emplace_back(p);
  return tensor_from_hf(m, views);
}

void HfModelReader::read_block(const std::string& name, const std::vector<int64_t>& offsets, const Shape& shape,
                               float* out) const {
  const HfTensorMap m = map_for(name);
  const Shape& global = m.mcore_shape;
  bool ok = offsets.size() == global.size() && shape.size() == global.size();
  for (size_t d = 0; ok && d < global.size(); ++d)
    ok = offsets[d] >= 0 && shape[d] >= 0 && offsets[d] <= global[d] - shape[d];
  if (!ok)
    throw CheckpointError(fmt::format("{}: tensor {}: requested block {} at offsets [{}] is outside its shape {}", dir_,
                                      name, shape_str(shape), fmt::join(offsets, ", "), shape_str(global)));
  std::lock_guard<std::mutex> lock(cache_->mu);
  if (cache_->name != name) {
    cache_->name.clear();
    cache_->data = assemble(m);
    cache_->name = name;
  }
  copy_block(cache_->data.data(), global, offsets, shape, out);
}

std::vector<float> HfModelReader::read_full(const std::string& name) const {
  const Shape shape = global_shape(name);
  std::vector<float> out(static_cast<size_t>(shape_numel(shape)));
  read_block(name, std::vector<int64_t>(shape.size(), 0), shape, out.data());
  return out;
}

}  // namespace mtrain::checkpoint

#include "checkpoint/safetensors_header.h"

#include <algorithm>
#include <climits>
#include <set>
#include <tuple>

#include "common/errors.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace mtrain::checkpoint::detail {
namespace {

using json = nlohmann::json;

// A header has: the root object (depth 0), its values (1), their fields (2), array elements (3).
constexpr int kMaxDepth = 3;

// An untrusted string, shortened and with control bytes replaced, for a message.
std::string printable(std::string_view s) {
  constexpr size_t kMax = 100;
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
  }
  if (s.size() > kMax) out += "...";
  return out;
}

std::string show(const json& j) { return printable(j.dump(-1, ' ', false, json::error_handler_t::replace)); }

// Parses the JSON text with duplicate-key and nesting checks (nlohmann keeps
// the last of two equal keys silently; the format forbids duplicates).
json parse_json(std::string_view text, const std::string& path) {
  std::vector<std::set<std::string>> open_objects;
  std::string problem;
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    if (!problem.empty()) return true;  // keep parsing; the first problem is reported
    if (depth > kMaxDepth) problem = fmt::format("JSON nested deeper than a safetensors header ({} levels)", depth);
    if (event == json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == json::parse_event_t::object_end && !open_objects.empty()) open_objects.pop_back();
    if (event == json::parse_event_t::key && !open_objects.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second) problem = fmt::format("duplicate key '{}'", printable(key));
    }
    return true;
  };
  json root;
  try {
    root = json::parse(text.begin(), text.end(), check, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    fail_format(path, fmt::format("the header is not valid JSON: {}", e.what()));
  }
  if (!problem.empty()) fail_format(path, problem);
  if (!root.is_object()) fail_format(path, fmt::format("the header is a JSON {}, not an object", root.type_name()));
  return root;
}

bool to_nonnegative_int64(const json& j, int64_t* out) {
  if (j.is_number_unsigned()) {
    const auto u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (j.is_number_integer()) {
    *out = j.get<int64_t>();
    return *out >= 0;
  }
  return false;
}

const json& field(const json& obj, const char* key, const std::string& where, const std::string& path) {
  const auto it = obj.find(key);
  if (it == obj.end()) fail_format(path, fmt::format("{} has no \"{}\"", where, key));
  return *it;
}

StDType parse_dtype(const json& j, const std::string& where, const std::string& path) {
  if (!j.is_string()) fail_format(path, fmt::format("{}: dtype {} is not a string", where, show(j)));
  const auto t = st_dtype_from_name(j.get_ref<const std::string&>());
  if (!t) {
    fail_format(path, fmt::format("{}: unknown dtype {} (known: BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, "
                                  "I32, U32, F32, I64, U64, F64)",
                                  where, show(j)));
  }
  return *t;
}

Shape parse_shape(const json& j, const std::string& where, const std::string& path, int max_rank) {
  if (!j.is_array()) fail_format(path, fmt::format("{}: shape {} is not an array", where, show(j)));
  if (j.size() > static_cast<size_t>(max_rank)) {
    fail_format(path, fmt::format("{}: shape has {} dimensions, more than the {} allowed", where, j.size(), max_rank));
  }
  Shape shape;
  for (size_t i = 0; i < j.size(); ++i) {
    int64_t d = 0;
    if (!to_nonnegative_int64(j[i], &d)) {
      fail_format(path, fmt::format("{}: shape[{}] is {}, expected a non-negative integer", where, i, show(j[i])));
    }
    shape.push_back(d);
  }
  return shape;
}

TensorInfo parse_tensor(const std::string& name, const json& v, int64_t data_size, const std::string& path,
                        const SafetensorsLimits& limits) {
  const std::string where = fmt::format("tensor '{}'", printable(name));
  if (!v.is_object()) fail_format(path, fmt::format("{} is a JSON {}, expected an object", where, v.type_name()));
  for (const auto& item : v.items()) {
    if (item.key() != "dtype" && item.key() != "shape" && item.key() != "data_offsets") {
      fail_format(path, fmt::format("{} has an unknown field '{}'", where, printable(item.key())));
    }
  }
  TensorInfo t;
  t.name = name;
  t.dtype = parse_dtype(field(v, "dtype", where, path), where, path);
  t.shape = parse_shape(field(v, "shape", where, path), where, path, limits.max_rank);
  const json& offsets = field(v, "data_offsets", where, path);
  if (!offsets.is_array() || offsets.size() != 2 || !to_nonnegative_int64(offsets[0], &t.begin) ||
      !to_nonnegative_int64(offsets[1], &t.end)) {
    fail_format(path,
                fmt::format("{}: data_offsets {} is not [begin, end] of non-negative integers", where, show(offsets)));
  }
  if (t.begin > t.end)
    fail_format(path, fmt::format("{}: data_offsets [{}, {}] end before they begin", where, t.begin, t.end));
  if (t.end > data_size) {
    fail_format(path, fmt::format("{}: data_offsets [{}, {}] reach past the end of the {}-byte data section", where,
                                  t.begin, t.end, data_size));
  }
  int64_t nbytes = st_dtype_size(t.dtype);
  t.numel = 1;
  for (int64_t d : t.shape) {
    if (__builtin_mul_overflow(t.numel, d, &t.numel) || __builtin_mul_overflow(nbytes, d, &nbytes)) {
      fail_format(path, fmt::format("{}: shape {} has more elements than can be stored", where, shape_str(t.shape)));
    }
  }
  if (t.end - t.begin != nbytes) {
    fail_format(path, fmt::format("{}: data_offsets [{}, {}] hold {} bytes, but {} shape {} needs {}", where, t.begin,
                                  t.end, t.end - t.begin, st_dtype_name(t.dtype), shape_str(t.shape), nbytes));
  }
  return t;
}

SafetensorsMetadata parse_metadata(const json& v, const std::string& path) {
  SafetensorsMetadata m;
  if (v.is_null()) return m;
  if (!v.is_object()) fail_format(path, fmt::format("__metadata__ is a JSON {}, expected an object", v.type_name()));
  for (const auto& item : v.items()) {
    if (!item.value().is_string()) {
      fail_format(path, fmt::format("__metadata__ value of '{}' is a JSON {}; only strings are allowed",
                                    printable(item.key()), item.value().type_name()));
    }
    m.emplace(item.key(), item.value().get<std::string>());
  }
  return m;
}

// The tensors must tile [0, data_size) exactly, in offset order.
void check_tiling(std::vector<TensorInfo>& tensors, int64_t data_size, const std::string& path) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  int64_t covered = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : tensors) {
    if (t.begin < covered) {
      fail_format(path, fmt::format("tensor '{}' data_offsets [{}, {}] overlap tensor '{}' data_offsets [{}, {}]",
                                    printable(t.name), t.begin, t.end, printable(prev->name), prev->begin, prev->end));
    }
    if (t.begin > covered) {
      fail_format(path, fmt::format("data section bytes [{}, {}] before tensor '{}' belong to no tensor (holes are not "
                                    "allowed)",
                                    covered, t.begin, printable(t.name)));
    }
    covered = t.end;
    prev = &t;
  }
  if (covered != data_size) {
    fail_format(path, fmt::format("the data section is {} bytes, but the tensors cover {} (trailing bytes are not "
                                  "allowed)",
                                  data_size, covered));
  }
}

}  // namespace

void fail_format(const std::string& path, const std::string& what) {
  throw CheckpointError(fmt::format("{}: invalid safetensors file: {}", path, what),
                        "the file is damaged or not a safetensors file");
}

ParsedHeader parse_safetensors_header(std::string_view header, int64_t data_size, const std::string& path,
                                      const SafetensorsLimits& limits) {
  if (header.empty() || header.front() != '{') {
    fail_format(path, fmt::format("the header must start with '{{', found byte 0x{:02x}",
                                  header.empty() ? 0 : static_cast<unsigned char>(header.front())));
  }
  const json root = parse_json(header, path);
  ParsedHeader out;
  for (const auto& item : root.items()) {
    if (item.key() == "__metadata__") {
      out.metadata = parse_metadata(item.value(), path);
    } else {
      out.tensors.push_back(parse_tensor(item.key(), item.value(), data_size, path, limits));
    }
  }
  check_tiling(out.tensors, data_size, path);
  return out;
}

}  // namespace mtrain::checkpoint::detail

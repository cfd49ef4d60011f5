// .npy writer and strict reader (npy_file.h).
#include "data/npy_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/errors.h"

namespace mtrain::data {

namespace {

template <typename T>
void write_any(const std::string& path, const std::vector<T>& v, const char* descr, int64_t cols) {
  const int64_t n = static_cast<int64_t>(v.size());
  const std::string header =
      npy_header(descr, cols > 0 ? std::vector<int64_t>{n / cols, cols} : std::vector<int64_t>{n});
  // A name of its own per process: ranks of one job may build the same cache at once.
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
    if (!out.flush())
      throw DataError(fmt::format("{}: cannot write the dataset index cache", tmp),
                      "check --data_cache_path (it must be writable)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw DataError(fmt::format("{}: cannot write: {}", path, ec.message()), "check --data_cache_path");
}

template <typename T>
std::vector<T> read_any(const std::string& path, const char* descr, int64_t cols) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bad = [&](const std::string& why) -> DataError {
    return DataError(fmt::format("{}: {}", path, why),
                     "delete the index cache directory; it is rebuilt on the next run");
  };
  if (!in.good() && !in.eof()) throw bad("cannot read");
  if (bytes.size() < 10 || bytes.compare(0, 8, npy_header(descr, {0}).substr(0, 8)) != 0) throw bad("not an .npy file");
  const size_t hlen = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
  if (10 + hlen > bytes.size()) throw bad("truncated header");
  const size_t data = bytes.size() - 10 - hlen;
  if (data % (sizeof(T) * (cols > 0 ? cols : 1)) != 0) throw bad("data size is not a whole number of rows");
  const int64_t n = static_cast<int64_t>(data / sizeof(T));
  if (bytes.compare(0, 10 + hlen,
                    npy_header(descr, cols > 0 ? std::vector<int64_t>{n / cols, cols} : std::vector<int64_t>{n})) != 0)
    throw bad(fmt::format("header does not describe {} values of {}", n, descr));
  std::vector<T> out(static_cast<size_t>(n));
  if (n) std::memcpy(out.data(), bytes.data() + 10 + hlen, data);
  return out;
}

}  // namespace

// "\x93NUMPY" 1 0, header length (uint16), then the header dict padded with
// spaces and ended by '\n' so the data starts at a multiple of 64 bytes.
std::string npy_header(const char* descr, const std::vector<int64_t>& shape) {
  // numpy's tuple: "(n,)" for one dimension, "(a, b, ...)" otherwise.
  std::string dims = shape.size() == 1 ? fmt::format("{},", shape[0]) : fmt::format("{}", fmt::join(shape, ", "));
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
  const size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict.push_back('\n');
  std::string h = "\x93NUMPY";
  h.push_back('\x01');
  h.push_back('\x00');
  h.push_back(static_cast<char>(dict.size() & 0xff));
  h.push_back(static_cast<char>(dict.size() >> 8));
  return h + dict;
}

void write_npy(const std::string& path, const std::vector<int64_t>& v, int64_t cols) {
  write_any(path, v, "<i8", cols);
}
void write_npy(const std::string& path, const std::vector<int32_t>& v) { write_any(path, v, "<i4", 0); }
std::vector<int64_t> read_npy_int64(const std::string& path, int64_t cols) {
  return read_any<int64_t>(path, "<i8", cols);
}
std::vector<int32_t> read_npy_int32(const std::string& path) { return read_any<int32_t>(path, "<i4", 0); }

}  // namespace mtrain::data

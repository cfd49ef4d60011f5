#include "tensorboard/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <climits>

namespace mtrain::tensorboard {

// ISA-L's crc32_iscsi takes the running register and returns it without the
// final inversion: seeding with ~0 and inverting the result gives the
// standard CRC-32C (tests/tensorboard checks the RFC 3720 B.4 values).
uint32_t crc32c(std::string_view data) {
  unsigned int reg = 0xFFFFFFFFu;
  auto* p = reinterpret_cast<unsigned char*>(const_cast<char*>(data.data()));
  size_t left = data.size();
  while (left > 0) {  // its length is an int
    const int n = static_cast<int>(std::min<size_t>(left, INT_MAX));
    reg = crc32_iscsi(p, n, reg);
    p += n;
    left -= static_cast<size_t>(n);
  }
  return reg ^ 0xFFFFFFFFu;
}

uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

static void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

std::string frame_record(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  put_le(out, payload.size(), 8);
  put_le(out, mask_crc(crc32c(std::string_view(out.data(), 8))), 4);
  out.append(payload);
  put_le(out, mask_crc(crc32c(payload)), 4);
  return out;
}

}  // namespace mtrain::tensorboard

// CRC-32C (Castagnoli, the iSCSI CRC of RFC 3720) and the TFRecord framing
// TensorBoard event files use around each serialized Event:
//   uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes,
//   the data, uint32 masked CRC-32C of the data.
// The CRC comes from Intel ISA-L (Debian's libisal), hidden in crc32c.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mtrain::tensorboard {

// The standard CRC-32C: initial value and final XOR 0xFFFFFFFF, reflected
// (check value of "123456789": 0xE3069283).
uint32_t crc32c(std::string_view data);
// TensorFlow's masked form: rotate right by 15 and add 0xA282EAD8, so a CRC
// stored in data that is itself checksummed does not cancel out.
uint32_t mask_crc(uint32_t crc);
// One TFRecord: length, its masked CRC, `payload`, its masked CRC.
std::string frame_record(std::string_view payload);

}  // namespace mtrain::tensorboard

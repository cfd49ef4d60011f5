// Where configs/ lives, and device profiles read from configs/devices/.
//
// A device profile is a plain struct here (lib/config must not depend on
// lib/device); the trainer copies it into device::DeviceProfile field by field.
#pragma once

#include <cstdint>
#include <string>

namespace mtrain::config {

// The configs/ directory: $MTRAIN_CONFIG_DIR, else <source dir>/configs (compiled
// in), else ./configs. Returns "" if none exists.
std::string find_config_dir();

struct DeviceProfileSpec {
  std::string name;
  int64_t hbm_bytes = 0;
  double peak_tflops_16bit = 0;  // cube unit, bf16/fp16
  double peak_tflops_fp32 = 0;
  double hbm_gbps = 0;              // GB/s
  double intra_node_link_gbps = 0;  // HCCS per NPU pair, GB/s
  double inter_node_link_gbps = 0;  // RoCE per NPU per direction, GB/s
  int devices_per_node = 8;
  int64_t allocator_block_bytes = 2LL << 20;
};

// `name_or_path`: a profile name (configs/devices/<name>.yaml) or a YAML file.
// Keys: name, hbm_bytes (or hbm_gib / hbm_mib), peak_tflops_16bit, peak_tflops_fp32,
// hbm_gbps, intra_node_link_gbps, inter_node_link_gbps, devices_per_node,
// allocator_block_bytes. Throws ConfigError (file:line:col) on unknown keys,
// bad values or an unknown profile (listing the available ones).
DeviceProfileSpec load_device_profile(const std::string& name_or_path, const std::string& config_dir = "");

}  // namespace mtrain::config

// Where configs/ lives, and device profiles read from configs/devices/.
//
// The profile struct is lib/device's (device/profile.h: the simulated NPU is
// described there); only the YAML reading lives here, with yaml-cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/profile.h"

namespace mtrain::config {

// The configs/ directory: $MTRAIN_CONFIG_DIR, else the installed one beside the
// executable (<bin>/../share/mtrain/configs, `cmake --install`), else
// <source dir>/configs (compiled in), else ./configs. Returns "" if none exists.
std::string find_config_dir();

// The names of the YAML files in `dir` (file names without ".yaml"), sorted;
// empty when `dir` does not exist. What presets and profiles can be named.
std::vector<std::string> yaml_names_in(const std::string& dir);

using DeviceProfileSpec = device::DeviceProfile;

// The profile file `name_or_path` names: a value holding '/' or ending in
// .yaml / .yml is a file (ConfigError when it does not exist); else an
// existing file of that name, else configs/devices/<name>.yaml (ConfigError
// listing the available profiles when there is none).
std::string resolve_device_profile_path(const std::string& name_or_path, const std::string& config_dir = "");

// `name_or_path`: a profile name (configs/devices/<name>.yaml) or a YAML file.
// Keys: name, chip_name, hbm_bytes (or hbm_gib / hbm_mib), peak_tflops_16bit,
// peak_tflops_fp32, hbm_gbps, intra_node_link_gbps, inter_node_link_gbps,
// intra_node_link, intra_node_topology (ring, the default | full_mesh |
// switch: device/profile.h), devices_per_node, allocator_block_bytes,
// cpu_cores_per_node, cpu_affinity (one "first-last" per device), the shape
// model's compute_units, gemm_tile_m, gemm_tile_n, attention_block,
// tp_overlap_units, dp_comm_units, all_gather_bus_gbps / all_reduce_bus_gbps ([[ranks,
// GB/s], ...]), and an optional `cost:` map (compute_efficiency,
// flash_forward_efficiency, flash_backward_efficiency, memory_efficiency,
// intra_link_efficiency, inter_link_efficiency, launch_overhead_us,
// comm_latency_us, intra_step_latency_us, inter_step_latency_us,
// ll_latency_us, ll_intra_step_latency_us, ll_inter_step_latency_us,
// ll_bandwidth_share, tree_bandwidth_share, host_dispatch_us,
// host_dispatch_us_by_task_queue; defaults in device/profile.h), and an
// optional `runtime:` map (device_reserved_mib, context_mib, workspace_mib,
// collective_library none | hccl | nccl, hccl_buffsize_mb, nccl_pair_mib,
// nccl_group_mib, fragmentation, memory_margin: device/profile.h
// RuntimeMemory). Throws ConfigError
// (file:line:col) on unknown keys, bad values or an unknown profile (listing
// the available ones).
//
// A profile with cost.host_dispatch_us_by_task_queue (Ascend: the host's time
// per op at each TASK_QUEUE_ENABLE level) takes the level from the run's
// environment (TASK_QUEUE_ENABLE, the config's ENV block; unset: 1, torch_npu's
// default): apply_task_queue.
DeviceProfileSpec load_device_profile(const std::string& name_or_path, const std::string& config_dir = "");

// Sets p.cost.host_dispatch_s and p.task_queue_enable from TASK_QUEUE_ENABLE's
// value `env` (null or empty: 1) when the profile has the by-level table;
// ConfigError naming the variable for a value other than 0, 1 or 2.
void apply_task_queue(DeviceProfileSpec& p, const char* env);

// Sets p.runtime.hccl_buffsize_bytes from HCCL_BUFFSIZE's value `env` (MB;
// null or empty: the profile's, 200) when the profile's collective library
// is HCCL; ConfigError naming the variable for anything but a positive
// whole number.
void apply_hccl_buffsize(DeviceProfileSpec& p, const char* env);

}  // namespace mtrain::config

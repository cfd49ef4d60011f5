// The simulated NPU: one Device per rank, with a profile (profile.h: HBM
// capacity, peak rates, links) and an HBM allocator that accounts every byte by category.
// Host storage is always fp32; the device accounts the bytes the emulated
// dtype would take on the NPU. Exceeding capacity throws OutOfMemoryError
// with a per-category breakdown, like torch_npu's OOM message.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "device/profile.h"

namespace mtrain::device {

enum class MemCategory : int { kWeights, kGrads, kOptimizer, kActivations, kCommBuffers, kOther, kCount };
const char* mem_category_name(MemCategory c);

// What a device holds outside the caching allocator (profile.h
// RuntimeMemory): held once, never given back.
enum class RuntimeKind : int { kDeviceReserved, kContext, kWorkspaces, kCollectiveBuffers, kCount };
const char* runtime_kind_name(RuntimeKind k);

struct MemoryStats {
  int64_t allocated = 0;
  int64_t max_allocated = 0;
  int64_t reserved = 0;
  int64_t max_reserved = 0;
  std::array<int64_t, static_cast<int>(MemCategory::kCount)> by_category{};
  std::array<int64_t, static_cast<int>(RuntimeKind::kCount)> runtime{};
  int communicators = 0;  // the communicators whose buffers are held
  // The host memory the real run's tensors take (the simulated device's math
  // is fp32 on the CPU): counted in a dry run too, where nothing is allocated.
  int64_t host = 0, max_host = 0;
  // What live buffers would need beyond their charge in the worst case they
  // are sized for on the host (Tensor's charged_numel): the MoE expert
  // buffers if routing collapses onto one rank's experts.
  int64_t contingent = 0;
  int64_t runtime_bytes() const;
  // What the device holds at its peak: the allocator's peak reserved plus the runtime's.
  int64_t device_peak() const { return max_reserved + runtime_bytes(); }
};

class Device {
 public:
  // Holds the profile's runtime context and workspaces from the start.
  Device(DeviceProfile profile, int index);
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Accounts `bytes` for `what` (and `host_bytes` of the host storage a real
  // run gives it); throws OutOfMemoryError naming `what` and the breakdown.
  void allocate(int64_t bytes, MemCategory category, const std::string& what, int64_t host_bytes = 0);
  // Gives back an allocation made with the same bytes, category, name and host bytes.
  void release(int64_t bytes, MemCategory category, const std::string& what, int64_t host_bytes = 0);
  // Adds (or, negative, gives back) contingent bytes: MemoryStats::contingent.
  void add_contingent(int64_t bytes) { stats_.contingent += bytes; }
  // The live bytes of a category by allocation name (allocations of one name
  // summed), in name order: what the dry run's report breaks a category into.
  const std::map<std::string, int64_t>& live_by_name(MemCategory category) const {
    return live_[static_cast<int>(category)];
  }

  // The first collective or transfer on communicator `group` of
  // `group_size` ranks: its library buffers are held from then on (as HCCL
  // and NCCL set a communicator up on its first use). Again: nothing.
  void use_communicator(const std::string& group, int group_size);

  // The communicators whose buffers are held, by name.
  const std::set<std::string>& communicators() const { return communicators_; }

  const DeviceProfile& profile() const { return profile_; }
  int index() const { return index_; }
  const MemoryStats& stats() const { return stats_; }
  std::string name() const;  // e.g. "npu:0 (Ascend910B3)"
  // Human-readable breakdown by category in MiB; runtime_breakdown: what is held outside the allocator.
  std::string breakdown() const;
  std::string runtime_breakdown() const;

 private:
  DeviceProfile profile_;
  int index_;
  void hold_runtime(RuntimeKind kind, int64_t bytes, const std::string& what);
  [[noreturn]] void out_of_memory(int64_t bytes, const std::string& what, const std::string& kind) const;

  MemoryStats stats_;
  std::set<std::string> communicators_;
  std::array<std::map<std::string, int64_t>, static_cast<int>(MemCategory::kCount)> live_;
};

}  // namespace mtrain::device

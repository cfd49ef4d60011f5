// The simulated NPU: one Device per rank, with a profile (profile.h: HBM
// capacity, peak rates, links) and an HBM allocator that accounts every byte by category.
// Host storage is always fp32; the device accounts the bytes the emulated
// dtype would take on the NPU. Exceeding capacity throws OutOfMemoryError
// with a per-category breakdown, like torch_npu's OOM message.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "device/profile.h"

namespace mtrain::device {

enum class MemCategory : int { kWeights, kGrads, kOptimizer, kActivations, kCommBuffers, kOther, kCount };
const char* mem_category_name(MemCategory c);

struct MemoryStats {
  int64_t allocated = 0;
  int64_t max_allocated = 0;
  int64_t reserved = 0;
  int64_t max_reserved = 0;
  std::array<int64_t, static_cast<int>(MemCategory::kCount)> by_category{};
};

class Device {
 public:
  Device(DeviceProfile profile, int index) : profile_(std::move(profile)), index_(index) {}
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Accounts `bytes` for `what`; throws OutOfMemoryError naming `what` and the breakdown.
  void allocate(int64_t bytes, MemCategory category, const std::string& what);
  // Gives back an allocation made with the same bytes, category and name.
  void release(int64_t bytes, MemCategory category, const std::string& what);
  // The live bytes of a category by allocation name (allocations of one name
  // summed), in name order: what the dry run's report breaks a category into.
  const std::map<std::string, int64_t>& live_by_name(MemCategory category) const {
    return live_[static_cast<int>(category)];
  }

  const DeviceProfile& profile() const { return profile_; }
  int index() const { return index_; }
  const MemoryStats& stats() const { return stats_; }
  std::string name() const;  // e.g. "npu:0 (Ascend910B3)"
  // Human-readable breakdown by category in MiB.
  std::string breakdown() const;

 private:
  DeviceProfile profile_;
  int index_;
  MemoryStats stats_;
  std::array<std::map<std::string, int64_t>, static_cast<int>(MemCategory::kCount)> live_;
};

}  // namespace mtrain::device

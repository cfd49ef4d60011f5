#include "device/device.h"

#include <fmt/format.h>

#include "common/errors.h"

namespace mtrain::device {

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::kWeights:
      return "weights";
    case MemCategory::kGrads:
      return "gradients";
    case MemCategory::kOptimizer:
      return "optimizer states";
    case MemCategory::kActivations:
      return "activations";
    case MemCategory::kCommBuffers:
      return "communication buffers";
    case MemCategory::kOther:
      return "other";
    case MemCategory::kCount:
      break;
  }
  return "?";
}

static double mib(int64_t b) { return static_cast<double>(b) / (1 << 20); }

std::string Device::name() const { return fmt::format("npu:{} ({})", index_, profile_.name); }

std::string Device::breakdown() const {
  std::string s;
  for (int c = 0; c < static_cast<int>(MemCategory::kCount); ++c) {
    if (stats_.by_category[c] == 0) continue;
    s += fmt::format("    {:<22} {:>12.2f} MiB\n", mem_category_name(static_cast<MemCategory>(c)),
                     mib(stats_.by_category[c]));
  }
  return s;
}

void Device::allocate(int64_t bytes, MemCategory category, const std::string& what) {
  if (bytes < 0) throw Error(ExitCode::kInternal, "negative allocation for " + what);
  const int64_t block = profile_.allocator_block_bytes;
  int64_t new_allocated = stats_.allocated + bytes;
  // Reserved memory follows a caching allocator: it only grows, in whole blocks.
  int64_t needed_reserved = (new_allocated + block - 1) / block * block;
  int64_t new_reserved = std::max(stats_.reserved, needed_reserved);
  if (new_reserved > profile_.hbm_bytes) {
    throw OutOfMemoryError(
        fmt::format("{} out of memory: tried to allocate {:.2f} MiB for {} ({}); HBM capacity {:.2f} MiB, "
                    "already allocated {:.2f} MiB, reserved {:.2f} MiB. Allocated by category:\n{}  This request:\n"
                    "    {:<22} {:>12.2f} MiB ({})",
                    name(), mib(bytes), what, mem_category_name(category), mib(profile_.hbm_bytes),
                    mib(stats_.allocated), mib(stats_.reserved), breakdown(), mem_category_name(category), mib(bytes),
                    what),
        "reduce --micro_batch_size, --seq_length or the model size; use --recompute_granularity full; "
        "or plan the job with more devices (tensor/pipeline parallelism)");
  }
  stats_.allocated = new_allocated;
  stats_.reserved = new_reserved;
  stats_.by_category[static_cast<int>(category)] += bytes;
  live_[static_cast<int>(category)][what] += bytes;
  stats_.max_allocated = std::max(stats_.max_allocated, stats_.allocated);
  stats_.max_reserved = std::max(stats_.max_reserved, stats_.reserved);
}

void Device::release(int64_t bytes, MemCategory category, const std::string& what) {
  stats_.allocated -= bytes;
  stats_.by_category[static_cast<int>(category)] -= bytes;
  auto& live = live_[static_cast<int>(category)];
  if (auto it = live.find(what); it != live.end() && (it->second -= bytes) == 0) live.erase(it);
}

}  // namespace mtrain::device

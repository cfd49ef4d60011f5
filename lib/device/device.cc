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

const char* runtime_kind_name(RuntimeKind k) {
  switch (k) {
    case RuntimeKind::kDeviceReserved:
      return "reserved by the device";
    case RuntimeKind::kContext:
      return "runtime context";
    case RuntimeKind::kWorkspaces:
      return "library workspaces";
    case RuntimeKind::kCollectiveBuffers:
      return "collective library buffers";
    case RuntimeKind::kCount:
      break;
  }
  return "?";
}

int64_t MemoryStats::runtime_bytes() const {
  int64_t sum = 0;
  for (int64_t b : runtime) sum += b;
  return sum;
}

static double mib(int64_t b) { return static_cast<double>(b) / (1 << 20); }

Device::Device(DeviceProfile profile, int index) : profile_(std::move(profile)), index_(index) {
  hold_runtime(RuntimeKind::kDeviceReserved, profile_.runtime.device_reserved_bytes, "reserved by the device");
  hold_runtime(RuntimeKind::kContext, profile_.runtime.context_bytes, "runtime context");
  hold_runtime(RuntimeKind::kWorkspaces, profile_.runtime.workspace_bytes, "library workspaces");
}

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

std::string Device::runtime_breakdown() const {
  std::string s;
  for (int k = 0; k < static_cast<int>(RuntimeKind::kCount); ++k) {
    if (stats_.runtime[k] == 0) continue;
    s += fmt::format("    {:<26} {:>12.2f} MiB\n", runtime_kind_name(static_cast<RuntimeKind>(k)),
                     mib(stats_.runtime[k]));
  }
  return s;
}

void Device::out_of_memory(int64_t bytes, const std::string& what, const std::string& kind) const {
  const std::string runtime = runtime_breakdown();
  throw OutOfMemoryError(
      fmt::format(
          "{} out of memory: tried to allocate {:.2f} MiB for {} ({}); HBM capacity {:.2f} MiB, "
          "already allocated {:.2f} MiB, reserved {:.2f} MiB{}. Allocated by category:\n{}{}  This request:\n"
          "    {:<22} {:>12.2f} MiB ({})",
          name(), mib(bytes), what, kind, mib(profile_.hbm_bytes), mib(stats_.allocated), mib(stats_.reserved),
          runtime.empty() ? "" : fmt::format(", held outside the allocator {:.2f} MiB", mib(stats_.runtime_bytes())),
          breakdown(), runtime.empty() ? "" : "  Held outside the allocator:\n" + runtime, kind, mib(bytes), what),
      "reduce --micro_batch_size, --seq_length or the model size; use --recompute_granularity full; "
      "or plan the job with more devices (tensor/pipeline parallelism)");
}

void Device::hold_runtime(RuntimeKind kind, int64_t bytes, const std::string& what) {
  if (bytes <= 0) return;
  if (stats_.reserved + stats_.runtime_bytes() + bytes > profile_.hbm_bytes)
    out_of_memory(bytes, what, runtime_kind_name(kind));
  stats_.runtime[static_cast<int>(kind)] += bytes;
}

void Device::use_communicator(const std::string& group, int group_size) {
  const int64_t bytes = profile_.runtime.communicator_bytes(group_size);
  if (bytes == 0 || !communicators_.insert(group).second) return;
  hold_runtime(RuntimeKind::kCollectiveBuffers, bytes, fmt::format("the {} communicator's buffers", group));
  ++stats_.communicators;
}

void Device::allocate(int64_t bytes, MemCategory category, const std::string& what, int64_t host_bytes) {
  if (bytes < 0) throw Error(ExitCode::kInternal, "negative allocation for " + what);
  const int64_t block = profile_.allocator_block_bytes;
  int64_t new_allocated = stats_.allocated + bytes;
  // Reserved memory follows a caching allocator: it only grows, in whole
  // blocks, and holds what fragmentation keeps from reuse beside the allocated.
  const auto fragmented = static_cast<int64_t>(static_cast<double>(new_allocated) * profile_.runtime.fragmentation);
  int64_t needed_reserved = (new_allocated + fragmented + block - 1) / block * block;
  int64_t new_reserved = std::max(stats_.reserved, needed_reserved);
  if (new_reserved + stats_.runtime_bytes() > profile_.hbm_bytes)
    out_of_memory(bytes, what, mem_category_name(category));
  stats_.allocated = new_allocated;
  stats_.reserved = new_reserved;
  stats_.by_category[static_cast<int>(category)] += bytes;
  live_[static_cast<int>(category)][what] += bytes;
  stats_.max_allocated = std::max(stats_.max_allocated, stats_.allocated);
  stats_.max_reserved = std::max(stats_.max_reserved, stats_.reserved);
  stats_.host += host_bytes;
  stats_.max_host = std::max(stats_.max_host, stats_.host);
}

void Device::release(int64_t bytes, MemCategory category, const std::string& what, int64_t host_bytes) {
  stats_.allocated -= bytes;
  stats_.host -= host_bytes;
  stats_.by_category[static_cast<int>(category)] -= bytes;
  auto& live = live_[static_cast<int>(category)];
  if (auto it = live.find(what); it != live.end() && (it->second -= bytes) == 0) live.erase(it);
}

}  // namespace mtrain::device

// The simulated device's memory beside the tensors (device/profile.h
// RuntimeMemory): held from the start or from a communicator's first use,
// never given back, counted against the capacity with the allocator's
// reserve, and named in an out-of-memory error.
#include <gtest/gtest.h>

#include <string>

#include "common/errors.h"
#include "device/device.h"

namespace mtrain::device {
namespace {

constexpr int64_t kMiB = 1 << 20;

DeviceProfile hccl_profile(int64_t hbm) {
  DeviceProfile p;
  p.hbm_bytes = hbm;
  p.allocator_block_bytes = 2 * kMiB;
  p.runtime.device_reserved_bytes = 10 * kMiB;
  p.runtime.context_bytes = 3 * kMiB;
  p.runtime.workspace_bytes = kMiB;
  p.runtime.library = CollectiveLibrary::kHccl;
  p.runtime.hccl_buffsize_bytes = 5 * kMiB;
  return p;
}

TEST(RuntimeMemory, HeldFromTheStartAndPerCommunicatorOnFirstUse) {
  Device dev(hccl_profile(1024 * kMiB), 0);
  const auto at = [&](RuntimeKind k) { return dev.stats().runtime[static_cast<int>(k)]; };
  EXPECT_EQ(at(RuntimeKind::kDeviceReserved), 10 * kMiB);
  EXPECT_EQ(at(RuntimeKind::kContext), 3 * kMiB);
  EXPECT_EQ(at(RuntimeKind::kWorkspaces), kMiB);
  EXPECT_EQ(at(RuntimeKind::kCollectiveBuffers), 0);
  dev.use_communicator("tp", 2);
  dev.use_communicator("tp", 2);     // the same communicator again: nothing more
  dev.use_communicator("dp", 1);     // a group of one rank runs no library collective
  dev.use_communicator("world", 8);  // 2 x HCCL_BUFFSIZE each
  EXPECT_EQ(at(RuntimeKind::kCollectiveBuffers), 2 * 2 * 5 * kMiB);
  EXPECT_EQ(dev.stats().communicators, 2);
  EXPECT_EQ(dev.communicators(), (std::set<std::string>{"tp", "world"}));
  EXPECT_EQ(dev.stats().runtime_bytes(), (10 + 3 + 1 + 20) * kMiB);
  // Outside the allocator: allocated and reserved do not see it; the device's peak does.
  dev.allocate(4 * kMiB, MemCategory::kWeights, "w");
  EXPECT_EQ(dev.stats().max_allocated, 4 * kMiB);
  EXPECT_EQ(dev.stats().max_reserved, 4 * kMiB);
  EXPECT_EQ(dev.stats().device_peak(), (4 + 34) * kMiB);
}

TEST(RuntimeMemory, NcclPairAndLargerCommunicators) {
  DeviceProfile p;
  p.runtime.library = CollectiveLibrary::kNccl;
  p.runtime.nccl_pair_bytes = 544 * kMiB;
  p.runtime.nccl_group_bytes = 688 * kMiB;
  EXPECT_EQ(p.runtime.communicator_bytes(1), 0);
  EXPECT_EQ(p.runtime.communicator_bytes(2), 544 * kMiB);
  EXPECT_EQ(p.runtime.communicator_bytes(3), 688 * kMiB);
  EXPECT_EQ(p.runtime.communicator_bytes(64), 688 * kMiB);
  p.runtime.library = CollectiveLibrary::kNone;
  EXPECT_EQ(p.runtime.communicator_bytes(8), 0);
}

// Fragmentation: the reserve grows with the allocated by the profile's share,
// rounded to whole blocks, and never shrinks.
TEST(RuntimeMemory, FragmentationWidensTheReserve) {
  DeviceProfile p;
  p.hbm_bytes = 1024 * kMiB;
  p.allocator_block_bytes = 2 * kMiB;
  p.runtime.fragmentation = 0.25;
  Device dev(p, 0);
  dev.allocate(100 * kMiB, MemCategory::kActivations, "a");
  EXPECT_EQ(dev.stats().max_reserved, 126 * kMiB);  // 100 + 25 = 125, to the next 2 MiB block
  dev.release(100 * kMiB, MemCategory::kActivations, "a");
  dev.allocate(10 * kMiB, MemCategory::kActivations, "b");
  EXPECT_EQ(dev.stats().reserved, 126 * kMiB);
}

// The capacity holds the allocator's reserve and the runtime together: an
// allocation that fits the HBM alone but not beside the runtime fails, and
// the error names what the runtime holds.
TEST(RuntimeMemory, OutOfMemoryCountsWhatTheRuntimeHolds) {
  Device dev(hccl_profile(64 * kMiB), 0);
  dev.use_communicator("tp", 2);  // 14 + 10 MiB held: 40 MiB left
  dev.allocate(40 * kMiB, MemCategory::kWeights, "weights");
  try {
    dev.allocate(2 * kMiB, MemCategory::kActivations, "logits");
    FAIL() << "42 MiB allocated beside 24 MiB held fit in 64 MiB";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("held outside the allocator 24.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("Held outside the allocator:\n"), std::string::npos) << m;
    EXPECT_NE(m.find("collective library buffers        10.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("reserved by the device"), std::string::npos) << m;
  }
  // A communicator set up when the device is full fails the same way, naming it.
  try {
    dev.use_communicator("dp", 4);
    FAIL() << "the dp communicator's 10 MiB fit beside 64 MiB in use";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("for the dp communicator's buffers (collective library buffers)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mtrain::device

// Simulated device visibility and binding: ASCEND_RT_VISIBLE_DEVICES (and the
// CUDA_VISIBLE_DEVICES alias) narrow a node's pool, local rank N takes the
// N-th visible device, and every mistake is exit code 8 naming the variable.
#include <gtest/gtest.h>

#include "common/errors.h"
#include "mtrain/launch/launch_devices.h"

namespace mtrain::launch {
namespace {

// The DistributedError message of `f`, or "<no error>".
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const DistributedError& e) {
    EXPECT_EQ(e.code(), ExitCode::kDistributed);
    return e.what();
  }
  return "<no error>";
}

TEST(VisibleDevices, WholePoolWhenNothingIsSet) {
  const VisibleDevices v = visible_devices(Env(), 8);
  EXPECT_EQ(v.ids, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(v.describe(), "npu:0-7 (all 8)");
  for (int r = 0; r < 8; ++r) EXPECT_EQ(bind_local_rank(v, r, 8), r);
}

TEST(VisibleDevices, LocalRankTakesTheNthVisibleDevice) {
  const VisibleDevices v = visible_devices(Env({{"ASCEND_RT_VISIBLE_DEVICES", "4, 6,2"}}), 8);
  EXPECT_EQ(v.ids, (std::vector<int>{4, 6, 2}));
  EXPECT_EQ(v.describe(), "npu:4,6,2 (ASCEND_RT_VISIBLE_DEVICES=4, 6,2)");
  EXPECT_EQ(bind_local_rank(v, 0, 3), 4);
  EXPECT_EQ(bind_local_rank(v, 1, 3), 6);
  EXPECT_EQ(bind_local_rank(v, 2, 3), 2);
}

TEST(VisibleDevices, CudaIsAnAliasAndAscendWins) {
  EXPECT_EQ(visible_devices(Env({{"CUDA_VISIBLE_DEVICES", "3"}}), 8).ids, (std::vector<int>{3}));
  std::vector<std::string> warnings;
  const VisibleDevices v =
      visible_devices(Env({{"CUDA_VISIBLE_DEVICES", "3"}, {"ASCEND_RT_VISIBLE_DEVICES", "1"}}), 8, &warnings);
  EXPECT_EQ(v.variable, "ASCEND_RT_VISIBLE_DEVICES");
  EXPECT_EQ(v.ids, (std::vector<int>{1}));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("differ; using ASCEND_RT_VISIBLE_DEVICES"), std::string::npos);
}

TEST(VisibleDevices, MoreLocalRanksThanVisibleDevicesFailsOnEveryRank) {
  const VisibleDevices v = visible_devices(Env({{"ASCEND_RT_VISIBLE_DEVICES", "0"}}), 8);
  const std::string expected =
      "2 local ranks do not fit: ASCEND_RT_VISIBLE_DEVICES=0 makes 1 of this node's 8 devices visible (one device "
      "per rank)";
  EXPECT_EQ(error_of([&] { bind_local_rank(v, 0, 2); }), expected);  // rank 0 fails too: one verdict per node
  EXPECT_EQ(error_of([&] { bind_local_rank(v, 1, 2); }), expected);
  const VisibleDevices all = visible_devices(Env(), 8);
  EXPECT_EQ(error_of([&] { bind_local_rank(all, 0, 9); }),
            "9 local ranks do not fit: this node has 8 devices (one device per rank)");
}

TEST(VisibleDevices, MalformedListsNameTheVariable) {
  auto parse = [](const std::string& var, const std::string& value) {
    return error_of([&] { visible_devices(Env({{var, value}}), 8); });
  };
  EXPECT_EQ(parse("ASCEND_RT_VISIBLE_DEVICES", "0,a"), "ASCEND_RT_VISIBLE_DEVICES=0,a: 'a' is not a device index");
  EXPECT_EQ(parse("ASCEND_RT_VISIBLE_DEVICES", "0,,1"), "ASCEND_RT_VISIBLE_DEVICES=0,,1: '' is not a device index");
  EXPECT_EQ(parse("CUDA_VISIBLE_DEVICES", "-1"), "CUDA_VISIBLE_DEVICES=-1: '-1' is not a device index");
  EXPECT_EQ(parse("ASCEND_RT_VISIBLE_DEVICES", "8"),
            "ASCEND_RT_VISIBLE_DEVICES=8: device 8 does not exist (this node has 8 devices, 0-7)");
  EXPECT_EQ(parse("ASCEND_RT_VISIBLE_DEVICES", "1,1"), "ASCEND_RT_VISIBLE_DEVICES=1,1: device 1 is listed twice");
}

TEST(VisibleDevices, EmptyMeansNoDevice) {
  const VisibleDevices v = visible_devices(Env({{"ASCEND_RT_VISIBLE_DEVICES", ""}}), 8);
  EXPECT_TRUE(v.ids.empty());
  EXPECT_EQ(v.describe(), "none (ASCEND_RT_VISIBLE_DEVICES=)");
  EXPECT_NE(error_of([&] { bind_local_rank(v, 0, 1); }).find("1 local ranks do not fit"), std::string::npos);
}

TEST(DevicePool, ProfileCountUnlessOverridden) {
  EXPECT_EQ(device_pool_size(Env(), 8), 8);
  EXPECT_EQ(device_pool_size(Env({{"MTRAIN_DEVICES_PER_NODE", "16"}}), 8), 16);
  EXPECT_EQ(error_of([] {
              device_pool_size(Env({{"MTRAIN_DEVICES_PER_NODE", "0"}}), 8);
            }),
            "MTRAIN_DEVICES_PER_NODE=0 is not a device count in [1, 4096]");
  EXPECT_EQ(visible_devices(Env({{"ASCEND_RT_VISIBLE_DEVICES", "15"}}), 16).ids, (std::vector<int>{15}));
}

}  // namespace
}  // namespace mtrain::launch

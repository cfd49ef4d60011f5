// CPU_AFFINITY_CONF: the syntax torch_npu documents (Ascend/pytorch
// docs/zh/environment_variable_reference/CPU_AFFINITY_CONF.md), its default
// ranges (the node's cores split evenly over its NPUs: 160 cores and 8 NPUs
// give npu0 [0,19], npu1 [20,39]), npu<n>:a-b overrides, and the mapping of a
// profile's node onto a machine with fewer cores.
#include <gtest/gtest.h>

#include <numeric>

#include "common/errors.h"
#include "device/cpu_affinity.h"

namespace mtrain::device {
namespace {

std::vector<int> cores(int n) {
  std::vector<int> c(static_cast<size_t>(n));
  std::iota(c.begin(), c.end(), 0);
  return c;
}

std::vector<int> range(int first, int last) {
  std::vector<int> c;
  for (int i = first; i <= last; ++i) c.push_back(i);
  return c;
}

std::string config_error(const std::string& value, const DeviceProfile& p = {}, int npu = 0,
                         const std::vector<int>& machine = cores(8)) {
  try {
    plan_cpu_affinity(parse_cpu_affinity_conf(value), p, npu, 8, machine);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(CpuAffinityConf, ParsesTheDocumentedForms) {
  EXPECT_EQ(parse_cpu_affinity_conf("").mode, 0);
  EXPECT_EQ(parse_cpu_affinity_conf("0").mode, 0);
  EXPECT_EQ(parse_cpu_affinity_conf("2").mode, 2);
  const AffinityConf c = parse_cpu_affinity_conf("1,npu0:0-1,npu1:2-5,npu3:6-6");
  EXPECT_EQ(c.mode, 1);
  EXPECT_FALSE(c.npu_affine);
  EXPECT_EQ(c.ranges, (std::map<int, CoreRange>{{0, {0, 1}}, {1, {2, 5}}, {3, {6, 6}}}));
  EXPECT_TRUE(parse_cpu_affinity_conf("1,npu_affine:1").npu_affine);
}

TEST(CpuAffinityConf, MalformedValuesNameThePart) {
  EXPECT_EQ(config_error("3"), "CPU_AFFINITY_CONF=3: the first item '3' must be the mode 0, 1 or 2");
  EXPECT_EQ(config_error("npu0:1-1"),
            "CPU_AFFINITY_CONF=npu0:1-1: the first item 'npu0:1-1' must be the mode 0, 1 or 2");
  EXPECT_EQ(config_error("1,npuX:0-1"),
            "CPU_AFFINITY_CONF=1,npuX:0-1: 'npuX:0-1' is not npu<id>:<first core>-<last core>");
  EXPECT_EQ(config_error("1,npu0:5-2"),
            "CPU_AFFINITY_CONF=1,npu0:5-2: 'npu0:5-2': the first core 5 is after the last core 2");
  EXPECT_EQ(config_error("1,npu0:0-1,npu0:2-3"), "CPU_AFFINITY_CONF=1,npu0:0-1,npu0:2-3: npu0 is given twice");
  EXPECT_EQ(config_error("1,npu_affine:2"),
            "CPU_AFFINITY_CONF=1,npu_affine:2: 'npu_affine:2': npu_affine takes 0 or 1");
  EXPECT_EQ(config_error("1,npu9:0-0"), "CPU_AFFINITY_CONF: npu9 does not exist (this node has 8 devices, npu0-7)");
  // A core this process may not use, even in another NPU's range: every rank fails alike.
  EXPECT_EQ(config_error("1,npu5:6-9", {}, 0),
            "CPU_AFFINITY_CONF: npu5:6-9: core 8 is not available to this process (it may use 0-7)");
  EXPECT_EQ(config_error("1,npu0:0-7"), "<no error>");
}

TEST(CpuAffinityPlan, DefaultRangeIsTheEvenShareOfTheNode) {
  DeviceProfile p;
  p.cpu_cores_per_node = 160;  // torch_npu's example
  const AffinityConf on = parse_cpu_affinity_conf("1");
  EXPECT_EQ(plan_cpu_affinity(on, p, 0, 8, cores(160)).cores, range(0, 19));
  EXPECT_EQ(plan_cpu_affinity(on, p, 1, 8, cores(160)).cores, range(20, 39));
  EXPECT_EQ(plan_cpu_affinity(on, p, 7, 8, cores(160)).cores, range(140, 159));
  EXPECT_TRUE(plan_cpu_affinity(parse_cpu_affinity_conf("0"), p, 1, 8, cores(160)).cores.empty());
}

TEST(CpuAffinityPlan, NpuAffineUsesTheProfilesNumaRanges) {
  DeviceProfile p;  // an Atlas 800T A2 node: npu0 and npu1 share 144-167
  p.cpu_affinity = {{144, 167}, {144, 167}, {96, 119}, {96, 119}, {0, 23}, {0, 23}, {48, 71}, {48, 71}};
  const AffinityConf affine = parse_cpu_affinity_conf("2,npu_affine:1");
  EXPECT_EQ(plan_cpu_affinity(affine, p, 1, 8, cores(192)).cores, range(144, 167));
  EXPECT_EQ(plan_cpu_affinity(affine, p, 4, 8, cores(192)).cores, range(0, 23));
  // 16 cores for a 192-core node: each range keeps its proportional place (x 16/192).
  EXPECT_EQ(plan_cpu_affinity(affine, p, 0, 8, cores(16)).cores, range(12, 13));
  EXPECT_EQ(plan_cpu_affinity(affine, p, 6, 8, cores(16)).cores, range(4, 5));
  const AffinityPlan scaled = plan_cpu_affinity(affine, p, 0, 8, cores(16));
  EXPECT_NE(scaled.note.find("this machine has 16 cores"), std::string::npos) << scaled.note;
}

TEST(CpuAffinityPlan, FewerCoresThanDevicesGivesOneCoreEachRoundRobin) {
  const DeviceProfile p;
  const AffinityConf on = parse_cpu_affinity_conf("1");
  const std::vector<int> machine = {2, 5};  // e.g. a cpuset of two cores
  EXPECT_EQ(plan_cpu_affinity(on, p, 0, 8, machine).cores, std::vector<int>{2});
  EXPECT_EQ(plan_cpu_affinity(on, p, 1, 8, machine).cores, std::vector<int>{5});
  EXPECT_EQ(plan_cpu_affinity(on, p, 2, 8, machine).cores, std::vector<int>{2});
  // 8 cores for 8 devices (fewer than the node's 192): one core each, in order.
  EXPECT_EQ(plan_cpu_affinity(on, p, 3, 8, cores(8)).cores, std::vector<int>{3});
}

TEST(CpuAffinityPlan, OverrideWinsForItsNpuOnly) {
  const DeviceProfile p;
  const AffinityConf c = parse_cpu_affinity_conf("1,npu1:4-6");
  EXPECT_EQ(plan_cpu_affinity(c, p, 1, 8, cores(16)).cores, range(4, 6));
  EXPECT_EQ(plan_cpu_affinity(c, p, 0, 8, cores(16)).cores, range(0, 1));
}

TEST(CpuAffinity, CoreListsUseTheKernelsFormat) {
  EXPECT_EQ(format_core_list({0, 1, 2, 3, 6, 8, 9}), "0-3,6,8-9");
  EXPECT_EQ(format_core_list({5}), "5");
  EXPECT_EQ(format_core_list({}), "");
}

}  // namespace
}  // namespace mtrain::device

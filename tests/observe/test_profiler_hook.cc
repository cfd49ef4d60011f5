// The profiler hook on a 3-iteration in-process run of the tiny model: the
// window holds exactly its iterations, the trace parses and nests, and each
// level / option adds exactly what it promises.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "../train/tiny_training.h"
#include "observe/profiler_hook.h"

namespace mtrain::observe {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Profiled {
  json trace;
  std::map<std::string, json> traces;  // every rank_0_trace*.json by file name
  std::string summary;
  fs::path dir;
  std::vector<std::string> written;
  bool merged = false;
};

fs::path temp_dir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() /
                     ("mtrain_prof_" + tag + "_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                      "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(p);
  return p;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Trains `iters` iterations with micro-batches of 2 (2 per global batch).
Profiled run(ProfilerOptions o, int iters = 3, bool fused = true) {
  device::Device dev(device::DeviceProfile{}, 0);
  model::ModelConfig c = train::tiny();
  if (!fused) c.fusions = model::Fusions{false, false, false, false, false, false, false, false};
  model::GptModel m(c, dev);
  optim::OptimizerConfig oc;
  optim::Optimizer opt(dev, train::optimizer_ranges(m.params()), m.params().numel(), DType::kF32, oc);
  optim::LrScheduler sched(train::constant_lr(1e-2));
  train::FixedSource src(2);
  HookList hooks;
  Profiled out;
  out.dir = temp_dir("run");
  o.save_path = out.dir.string();
  o.print_summary = false;
  PosixFileSystem pfs;
  auto hook = std::make_shared<ProfilerHook>(o, dev, nullptr, 0, pfs);
  hooks.add(hook);
  train::TrainerOptions to;
  to.train_iters = iters;
  to.global_batch_size = 4;
  train::Trainer t(to, m, opt, sched, nullptr, src, nullptr, hooks);
  t.train();
  out.written = hook->written();
  if (fs::exists(out.dir / "rank_0_trace.json")) out.trace = json::parse(slurp(out.dir / "rank_0_trace.json"));
  out.summary = slurp(out.dir / "rank_0_summary.txt");
  out.merged = fs::exists(out.dir / "merged_trace.json");
  for (const auto& f : fs::directory_iterator(out.dir))
    if (f.path().filename().string().starts_with("rank_0_trace"))
      out.traces[f.path().filename().string()] = json::parse(slurp(f.path()));
  fs::remove_all(out.dir);
  return out;
}

ProfilerOptions window(int start, int end, profiler::Kind level) {
  ProfilerOptions o;
  o.schedule = profiler::Schedule::from_step_window(start, end);
  o.level = level;
  o.level_name = level == profiler::Kind::kKernel ? "level2" : level == profiler::Kind::kOp ? "level1" : "level0";
  return o;
}

std::vector<json> events(const json& t, const std::string& ph, int tid = -1) {
  std::vector<json> out;
  for (const json& e : t["traceEvents"])
    if (e["ph"] == ph && (tid < 0 || e.value("tid", -1) == tid)) out.push_back(e);
  return out;
}

int count(const std::vector<json>& ev, const std::string& name) {
  int n = 0;
  for (const json& e : ev) n += e["name"] == name;
  return n;
}

std::set<std::string> cats(const std::vector<json>& ev) {
  std::set<std::string> s;
  for (const json& e : ev) s.insert(e["cat"].get<std::string>());
  return s;
}

constexpr int kCpu = 1, kNpu = 2, kComm = 3;

TEST(Profiler, Level0RecordsExactlyTheWindowsIterationsAndPhases) {
  const Profiled p = run(window(1, 3, profiler::Kind::kPhase));  // iterations 2 and 3
  const auto npu = events(p.trace, "X", kNpu);
  EXPECT_EQ(count(npu, "ProfilerStep#1"), 0);
  EXPECT_EQ(count(npu, "ProfilerStep#2"), 1);
  EXPECT_EQ(count(npu, "ProfilerStep#3"), 1);
  // 2 iterations x 2 micro-batches.
  EXPECT_EQ(count(npu, "forward_step"), 4);
  EXPECT_EQ(count(npu, "backward_step"), 4);
  EXPECT_EQ(count(npu, "grad_sync"), 2);
  EXPECT_EQ(count(npu, "optimizer_step"), 2);
  for (const json& e : p.trace["traceEvents"])
    if (e["ph"] == "X") {
      const int64_t it = e["args"]["iteration"];
      EXPECT_TRUE(it == 2 || it == 3) << e.dump();
    }
  EXPECT_EQ(cats(npu), (std::set<std::string>{"iteration", "phase"}));
  // No CPU track, no memory counters unless asked.
  EXPECT_TRUE(events(p.trace, "X", kCpu).empty());
  EXPECT_TRUE(events(p.trace, "C").empty());
  // Every event belongs to rank 0.
  for (const json& e : p.trace["traceEvents"]) EXPECT_EQ(e["pid"], 0);
  EXPECT_EQ(p.trace["displayTimeUnit"], "ms");
  EXPECT_EQ(p.trace["metadata"]["iterations"], json({2, 3}));
  EXPECT_NE(p.summary.find("forward_step"), std::string::npos);
  EXPECT_NE(p.summary.find("iterations 2..3"), std::string::npos);
  EXPECT_TRUE(p.merged);
  EXPECT_EQ(p.written.size(), 3u);
}

// Children lie within their parents on one track.
void expect_nested(const std::vector<json>& ev, const std::string& parent_cat, const std::string& child_cat) {
  int checked = 0;
  for (const json& c : ev) {
    if (c["cat"] != child_cat) continue;
    const double b = c["ts"], e = b + c["dur"].get<double>();
    bool inside = false;
    for (const json& p : ev)
      if (p["cat"] == parent_cat) {
        const double pb = p["ts"], pe = pb + p["dur"].get<double>();
        inside = inside || (pb <= b + 1e-3 && e <= pe + 1e-3);
      }
    EXPECT_TRUE(inside) << c.dump();
    ++checked;
  }
  EXPECT_GT(checked, 0) << child_cat;
}

TEST(Profiler, Level1AddsModulesAndOpsNestedInPhasesButNoKernels) {
  ProfilerOptions o = window(1, 3, profiler::Kind::kOp);
  o.with_cpu = true;
  const Profiled p = run(o);
  for (int tid : {kCpu, kNpu}) {
    const auto ev = events(p.trace, "X", tid);
    const auto c = cats(ev);
    EXPECT_TRUE(c.count("module")) << tid;
    EXPECT_FALSE(c.count("kernel")) << tid;
    expect_nested(ev, "iteration", "phase");
    expect_nested(ev, "phase", "module");
    expect_nested(ev, "phase", "op");
    EXPECT_EQ(count(ev, "decoder.layers.0.self_attention.linear_qkv") +
                  count(ev, "decoder.layers.1.self_attention.linear_qkv"),
              16)  // 2 layers x 4 micro-batches x (forward + backward)
        << tid;
  }
}

TEST(Profiler, Level2AddsGemmKernelsWithTheirShapes) {
  const Profiled p = run(window(2, 3, profiler::Kind::kKernel));
  const auto npu = events(p.trace, "X", kNpu);
  EXPECT_EQ(count(npu, "ProfilerStep#2"), 0);
  EXPECT_EQ(count(npu, "ProfilerStep#3"), 1);
  int gemms = 0;
  for (const json& e : npu)
    if (e["name"] == "linear_forward") {
      ++gemms;
      const auto& a = e["args"];
      const double m = a["m"], n = a["n"], k = a["k"];
      EXPECT_GT(m * n * k, 0);
      EXPECT_DOUBLE_EQ(a["flops"].get<double>(), 2 * m * n * k);
      EXPECT_DOUBLE_EQ(a["bytes"].get<double>(), 4 * (m * k + k * n + m * n));
      EXPECT_GT(e["dur"].get<double>(), 0);
    }
  EXPECT_GT(gemms, 0);
  EXPECT_GT(count(npu, "linear_backward_dweight"), 0);
  // The optimizer step's passes are kernels too (fp32 model: no param copy).
  EXPECT_EQ(count(npu, "grad_norm_sq"), 1);
  EXPECT_EQ(count(npu, "adam_update"), 1);
  expect_nested(npu, "phase", "kernel");
  // Kernels do not overlap on the simulated device.
  std::vector<std::pair<double, double>> k;
  for (const json& e : npu)
    if (e["cat"] == "kernel") k.emplace_back(e["ts"], e["ts"].get<double>() + e["dur"].get<double>());
  std::sort(k.begin(), k.end());
  for (size_t i = 1; i < k.size(); ++i) EXPECT_LE(k[i - 1].second, k[i].first + 1e-6);
}

TEST(Profiler, StepsInsideAKernelStayOnTheCpuTrack) {
  // level2 + CPU: the unfused kernels' inner op steps (precision dumper) are
  // CPU-track children of their kernel, and add no device time.
  ProfilerOptions o = window(1, 2, profiler::Kind::kKernel);
  o.with_cpu = true;
  const Profiled p = run(o, 3, /*fused=*/false);
  const auto npu = events(p.trace, "X", kNpu);
  std::vector<std::pair<double, double>> k;
  for (const json& e : npu)
    if (e["cat"] == "kernel") k.emplace_back(e["ts"], e["ts"].get<double>() + e["dur"].get<double>());
  std::sort(k.begin(), k.end());
  for (size_t i = 1; i < k.size(); ++i) EXPECT_LE(k[i - 1].second, k[i].first + 1e-6);
  // The CPU and NPU tracks hold the same kernels.
  int cpu_kernels = 0;
  for (const json& e : events(p.trace, "X", kCpu)) cpu_kernels += e["cat"] == "kernel";
  EXPECT_GE(cpu_kernels, static_cast<int>(k.size()));
  EXPECT_GT(k.size(), 0u);
  // The unfused activation's steps are ops on the CPU track only.
  EXPECT_GT(count(events(p.trace, "X", kCpu), "bias_add"), 0);
  EXPECT_EQ(count(npu, "bias_add"), 0);
}

TEST(Profiler, MemoryStackAndShapesOptions) {
  ProfilerOptions o = window(1, 2, profiler::Kind::kOp);
  o.with_memory = true;
  o.with_stack = true;
  o.record_shapes = true;
  const Profiled p = run(o);
  const auto counters = events(p.trace, "C");
  EXPECT_GT(count(counters, "memory"), 4);
  EXPECT_GT(count(counters, "memory by category"), 4);
  for (const json& c : counters) {
    if (c["name"] == "memory") {
      EXPECT_GT(c["args"]["allocated"].get<int64_t>(), 0);
    }
  }
  bool qkv = false;
  for (const json& e : events(p.trace, "X", kNpu)) {
    ASSERT_TRUE(e["args"].contains("stack")) << e.dump();
    if (e["name"] == "decoder.layers.1.self_attention.linear_qkv" && e["args"]["pass"] == "forward") {
      qkv = true;
      const json& st = e["args"]["stack"];
      EXPECT_EQ(st.front(), "ProfilerStep#2");
      EXPECT_EQ(st.back(), "decoder.layers.1.self_attention");
      ASSERT_FALSE(e["args"]["inputs"].empty()) << e.dump();
      EXPECT_EQ(e["args"]["inputs"][0]["shape"].size(), 2u);
    }
  }
  EXPECT_TRUE(qkv);
}

TEST(Profiler, WindowPastTheEndOfTrainingIsSavedAtTheEnd) {
  const Profiled p = run(window(2, 6, profiler::Kind::kPhase), 3);
  const auto npu = events(p.trace, "X", kNpu);
  EXPECT_EQ(count(npu, "ProfilerStep#3"), 1);
  EXPECT_EQ(p.trace["metadata"]["iterations"], json({3, 3}));
}

// PyTorch's schedule beyond MindSpeed's mapping: warmup steps are traced and
// discarded, and a repeating schedule writes one set of files per cycle.
TEST(Profiler, WarmupIsDiscardedAndEachCycleHasItsOwnFiles) {
  ProfilerOptions o = window(1, 2, profiler::Kind::kPhase);
  o.schedule = profiler::Schedule{/*wait=*/1, /*warmup=*/1, /*active=*/2, /*repeat=*/2, /*skip_first=*/0};
  const Profiled p = run(o, 8);
  ASSERT_EQ(p.traces.size(), 2u);
  const std::map<std::string, json> want = {{"rank_0_trace_cycle1.json", json({3, 4})},
                                            {"rank_0_trace_cycle2.json", json({7, 8})}};
  for (const auto& [name, iterations] : want) {
    ASSERT_TRUE(p.traces.contains(name)) << name;
    const json& t = p.traces.at(name);
    EXPECT_EQ(t["metadata"]["iterations"], iterations) << name;
    const auto npu = events(t, "X", kNpu);
    for (int it = 1; it <= 8; ++it) {
      const bool recorded = it == iterations[0] || it == iterations[1];
      EXPECT_EQ(count(npu, "ProfilerStep#" + std::to_string(it)), recorded ? 1 : 0) << name << " " << it;
    }
  }
}

TEST(Profiler, UnprofiledRankRecordsNothing) {
  device::Device dev(device::DeviceProfile{}, 0);
  PosixFileSystem pfs;
  ProfilerOptions o = window(1, 3, profiler::Kind::kKernel);
  o.ranks = {1};
  ProfilerHook h(o, dev, nullptr, 0, pfs);
  EXPECT_FALSE(h.profiles_this_rank());
  EXPECT_FALSE(h.region_depth(2).has_value());
  ProfilerHook all(window(1, 3, profiler::Kind::kPhase), dev, nullptr, 0, pfs);
  EXPECT_FALSE(all.region_depth(1).has_value());  // outside the window: zero cost
  EXPECT_TRUE(all.region_depth(2).has_value());
  EXPECT_TRUE(all.region_depth(3).has_value());
  EXPECT_FALSE(all.region_depth(4).has_value());
}

}  // namespace
}  // namespace mtrain::observe

// Step hooks as a public seam: regions reach exactly the hooks that ask for
// them, in the iterations they ask for, properly nested; nobody asking means
// no listener at all; the example hook of docs/examples runs as documented.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../docs/examples/module_time_hook.h"
#include "../train/tiny_training.h"

namespace mtrain::observe {
namespace {

// Records every region it sees as "<kind> <name> <pass> <index>" with its
// iteration, and checks nesting as it goes.
struct RegionLog : TrainHook {
  std::optional<profiler::Kind> depth;
  int64_t only_iteration = -1;  // -1: every iteration
  std::vector<std::string> seen;
  std::vector<int64_t> seen_in;  // iteration of each entry
  std::vector<const char*> open;
  int64_t current = 0;
  bool listener_outside_steps = false;
  int64_t tensors_with_data = 0;

  std::optional<profiler::Kind> region_depth(int64_t it) const override {
    if (only_iteration >= 0 && it != only_iteration) return std::nullopt;
    return depth;
  }
  bool region_tensors(int64_t) const override { return true; }
  void on_step_begin(int64_t it) override { current = it; }
  void on_step_end(const StepMetrics&) override {
    EXPECT_TRUE(open.empty());
    EXPECT_FALSE(profiler::listening(profiler::Kind::kIteration)) << "evaluation and saves run unobserved";
  }
  void on_train_end(const TrainInfo&) override {
    listener_outside_steps = profiler::listening(profiler::Kind::kIteration);
  }
  void on_region_begin(const profiler::Region& r, std::span<const profiler::TensorRef> t) override {
    seen.push_back(std::string(profiler::kind_name(r.kind)) + " " + r.name + " " + profiler::pass_name(r.pass) + " " +
                   std::to_string(r.index));
    seen_in.push_back(current);
    open.push_back(r.name);
    for (const profiler::TensorRef& x : t) {
      if (x.data == nullptr) continue;
      ++tensors_with_data;
      int64_t n = 1;
      for (int i = 0; i < x.ndim; ++i) n *= x.dims[i];
      EXPECT_EQ(n, x.numel) << r.name << " " << x.role;
    }
  }
  void on_region_end(const profiler::Region& r, std::span<const profiler::TensorRef>) override {
    ASSERT_FALSE(open.empty());
    EXPECT_STREQ(open.back(), r.name) << "regions must close in reverse order";
    open.pop_back();
  }
  int64_t count(const std::string& prefix) const {
    int64_t n = 0;
    for (const std::string& s : seen) n += s.rfind(prefix, 0) == 0;
    return n;
  }
};

void run(HookList& hooks, int iters, int64_t mbs = 2) {
  device::Device dev(device::DeviceProfile{}, 0);
  model::GptModel m(train::tiny(), dev);
  optim::Optimizer opt(dev, train::optimizer_ranges(m.params()), m.params().numel(), DType::kF32,
                       optim::OptimizerConfig{});
  optim::LrScheduler sched(train::constant_lr(1e-3));
  train::FixedSource src(mbs);
  train::TrainerOptions to;
  to.train_iters = iters;
  to.global_batch_size = 4;
  train::Trainer t(to, m, opt, sched, nullptr, src, nullptr, hooks);
  t.train();
}

TEST(Hooks, ModuleDepthInOneIterationOnly) {
  HookList hooks;
  auto log = std::make_shared<RegionLog>();
  log->depth = profiler::Kind::kModule;
  log->only_iteration = 2;
  hooks.add(log);
  run(hooks, 3);
  ASSERT_FALSE(log->seen.empty());
  for (int64_t it : log->seen_in) EXPECT_EQ(it, 2);
  EXPECT_EQ(log->count("iteration iteration  2"), 1);
  // Two micro-batches of 2, one chunk: two forward and two backward steps.
  EXPECT_EQ(log->count("phase forward_step forward"), 2);
  EXPECT_EQ(log->count("phase backward_step backward"), 2);
  EXPECT_EQ(log->count("phase grad_sync"), 1);
  EXPECT_EQ(log->count("phase optimizer_step"), 1);
  // Each micro-batch passes both layers forward and backward.
  EXPECT_EQ(log->count("module decoder.layers forward 0"), 2);
  EXPECT_EQ(log->count("module decoder.layers backward 1"), 2);
  EXPECT_EQ(log->count("module linear_qkv forward"), 4);
  EXPECT_EQ(log->count("module embedding"), 4);
  EXPECT_EQ(log->count("module output_layer"), 4);
  EXPECT_EQ(log->count("op "), 0) << "ops are deeper than modules";
  EXPECT_EQ(log->count("kernel "), 0);
  EXPECT_GT(log->tensors_with_data, 0);
  EXPECT_FALSE(log->listener_outside_steps) << "no listener stays installed after training";
}

TEST(Hooks, EachHookGetsItsOwnDepth) {
  HookList hooks;
  auto phases = std::make_shared<RegionLog>();
  phases->depth = profiler::Kind::kPhase;
  auto ops = std::make_shared<RegionLog>();
  ops->depth = profiler::Kind::kOp;
  auto none = std::make_shared<RegionLog>();
  hooks.add(phases);
  hooks.add(ops);
  hooks.add(none);
  run(hooks, 1);
  EXPECT_EQ(phases->count("module "), 0);
  EXPECT_EQ(phases->count("phase forward_step"), 2);
  EXPECT_GT(ops->count("op self_attn_bda forward"), 0);
  EXPECT_GT(ops->count("op cross_entropy backward"), 0);
  EXPECT_TRUE(none->seen.empty());
}

// Nobody asks: the model runs with no listener (probes cost one branch).
TEST(Hooks, NoListenerWhenNobodyAsks) {
  struct Probe : TrainHook {
    bool listening = true;
    void on_step_end(const StepMetrics&) override { listening = profiler::listening(profiler::Kind::kIteration); }
  };
  HookList hooks;
  auto p = std::make_shared<Probe>();
  hooks.add(p);
  run(hooks, 1);
  EXPECT_FALSE(p->listening);
}

// A hook that throws from a region closed by a scope's destructor (here
// grad_sync) stops training with its exception at the end of the step, not
// with std::terminate.
TEST(Hooks, AnExceptionFromADestructorClosedRegionStopsTraining) {
  struct Thrower : TrainHook {
    std::optional<profiler::Kind> region_depth(int64_t) const override { return profiler::Kind::kPhase; }
    void on_region_end(const profiler::Region& r, std::span<const profiler::TensorRef>) override {
      if (std::string(r.name) == "grad_sync") throw std::runtime_error("hook failed in grad_sync");
    }
  };
  struct Steps : TrainHook {
    std::vector<int64_t> steps;
    void on_step_end(const StepMetrics& m) override { steps.push_back(m.iteration); }
  };
  HookList hooks;
  auto log = std::make_shared<Steps>();
  hooks.add(std::make_shared<Thrower>());
  hooks.add(log);
  try {
    run(hooks, 2);
    FAIL() << "expected the hook's exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "hook failed in grad_sync");
  }
  EXPECT_TRUE(log->steps.empty()) << "the step ends with the exception, before on_step_end";
  EXPECT_FALSE(profiler::listening(profiler::Kind::kIteration));
}

TEST(Hooks, TheDocumentedExampleHookTimesEveryModule) {
  HookList hooks;
  auto h = std::make_shared<examples::ModuleTimeHook>(2, 3);
  hooks.add(h);
  testing::internal::CaptureStdout();
  run(hooks, 3, /*mbs=*/4);
  const std::string out = testing::internal::GetCapturedStdout();
  const auto& t = h->totals();
  // Iterations 2 and 3, one micro-batch each.
  ASSERT_TRUE(t.contains("decoder.layers.1.mlp.linear_fc1 forward")) << out;
  EXPECT_EQ(t.at("decoder.layers.1.mlp.linear_fc1 forward").calls, 2);
  EXPECT_EQ(t.at("decoder.layers.0 backward").calls, 2);
  EXPECT_EQ(t.at("decoder.final_layernorm forward").calls, 2);
  EXPECT_NE(out.find("decoder.layers.0.self_attention.core_attention forward"), std::string::npos) << out;
}

}  // namespace
}  // namespace mtrain::observe

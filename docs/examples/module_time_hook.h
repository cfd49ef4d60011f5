// An example step hook: wall time per module over chosen iterations, with no
// change to the training loop. tests/train/test_hooks.cc compiles and runs it;
// docs/HOOKS.md walks through it.
//
// Add it in lib/train/run.cc (or your own driver) next to the logger:
//   hooks.add(std::make_shared<ModuleTimeHook>(/*first=*/5, /*last=*/6));
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "observe/hooks.h"

namespace mtrain::examples {

class ModuleTimeHook : public observe::TrainHook {
 public:
  struct Total {
    int64_t calls = 0;
    double ms = 0;
  };

  ModuleTimeHook(int64_t first, int64_t last) : first_(first), last_(last) {}

  // Modules (and the phases around them) in iterations first..last only:
  // every other iteration runs with no listener at all.
  std::optional<profiler::Kind> region_depth(int64_t iteration) const override {
    if (iteration < first_ || iteration > last_) return std::nullopt;
    return profiler::Kind::kModule;
  }

  // Module regions nest; their full name joins the open modules' names
  // ("decoder.layers.1.mlp.linear_fc1"). Other kinds (phases) are skipped.
  void on_region_begin(const profiler::Region& r, std::span<const profiler::TensorRef>) override {
    if (r.kind != profiler::Kind::kModule) return;
    std::string name = open_.empty() ? "" : open_.back().name + ".";
    name += r.name;
    if (r.index >= 0) name += fmt::format(".{}", r.index);
    open_.push_back({std::move(name), std::chrono::steady_clock::now()});
  }

  void on_region_end(const profiler::Region& r, std::span<const profiler::TensorRef>) override {
    if (r.kind != profiler::Kind::kModule) return;
    Total& t = totals_[fmt::format("{} {}", open_.back().name, profiler::pass_name(r.pass))];
    t.calls += 1;
    t.ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - open_.back().start).count();
    open_.pop_back();
  }

  void on_train_end(const observe::TrainInfo&) override {
    for (const auto& [name, t] : totals_) fmt::print("{:<60} {:6d} calls {:10.3f} ms\n", name, t.calls, t.ms);
  }

  const std::map<std::string, Total>& totals() const { return totals_; }

 private:
  struct Open {
    std::string name;
    std::chrono::steady_clock::time_point start;
  };
  int64_t first_, last_;
  std::vector<Open> open_;
  std::map<std::string, Total> totals_;
};

}  // namespace mtrain::examples

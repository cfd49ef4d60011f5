// The per-rank watchdog (train/watchdog.h): it fires once, with a report that
// names the owner and the last progress, only when beats stop; beats keep it
// quiet; stop() ends it promptly without firing. The hook's beat labels.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "train/watchdog.h"

namespace mtrain::train {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Collects on_timeout calls.
struct Reports {
  std::mutex m;
  std::vector<std::string> texts;
  Watchdog::OnTimeout callback() {
    return [this](const std::string& r) {
      std::lock_guard<std::mutex> lock(m);
      texts.push_back(r);
    };
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(m);
    return texts.size();
  }
};

bool wait_until_fired(const Watchdog& w, std::chrono::seconds limit) {
  const auto end = Clock::now() + limit;
  while (!w.fired() && Clock::now() < end) std::this_thread::sleep_for(1ms);
  return w.fired();
}

TEST(Watchdog, FiresOnceWithTheLastProgress) {
  Reports reports;
  Watchdog w(0.05, reports.callback(), "rank 3");
  w.beat("all_reduce on group dp, iteration 12");
  ASSERT_TRUE(wait_until_fired(w, 10s));
  std::this_thread::sleep_for(200ms);  // several more timeouts: still one report
  w.stop();
  ASSERT_EQ(reports.count(), 1u);
  const std::string& r = reports.texts[0];
  EXPECT_EQ(r.rfind("rank 3: no progress for ", 0), 0u) << r;
  EXPECT_NE(r.find(" s (last: all_reduce on group dp, iteration 12)"), std::string::npos) << r;
}

TEST(Watchdog, BeatsKeepItQuiet) {
  Reports reports;
  Watchdog w(1.0, reports.callback());
  const auto end = Clock::now() + 1500ms;  // longer than the timeout
  while (Clock::now() < end) {
    w.beat("step");
    std::this_thread::sleep_for(10ms);
  }
  w.stop();
  EXPECT_FALSE(w.fired());
  EXPECT_EQ(reports.count(), 0u);
}

TEST(Watchdog, APhaseHasItsOwnLimitAndHandler) {
  Reports normal, phase;
  Watchdog w(60.0, normal.callback(), "rank 1");
  w.begin_phase("checkpoint save of iteration 10", 0.05, phase.callback());
  ASSERT_TRUE(wait_until_fired(w, 10s));
  w.stop();
  EXPECT_EQ(normal.count(), 0u);
  ASSERT_EQ(phase.count(), 1u);
  EXPECT_NE(phase.texts[0].find("rank 1: no progress for "), std::string::npos) << phase.texts[0];
  EXPECT_NE(phase.texts[0].find(" s during checkpoint save of iteration 10 (last: "), std::string::npos)
      << phase.texts[0];
}

TEST(Watchdog, AfterAPhaseTheNormalLimitIsBack) {
  Reports normal, phase;
  Watchdog w(0.3, normal.callback());
  w.begin_phase("save", 60.0, phase.callback());
  std::this_thread::sleep_for(500ms);  // longer than the normal limit: the phase's applies
  EXPECT_FALSE(w.fired());
  w.end_phase();
  ASSERT_TRUE(wait_until_fired(w, 10s));
  w.stop();
  EXPECT_EQ(phase.count(), 0u);
  ASSERT_EQ(normal.count(), 1u);
  EXPECT_NE(normal.texts[0].find("(last: save done)"), std::string::npos) << normal.texts[0];
}

TEST(Watchdog, StopIsPromptAndNeverFires) {
  Reports reports;
  const auto t0 = Clock::now();
  {
    Watchdog w(3600, reports.callback());
    w.beat("start");
  }  // the destructor must not wait for the timeout
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
  EXPECT_EQ(reports.count(), 0u);
}

TEST(Watchdog, LongLabelsAreCutAndBeatsAfterStopAreHarmless) {
  Reports reports;
  Watchdog w(0.02, reports.callback());
  w.beat(std::string(1000, 'x'));
  ASSERT_TRUE(wait_until_fired(w, 10s));
  w.stop();
  w.beat("late");
  ASSERT_EQ(reports.count(), 1u);
  EXPECT_NE(reports.texts[0].find("(last: " + std::string(Watchdog::kMaxLabel, 'x') + ")"), std::string::npos);
  EXPECT_EQ(reports.texts[0].rfind("no progress for ", 0), 0u) << "no owner: no prefix";
}

TEST(WatchdogHook, LabelsNameTheOperationGroupAndIteration) {
  Reports reports;
  auto w = std::make_shared<Watchdog>(0.05, reports.callback(), "rank 1");
  WatchdogHook hook(w);
  hook.on_step_begin(7);
  parallel::CommEvent e;
  e.op = parallel::CommOp::kAllGather;
  e.group = "tp";
  hook.on_comm(e);
  ASSERT_TRUE(wait_until_fired(*w, 10s));
  w->stop();
  ASSERT_EQ(reports.count(), 1u);
  EXPECT_NE(reports.texts[0].find("(last: all_gather on group tp, iteration 7)"), std::string::npos)
      << reports.texts[0];
}

}  // namespace
}  // namespace mtrain::train

// ProgressBar and ProgressTerminal with a fake clock and string sinks.
// Expected lines and rates come from tqdm 4.64.1 (Debian's python3-tqdm):
// tqdm.format_meter / format_sizeof / format_num for the same arguments, and a
// tqdm(total=100, mininterval=0.1, smoothing=0.3, miniters=1) driven by the
// same fake clock for the rates.
#include <gtest/gtest.h>

#include <regex>
#include <vector>

#include "common/progress.h"
#include "common/progress_terminal.h"

namespace mtrain {
namespace {

ProgressState state(int64_t n, int64_t total, double elapsed, double rate, std::string postfix = {}) {
  ProgressState s;
  s.desc = "Train";
  s.n = n;
  s.total = total;
  s.elapsed = elapsed;
  s.rate = rate;
  s.postfix = std::move(postfix);
  return s;
}

TEST(ProgressFormat, MatchesTqdmFormatMeter) {
  EXPECT_EQ(format_progress(state(42, 100, 12.3, 3.4, "loss=2.31, tokens/s=5.10k"), 0),
            "Train:  42%|████▏     | 42/100 [00:12<00:17,  3.40it/s, loss=2.31, tokens/s=5.10k]");
  EXPECT_EQ(format_progress(state(42, 100, 12.3, 3.4, "loss=2.31, tokens/s=5.10k"), 80),
            "Train:  42%|███▎    | 42/100 [00:12<00:17,  3.40it/s, loss=2.31, tokens/s=5.10k]");
  EXPECT_EQ(format_progress(state(0, 100, 0, 0), 0), "Train:   0%|          | 0/100 [00:00<?, ?it/s]");
  // Slower than one item per second: seconds per item; hours in the elapsed time.
  EXPECT_EQ(format_progress(state(100, 100, 3725, 0.5), 0),
            "Train: 100%|██████████| 100/100 [1:02:05<00:00,  2.00s/it]");
  // Unknown total: count and rate only.
  ProgressState docs = state(7, 0, 65, 123.456);
  docs.desc = "Tokenize";
  docs.unit = "doc";
  EXPECT_EQ(format_progress(docs, 0), "Tokenize: 7doc [01:05, 123.46doc/s]");
  // Narrower than the text: cut at the width (tqdm's disp_trim).
  EXPECT_EQ(format_progress(state(1, 3, 1, 1), 30), "Train:  33%|▎| 1/3 [00:01<00:0");
}

TEST(ProgressFormat, PostfixNumbersAsTqdm) {
  EXPECT_EQ(progress_sizeof(5100), "5.10k");
  EXPECT_EQ(progress_sizeof(999.4), "999");
  EXPECT_EQ(progress_sizeof(999.6), "1.00k");
  EXPECT_EQ(progress_sizeof(12345678), "12.3M");
  EXPECT_EQ(progress_num(2.3107), "2.31");
  EXPECT_EQ(progress_num(5100), "5100");
  EXPECT_EQ(progress_num(12345678), "1.23e+7");
  EXPECT_EQ(progress_num(0.000123), "0.000123");
}

struct Recorder : ProgressSink {
  std::vector<ProgressState> shown, closed;
  void show(const ProgressState& s) override { shown.push_back(s); }
  void close(const ProgressState& s) override { closed.push_back(s); }
};

TEST(ProgressBar, RateIsTqdmsSmoothedAverageAndShowsAreRateLimited) {
  double now = 0;
  Recorder rec;
  ProgressBar bar(
      "Train", 100, &rec, 0, [&] { return now; }, 0.1);
  ASSERT_EQ(rec.shown.size(), 1u);  // the empty bar at once
  EXPECT_EQ(rec.shown[0].rate, 0);
  // (time after the step, rate tqdm shows then; 0: no redraw, under 0.1 s since the last)
  const std::vector<std::pair<double, double>> steps = {{0.05, 0},
                                                        {0.05, 20.0},
                                                        {0.2, 8.888888888888888},
                                                        {0.5, 3.889695210449928},
                                                        {0.05, 0},
                                                        {0.1, 6.130001581527755},
                                                        {1.0, 2.5739458342864667}};
  int64_t n = 0;
  size_t expected_shows = 1;
  for (const auto& [dt, rate] : steps) {
    now += dt;
    bar.update(++n, "loss=1.00");
    if (rate == 0) {
      EXPECT_EQ(rec.shown.size(), expected_shows) << "redrawn within 0.1 s at n=" << n;
      continue;
    }
    ASSERT_EQ(rec.shown.size(), ++expected_shows) << "not redrawn at n=" << n;
    // A handful of double operations on both sides: equal to the last bits.
    EXPECT_NEAR(rec.shown.back().rate, rate, 1e-12 * rate) << "n=" << n;
    EXPECT_EQ(rec.shown.back().n, n);
    EXPECT_DOUBLE_EQ(rec.shown.back().elapsed, now);
    EXPECT_EQ(rec.shown.back().postfix, "loss=1.00");
  }
  // Reaching the total is always shown, however soon; close() once.
  now += 0.01;
  bar.update(100);
  EXPECT_EQ(rec.shown.back().n, 100);
  bar.close();
  bar.close();
  ASSERT_EQ(rec.closed.size(), 1u);
  EXPECT_EQ(rec.closed[0].n, 100);
}

TEST(ProgressBar, NullSinkDoesNothingAndResumedBarCountsFromInitial) {
  ProgressBar off("Train", 10, nullptr);
  off.update(5);
  EXPECT_FALSE(off.active());
  double now = 0;
  Recorder rec;
  ProgressBar bar(
      "Train", 100, &rec, 40, [&] { return now; }, 0.1);
  EXPECT_EQ(rec.shown[0].n, 40);
  now = 1.0;
  bar.update(50);
  EXPECT_DOUBLE_EQ(rec.shown.back().rate, 10.0);  // 10 items in 1 s, not 50
}

TEST(ProgressRecord, RoundTripsAndRejectsOtherLines) {
  ProgressState s = state(42, 100, 12.25, 3.4, "loss=2.31");
  const std::string rec = encode_progress_record(false, s);
  ASSERT_EQ(rec.back(), '\n');
  const auto r = parse_progress_record(std::string_view(rec).substr(0, rec.size() - 1));
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->close);
  EXPECT_EQ(format_progress(r->state, 0), format_progress(s, 0));
  EXPECT_FALSE(parse_progress_record(" [2026-11-21 06:23:18] iteration 5/ 10 |"));
  EXPECT_FALSE(parse_progress_record(std::string(kProgressRecordPrefix) + "show\tTrain\tx\x07"));
}

// A terminal that records what was written to which descriptor.
struct Screen {
  std::string all;  // fd 1 and fd 2 interleaved, as a terminal shows them
  ProgressTerminal term{[this](int, std::string_view b) { all.append(b); }, [] { return 0; }};
};

std::string record(int64_t n, bool close = false) { return encode_progress_record(close, state(n, 10, n, 1)); }

TEST(ProgressTerminal, LinesAreWrittenAboveTheBarWhichIsRedrawnBelow) {
  Screen s;
  s.term.feed(1, record(1));
  const std::string bar1 = "\r" + format_progress(state(1, 10, 1, 1), 0) + "\x1b[K";
  EXPECT_EQ(s.all, bar1);
  s.term.feed(1, " iteration 1/10 |\n");
  EXPECT_EQ(s.all, bar1 + "\r\x1b[K iteration 1/10 |\n" + bar1);
  s.all.clear();
  s.term.feed(2, "warning: x\n");  // stderr too
  EXPECT_EQ(s.all, "\r\x1b[Kwarning: x\n" + bar1);
  s.all.clear();
  s.term.feed(1, record(10, true));  // the final state stays, output continues below
  EXPECT_EQ(s.all, "\r" + format_progress(state(10, 10, 10, 1), 0) + "\x1b[K\n");
  s.all.clear();
  s.term.feed(1, "after\n");
  EXPECT_EQ(s.all, "after\n");
}

TEST(ProgressTerminal, PartialLinesAndSplitRecords) {
  Screen s;
  const std::string rec = record(2);
  s.term.feed(1, rec.substr(0, 7));  // a record cut by the pipe: nothing yet, even on flush
  s.term.flush_partial();
  EXPECT_EQ(s.all, "");
  s.term.feed(1, rec.substr(7));
  const std::string bar2 = "\r" + format_progress(state(2, 10, 2, 1), 0) + "\x1b[K";
  EXPECT_EQ(s.all, bar2);
  s.all.clear();
  s.term.feed(2, "prompt> ");  // an unfinished line goes out on flush; no bar after it
  s.term.flush_partial();
  s.term.feed(1, record(3));
  EXPECT_EQ(s.all, "\r\x1b[Kprompt> ");
  s.term.feed(2, "done\n");  // the line ends: the bar comes back below
  EXPECT_EQ(s.all, "\r\x1b[Kprompt> done\n\r" + format_progress(state(3, 10, 3, 1), 0) + "\x1b[K");
  s.all.clear();
  s.term.finish();
  EXPECT_EQ(s.all, "\n");
}

}  // namespace
}  // namespace mtrain

// A tqdm-style progress line for long work (training, tokenization,
// preprocess_data, ...), in two halves:
//   - ProgressBar, in the process doing the work: counts, measures the rate
//     as tqdm does (an exponential moving average of items per second,
//     smoothing 0.3, bias-corrected) and hands a ProgressState to its sink at
//     most every `min_interval` seconds (tqdm's mininterval, 0.1 s);
//   - format_progress, where the line is drawn: tqdm's format_meter,
//     `Train:  42%|████▏     | 42/100 [00:12<00:16,  3.40it/s, loss=2.31]`.
// The worker never draws on a terminal itself: mtrain's ranks write to a pipe
// (mpirun's), so the state travels as a record line on stdout
// (encode_progress_record) and the process that owns the terminal draws it
// (common/progress_terminal.h). The clock is injected so tests are exact.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace mtrain {

struct ProgressState {
  std::string desc;    // "Train"; tqdm's prefix before ": "
  int64_t n = 0;       // items done
  int64_t total = 0;   // 0: unknown (no percentage, no bar, no ETA)
  double elapsed = 0;  // seconds since the bar started
  double rate = 0;     // items per second (smoothed); 0: not measured yet
  std::string unit = "it";
  std::string postfix;  // "loss=2.31, tokens/s=5.10k"; tqdm's set_postfix text
};

// tqdm's format_meter for `columns` terminal columns (<= 0: unknown, the bar
// is 10 characters as tqdm's without ncols). UTF-8; one line, no control bytes.
std::string format_progress(const ProgressState& s, int columns);

// tqdm's helpers, used for postfix fields: format_sizeof (3 significant
// digits with k/M/G..., "5.10k") and format_num ('{:.3g}', or str() when shorter).
std::string progress_sizeof(double v);
std::string progress_num(double v);

// Where a ProgressBar's states go. show() may be called often (rate-limited);
// close() once, with the final state.
class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  virtual void show(const ProgressState& s) = 0;
  virtual void close(const ProgressState& s) = 0;
};

// Seconds on a monotonic clock.
using ProgressClock = std::function<double()>;
double progress_steady_seconds();

class ProgressBar {
 public:
  // A null sink makes every call a no-op (progress off). `initial`: the
  // position the work resumes from (a resumed run); the rate counts from it.
  ProgressBar(std::string desc, int64_t total, ProgressSink* sink, int64_t initial = 0,
              ProgressClock clock = progress_steady_seconds, double min_interval = 0.1);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void set_unit(std::string unit) {
    state_.unit = std::move(unit);
    if (sink_) sink_->show(state_);
  }
  // Moves to absolute position n. Shown when min_interval has passed since
  // the last show, or when n reaches total (so 100% is always drawn).
  void update(int64_t n, const std::string& postfix = {});
  void advance(int64_t dn) { update(state_.n + dn, state_.postfix); }
  // The final state goes to the sink's close() (once; also from the destructor).
  void close();
  bool active() const { return sink_ != nullptr; }

 private:
  // tqdm's EMA: bias-corrected exponential moving average.
  struct Ema {
    double alpha = 0.3, last = 0;
    int calls = 0;
    void add(double x);
    double value() const;
  };

  ProgressSink* sink_;
  ProgressClock clock_;
  double min_interval_;
  double start_, last_show_t_;
  int64_t last_show_n_, initial_;
  Ema ema_dn_, ema_dt_;
  ProgressState state_;
};

// The record a worker writes on stdout for the terminal's owner: one line,
// "\x1b]mtrain-progress;<show|close>\t<fields>\x07\n" (an OSC sequence, so a
// record that ever reached a terminal unread would not print as text).
std::string encode_progress_record(bool close, const ProgressState& s);
struct ProgressRecord {
  bool close = false;
  ProgressState state;
};
// `line` without its '\n'; nullopt when it is not a record.
std::optional<ProgressRecord> parse_progress_record(std::string_view line);
inline constexpr std::string_view kProgressRecordPrefix = "\x1b]mtrain-progress;";

// A sink that writes records to `out` (flushed: the reader draws as they come).
class ProgressRecordSink : public ProgressSink {
 public:
  explicit ProgressRecordSink(std::FILE* out) : out_(out) {}
  void show(const ProgressState& s) override { write(false, s); }
  void close(const ProgressState& s) override { write(true, s); }

 private:
  void write(bool close, const ProgressState& s);
  std::FILE* out_;
};

// The environment variable by which the process owning the terminal tells
// its workers (ranks, or a re-run of itself) that it reads their records.
inline constexpr const char* kProgressRecordsEnv = "MTRAIN_PROGRESS_RECORDS";
// stdout's record sink when that variable is "1", else null (no progress line).
ProgressSink* stdout_progress_sink();

}  // namespace mtrain

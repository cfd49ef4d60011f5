#include "common/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <vector>

namespace mtrain {

namespace {

// tqdm's format_interval: [H:]MM:SS of the whole seconds.
std::string interval(double seconds) {
  const int64_t t = static_cast<int64_t>(std::max(0.0, seconds));
  const int64_t h = t / 3600, m = t / 60 % 60, s = t % 60;
  return h ? fmt::format("{:d}:{:02d}:{:02d}", h, m, s) : fmt::format("{:02d}:{:02d}", m, s);
}

// Terminal columns of UTF-8 text (every code point one column: the line is
// ASCII apart from the bar's block characters).
size_t columns_of(std::string_view s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// The first `cols` code points of `s`.
std::string cut_columns(const std::string& s, size_t cols) {
  size_t seen = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((s[i] & 0xC0) != 0x80 && seen++ == cols) return s.substr(0, i);
  }
  return s;
}

// tqdm's Bar with its UTF-8 charset: full blocks, then one eighth-block for
// the remainder, padded with spaces to `width`.
std::string bar(double frac, int width) {
  static const char* const kEighths[] = {" ", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  const int64_t eighths = static_cast<int64_t>(frac * width * 8);
  const int64_t full = std::min<int64_t>(width, eighths / 8);
  std::string out;
  for (int64_t i = 0; i < full; ++i) out += "█";
  if (full < width) {
    out += kEighths[eighths % 8];
    out.append(static_cast<size_t>(width - full - 1), ' ');
  }
  return out;
}

std::string rate_text(const ProgressState& s) {
  if (s.rate > 0 && 1.0 / s.rate > 1.0) return fmt::format("{:5.2f}s/{}", 1.0 / s.rate, s.unit);
  return fmt::format("{}{}/s", s.rate > 0 ? fmt::format("{:5.2f}", s.rate) : "?", s.unit);
}

}  // namespace

std::string format_progress(const ProgressState& s, int columns) {
  const std::string prefix = s.desc.empty() ? "" : s.desc + ": ";
  const std::string postfix = s.postfix.empty() ? "" : ", " + s.postfix;
  std::string line;
  if (s.total <= 0) {
    line = fmt::format("{}{}{} [{}, {}{}]", prefix, s.n, s.unit, interval(s.elapsed), rate_text(s), postfix);
  } else {
    const double frac = std::clamp(static_cast<double>(s.n) / static_cast<double>(s.total), 0.0, 1.0);
    const std::string remaining =
        s.rate > 0 ? interval(static_cast<double>(std::max<int64_t>(0, s.total - s.n)) / s.rate) : "?";
    const std::string left = fmt::format("{}{:3.0f}%|", prefix, frac * 100);
    const std::string right =
        fmt::format("| {}/{} [{}<{}, {}{}]", s.n, s.total, interval(s.elapsed), remaining, rate_text(s), postfix);
    const int fixed = static_cast<int>(columns_of(left) + columns_of(right));
    const int width = columns > 0 ? std::max(1, columns - fixed) : 10;
    line = left + bar(frac, width) + right;
  }
  if (columns > 0 && columns_of(line) > static_cast<size_t>(columns)) line = cut_columns(line, columns);
  return line;
}

std::string progress_sizeof(double v) {
  static const char* const kUnits[] = {"", "k", "M", "G", "T", "P", "E", "Z"};
  for (const char* unit : kUnits) {
    if (std::fabs(v) < 999.5) {
      if (std::fabs(v) < 99.95) {
        if (std::fabs(v) < 9.995) return fmt::format("{:1.2f}{}", v, unit);
        return fmt::format("{:2.1f}{}", v, unit);
      }
      return fmt::format("{:3.0f}{}", v, unit);
    }
    v /= 1000;
  }
  return fmt::format("{:3.1f}Y", v);
}

std::string progress_num(double v) {
  std::string f = fmt::format("{:.3g}", v);
  for (const char* from : {"+0", "-0"}) {
    const size_t at = f.find(from, 1);  // the exponent's sign, not a leading minus
    if (at != std::string::npos && at > 0 && f[at - 1] == 'e') f.erase(at + 1, 1);
  }
  const std::string plain = fmt::format("{}", v);
  return f.size() < plain.size() ? f : plain;
}

double progress_steady_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

void ProgressBar::Ema::add(double x) {
  last = alpha * x + (1 - alpha) * last;
  ++calls;
}

double ProgressBar::Ema::value() const { return calls ? last / (1 - std::pow(1 - alpha, calls)) : last; }

ProgressBar::ProgressBar(std::string desc, int64_t total, ProgressSink* sink, int64_t initial, ProgressClock clock,
                         double min_interval)
    : sink_(sink), clock_(std::move(clock)), min_interval_(min_interval) {
  if (!sink_) return;
  start_ = last_show_t_ = clock_();
  last_show_n_ = initial_ = initial;
  state_.desc = std::move(desc);
  state_.total = total;
  state_.n = initial;
  sink_->show(state_);
}

ProgressBar::~ProgressBar() { close(); }

void ProgressBar::update(int64_t n, const std::string& postfix) {
  if (!sink_) return;
  state_.n = n;
  state_.postfix = postfix;
  const double now = clock_();
  const double dt = now - last_show_t_;
  const bool done = state_.total > 0 && n >= state_.total;
  if (dt < min_interval_ && !done) return;
  const int64_t dn = n - last_show_n_;
  if (dt > 0 && dn > 0) {
    ema_dn_.add(static_cast<double>(dn));
    ema_dt_.add(dt);
  }
  const double mean_dt = ema_dt_.value();
  state_.elapsed = now - start_;
  // Before the first measured interval tqdm shows the plain average.
  state_.rate = mean_dt > 0          ? ema_dn_.value() / mean_dt
                : state_.elapsed > 0 ? static_cast<double>(n - initial_) / state_.elapsed
                                     : 0;
  last_show_t_ = now;
  last_show_n_ = n;
  sink_->show(state_);
}

void ProgressBar::close() {
  if (!sink_) return;
  state_.elapsed = clock_() - start_;
  sink_->close(state_);
  sink_ = nullptr;
}

// Fields are tab-separated; text fields lose tabs and control bytes.
static std::string clean(const std::string& s) {
  std::string out;
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) out += c;
  return out;
}

std::string encode_progress_record(bool close, const ProgressState& s) {
  return fmt::format("{}{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\x07\n", kProgressRecordPrefix, close ? "close" : "show",
                     clean(s.desc), s.n, s.total, s.elapsed, s.rate, clean(s.unit), clean(s.postfix));
}

template <typename T>
static bool parse_number(std::string_view text, T& out) {
  if constexpr (std::is_floating_point_v<T>) {
    const std::string copy(text);  // strtod: libstdc++ 12 lacks from_chars for double in some builds
    char* end = nullptr;
    out = std::strtod(copy.c_str(), &end);
    return !copy.empty() && end == copy.c_str() + copy.size();
  } else {
    const auto r = std::from_chars(text.data(), text.data() + text.size(), out);
    return r.ec == std::errc() && r.ptr == text.data() + text.size();
  }
}

std::optional<ProgressRecord> parse_progress_record(std::string_view line) {
  if (line.substr(0, kProgressRecordPrefix.size()) != kProgressRecordPrefix || line.empty() || line.back() != '\x07')
    return std::nullopt;
  line = line.substr(kProgressRecordPrefix.size(), line.size() - kProgressRecordPrefix.size() - 1);
  std::vector<std::string_view> f;
  for (size_t at = 0;;) {
    const size_t tab = line.find('\t', at);
    f.push_back(line.substr(at, tab == std::string_view::npos ? std::string_view::npos : tab - at));
    if (tab == std::string_view::npos) break;
    at = tab + 1;
  }
  if (f.size() != 8 || (f[0] != "show" && f[0] != "close")) return std::nullopt;
  ProgressRecord r;
  r.close = f[0] == "close";
  r.state.desc = f[1];
  r.state.unit = f[6];
  r.state.postfix = f[7];
  if (!parse_number(f[2], r.state.n) || !parse_number(f[3], r.state.total) || !parse_number(f[4], r.state.elapsed) ||
      !parse_number(f[5], r.state.rate))
    return std::nullopt;
  return r;
}

void ProgressRecordSink::write(bool close, const ProgressState& s) {
  const std::string rec = encode_progress_record(close, s);
  std::fwrite(rec.data(), 1, rec.size(), out_);
  std::fflush(out_);
}

ProgressSink* stdout_progress_sink() {
  static ProgressRecordSink sink(stdout);  // stateless apart from the stream
  const char* e = std::getenv(kProgressRecordsEnv);
  return e && std::string_view(e) == "1" ? &sink : nullptr;
}

}  // namespace mtrain

#include "common/progress_terminal.h"

namespace mtrain {

namespace {
constexpr std::string_view kEraseLine = "\r\x1b[K";  // to column 0, erase to the end of the line
constexpr std::string_view kEraseRest = "\x1b[K";
}  // namespace

void ProgressTerminal::feed(int fd, std::string_view bytes) {
  std::string& p = pending_[fd == 2 ? 2 : 1];
  p.append(bytes);
  size_t start = 0;
  for (size_t nl = p.find('\n'); nl != std::string::npos; nl = p.find('\n', start)) {
    const std::string_view text(p.data() + start, nl - start);
    const std::optional<ProgressRecord> r = fd == 1 ? parse_progress_record(text) : std::nullopt;
    if (r) {
      record(*r);
    } else {
      line(fd == 2 ? 2 : 1, std::string_view(p.data() + start, nl + 1 - start));
    }
    start = nl + 1;
  }
  p.erase(0, start);
}

void ProgressTerminal::flush_partial() {
  for (int fd : {1, 2}) {
    std::string& p = pending_[fd];
    if (p.empty()) continue;
    // A record is written whole; its beginning waits for the rest.
    const size_t n = std::min(p.size(), kProgressRecordPrefix.size());
    if (fd == 1 && p.compare(0, n, kProgressRecordPrefix.substr(0, n)) == 0) continue;
    out(fd, p);
    mid_line_ = true;
    p.clear();
  }
}

void ProgressTerminal::finish() {
  flush_partial();
  for (int fd : {1, 2}) {  // an unfinished record at the end is dropped: nothing to draw from
    pending_[fd].clear();
  }
  if (drawn_) write_(1, "\n");
  drawn_ = false;
  shown_.reset();
}

void ProgressTerminal::line(int fd, std::string_view text) {
  out(fd, text);
  mid_line_ = false;
  if (shown_) draw();
}

void ProgressTerminal::out(int fd, std::string_view text) {
  if (drawn_) write_(1, kEraseLine);
  drawn_ = false;
  write_(fd, text);
}

void ProgressTerminal::draw() {
  if (mid_line_ || !shown_) return;
  std::string s = "\r";
  s += format_progress(*shown_, columns_());
  s += kEraseRest;
  write_(1, s);
  drawn_ = true;
}

void ProgressTerminal::record(const ProgressRecord& r) {
  shown_ = r.state;
  if (!r.close) {
    draw();
    return;
  }
  // tqdm's leave=True: the final line stays on the screen, output continues below.
  if (mid_line_) write_(1, "\n");
  mid_line_ = false;
  draw();
  write_(1, "\n");
  drawn_ = false;
  shown_.reset();
}

}  // namespace mtrain

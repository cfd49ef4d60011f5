// The process that owns the user's terminal (the launcher, or mtrain re-run
// under itself) relays its workers' stdout and stderr through a
// ProgressTerminal: lines pass through unchanged, progress records
// (common/progress.h) become one progress line drawn in place at the bottom
// ("\r" + line + erase-to-end-of-line). Before any other output the line is
// erased, the output written, and the line drawn again below it, so log
// lines are never mixed with it. A partial line (a prompt, a line still being
// written) is written on flush_partial(); the progress line waits until that
// line is ended. Everything written goes through `write(fd, bytes)`.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/progress.h"

namespace mtrain {

class ProgressTerminal {
 public:
  using Write = std::function<void(int fd, std::string_view bytes)>;
  // `columns`: the terminal's width now (<= 0 unknown), asked at every draw.
  ProgressTerminal(Write write, std::function<int()> columns)
      : write_(std::move(write)), columns_(std::move(columns)) {}

  // Bytes a worker wrote to its stdout (fd 1: records are taken out) or stderr (fd 2).
  void feed(int fd, std::string_view bytes);
  // Writes what is pending of an unfinished line (not a record's beginning).
  void flush_partial();
  // The workers are gone: everything pending out, the progress line ended
  // with a newline so the shell prompt starts below it.
  void finish();

 private:
  void line(int fd, std::string_view text);  // a complete line, with its '\n'
  void out(int fd, std::string_view text);   // erases the progress line first
  void draw();
  void record(const ProgressRecord& r);

  Write write_;
  std::function<int()> columns_;
  std::string pending_[3];              // per fd: an unfinished line
  std::optional<ProgressState> shown_;  // the progress line, when one is active
  bool drawn_ = false;                  // it is on the screen now
  bool mid_line_ = false;               // the cursor is after a partial line
};

}  // namespace mtrain

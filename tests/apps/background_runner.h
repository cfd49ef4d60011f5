// Helpers for tests that inspect a running mtrain: start it in the
// background, wait for a line of its output, read its threads' CPU binding.
#pragma once

#include <sched.h>

#include <map>

#include "mtrain_runner.h"

namespace mtrain::functional {

// A started mtrain process; killed (SIGKILL, by pid) and reaped when it goes out of scope.
struct Background {
  pid_t pid = -1;
  fs::path out;
  ~Background() { stop(); }
  void stop() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
  }
};

inline void start(Background& b, const std::vector<std::string>& args, const fs::path& dir,
                  const std::vector<std::pair<std::string, std::string>>& env) {
  b.out = dir / "background.out";
  std::vector<std::string> argv_s = {MTRAIN_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  b.pid = fork();
  ASSERT_GE(b.pid, 0);
  if (b.pid == 0) {
    const int fd = open(b.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || chdir(MTRAIN_SOURCE_DIR) != 0) _exit(125);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    execv(argv[0], argv.data());
    _exit(126);
  }
}

// Waits (up to 120 s) until the process printed `marker`; false if it ended first.
inline bool wait_for_output(const Background& b, const std::string& marker) {
  for (int i = 0; i < 12000; ++i) {
    if (contains(read_text(b.out), marker)) return true;
    if (waitpid(b.pid, nullptr, WNOHANG) == b.pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Thread id -> Cpus_allowed_list, for every thread of `pid`.
inline std::map<int, std::string> cpus_allowed(pid_t pid) {
  std::map<int, std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path("/proc") / std::to_string(pid) / "task")) {
    for (const std::string& l : lines_of(read_text(e.path() / "status")))
      if (l.rfind("Cpus_allowed_list:", 0) == 0)
        out[std::stoi(e.path().filename())] = l.substr(l.find_last_of('\t') + 1);
  }
  return out;
}

inline int allowed_core_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof(set), &set);
  return CPU_COUNT(&set);
}

}  // namespace mtrain::functional

// Runs the real mtrain binary (or mpirun) as a child process for the launch
// tests: environment overrides on a clean base (no inherited launch or MPI
// variables; OMP_NUM_THREADS=1; OpenMPI restricted to loopback), stdout and
// stderr captured in files, a hard timeout that kills the whole process group.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace mtrain::launch_test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
extern "C" char** environ;

struct Result {
  int exit_code = -1;  // 128+N when killed by signal N
  bool timed_out = false;
  double seconds = 0;
  std::string out, err;
  std::string describe() const {
    return "exit " + std::to_string(exit_code) + (timed_out ? " (TIMED OUT)" : "") + " after " +
           std::to_string(seconds) + " s\n--- stdout ---\n" + out + "--- stderr ---\n" + err;
  }
};

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline bool is_launch_variable(const std::string& name) {
  static const char* kPrefixes[] = {"OMPI_",
                                    "PMIX_",
                                    "PMI_",
                                    "MTRAIN_",
                                    "ASCEND_RT_VISIBLE_DEVICES",
                                    "CUDA_VISIBLE_DEVICES",
                                    "NPROC_PER_NODE",
                                    "NPUS_PER_NODE",
                                    "NNODES",
                                    "NODE_RANK",
                                    "MASTER_ADDR",
                                    "MASTER_PORT",
                                    "OMP_NUM_THREADS"};
  for (const char* p : kPrefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

// The base environment of every launch test.
inline std::map<std::string, std::string> base_env() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string s = *e;
    const size_t eq = s.find('=');
    if (eq == std::string::npos || is_launch_variable(s.substr(0, eq))) continue;
    env[s.substr(0, eq)] = s.substr(eq + 1);
  }
  env["OMP_NUM_THREADS"] = "1";
  env["OMPI_MCA_oob_tcp_if_include"] = "lo";
  env["OMPI_MCA_btl_tcp_if_include"] = "lo";
  env["PMIX_MCA_ptl_base_if_include"] = "lo";
  return env;
}

class Process {
 public:
  Process(std::vector<std::string> argv, const std::map<std::string, std::string>& overrides, const fs::path& dir,
          const std::string& tag, const fs::path& cwd = {})
      : out_(dir / (tag + ".out")), err_(dir / (tag + ".err")), start_(Clock::now()) {
    auto env = base_env();
    for (const auto& [k, v] : overrides) env[k] = v;
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp, args;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    for (auto& s : argv) args.push_back(s.data());
    args.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);  // so a timeout can end the launcher, mpirun and the ranks at once
      const int o = open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int e = open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(o, 1);
      dup2(e, 2);
      if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
      execvpe(args[0], args.data(), envp.data());
      _exit(127);
    }
  }

  pid_t pid() const { return pid_; }
  std::string stdout_so_far() const { return read_file(out_); }

  // Waits for the exit; after `timeout_s` kills the process group and marks the result.
  Result finish(double timeout_s) {
    Result r;
    int status = 0;
    const auto deadline = start_ + std::chrono::duration<double>(timeout_s);
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        r.timed_out = true;
        kill(-pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = read_file(out_);
    r.err = read_file(err_);
    return r;
  }

  // Polls stdout until `pattern` appears (true) or `timeout_s` passes (false).
  bool wait_for_stdout(const std::regex& pattern, double timeout_s) const {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (Clock::now() < deadline) {
      if (std::regex_search(stdout_so_far(), pattern)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  fs::path out_, err_;
  Clock::time_point start_;
  pid_t pid_ = -1;
};

inline Result run(std::vector<std::string> argv, const std::map<std::string, std::string>& overrides,
                  const fs::path& dir, const std::string& tag, double timeout_s, const fs::path& cwd = {}) {
  Process p(std::move(argv), overrides, dir, tag, cwd);
  return p.finish(timeout_s);
}

// Binds 0.0.0.0:port (port 0 = the kernel's choice); returns the fd and the port, fd -1 if taken.
inline std::pair<int, int> bind_port(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return {-1, port};
  }
  socklen_t len = sizeof(sa);
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  return {fd, ntohs(sa.sin_port)};
}

// A MASTER_PORT that is free right now together with MASTER_PORT+1 (ompi-server's port).
inline int free_port() {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const auto [fd, port] = bind_port(0);
    if (fd < 0 || port >= 65535) {
      if (fd >= 0) close(fd);
      continue;
    }
    const auto [next_fd, next] = bind_port(port + 1);
    close(fd);
    if (next_fd >= 0) {
      close(next_fd);
      return port;
    }
  }
  return 29500;
}

inline int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}

// "rank R/W node N local L -> npu:D (pid P, threads T)" lines, in order of appearance.
struct RankLine {
  int rank, world, node, local, device, pid, threads;
};
inline std::vector<RankLine> rank_lines(const std::string& out) {
  static const std::regex re(R"(rank (\d+)/(\d+) node (\d+) local (\d+) -> npu:(\d+) \(pid (\d+), threads (\d+)\))");
  std::vector<RankLine> lines;
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) {
    const auto& m = *it;
    lines.push_back({std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3]), std::stoi(m[4]), std::stoi(m[5]),
                     std::stoi(m[6]), std::stoi(m[7])});
  }
  return lines;
}

// Node-style environment for a multi-node launch on loopback.
inline std::map<std::string, std::string> node_env(int nnodes, int node, int nproc, int port, double timeout_s) {
  return {{"NNODES", std::to_string(nnodes)},        {"NODE_RANK", std::to_string(node)},
          {"NPROC_PER_NODE", std::to_string(nproc)}, {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)},     {"MTRAIN_RDZV_TIMEOUT", std::to_string(timeout_s)}};
}

// How many times each MPI scenario repeats (MTRAIN_LAUNCH_LOOPS, default 2; 10 for a stress run).
inline int loops() {
  const char* v = std::getenv("MTRAIN_LAUNCH_LOOPS");
  return v ? std::max(1, std::atoi(v)) : 2;
}

}  // namespace mtrain::launch_test

#include "parallel_runs.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>
#include <utility>

extern char** environ;

namespace mtrain::bench {
namespace {

using Clock = std::chrono::steady_clock;

double tv_seconds(const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); }

std::string b(bool v) { return v ? "true" : "false"; }

// Variables that would change how the child launches or threads: the bench
// decides these itself (ranks through NPROC_PER_NODE, threads through
// --num_threads).
bool dropped_from_env(const std::string& kv, bool drop_wait_policy) {
  static const char* kDrop[] = {"NPROC_PER_NODE=",  "NPUS_PER_NODE=",        "NNODES=",          "NODE_RANK=",
                                "OMP_NUM_THREADS=", "OPENBLAS_NUM_THREADS=", "GOTO_NUM_THREADS="};
  for (const char* p : kDrop)
    if (kv.rfind(p, 0) == 0) return true;
  return drop_wait_policy && kv.rfind("OMP_WAIT_POLICY=", 0) == 0;
}

std::vector<std::string> child_env(const RunSpec& spec, const Layout& layout) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (!dropped_from_env(*e, !spec.omp_wait_policy.empty())) env.emplace_back(*e);
  if (layout.ranks > 1) env.push_back("NPROC_PER_NODE=" + std::to_string(layout.ranks));
  if (!spec.omp_wait_policy.empty()) env.push_back("OMP_WAIT_POLICY=" + spec.omp_wait_policy);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> p;
  for (std::string& s : v) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

// Waits for `pid`; after `timeout_s` sends SIGTERM (the launcher forwards it to
// mpirun, which ends the ranks), 10 s later SIGKILL. Returns the exit code
// (128+N for signal N).
int wait_child(pid_t pid, int timeout_s, bool& timed_out, double& cpu_s) {
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(timeout_s);
  bool termed = false;
  for (;;) {
    int status = 0;
    rusage ru{};
    const pid_t r = wait4(pid, &status, WNOHANG, &ru);
    if (r == pid) {
      cpu_s = tv_seconds(ru.ru_utime) + tv_seconds(ru.ru_stime);
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (r < 0) throw std::runtime_error(std::string("wait4: ") + std::strerror(errno));
    const Clock::time_point now = Clock::now();
    if (!termed && now > deadline) {
      timed_out = termed = true;
      kill(pid, SIGTERM);
    } else if (termed && now > deadline + std::chrono::seconds(10)) {
      kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Busy CPU seconds of the whole machine so far (every process, all cores;
// steal included: time the hypervisor gave to someone else). -1: unreadable.
double machine_busy_s() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) || cpu != "cpu") return -1;
  return (user + nice + system + irq + softirq + steal) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// CPU seconds this process (the bench itself, all threads) has used so far.
double self_cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return tv_seconds(ru.ru_utime) + tv_seconds(ru.ru_stime);
}

std::string mpirun_line(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find("run sh: `");
    if (at != std::string::npos) return line.substr(at + 9, line.rfind('`') - at - 9);
  }
  return "";
}

std::vector<StepLog> read_steps(const std::string& jsonl, int warmup) {
  std::ifstream in(jsonl);
  std::vector<StepLog> steps;
  std::string line;
  int seen = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("elapsed_time_per_iteration_ms")) continue;  // eval lines
    if (seen++ < warmup) continue;
    StepLog s;
    s.ms = j["elapsed_time_per_iteration_ms"].get<double>();
    s.tokens = j["tokens_per_second"].get<double>() * s.ms / 1000.0;
    s.comm_s = j.value("comm_seconds", 0.0);
    s.comm_bytes = j.value("comm_bytes", 0.0);
    s.loss = j.value("loss", 0.0);
    s.simulated_ms = j.value("simulated_device_time_per_iteration_ms", 0.0);
    steps.push_back(s);
  }
  return steps;
}

}  // namespace

std::vector<Layout> known_layouts(int cores, int64_t num_layers) {
  const int per_rank = std::max(1, cores / 2);
  const std::string t = std::to_string(per_rank) + (per_rank == 1 ? " thread" : " threads");
  const std::string first = std::to_string(num_layers - 1);
  return {
      {"1x" + std::to_string(cores), "1 rank x " + std::to_string(cores) + " threads", 1, cores, {}},
      {"dp2", "2 ranks x " + t + ", data parallel", 2, per_rank, {}},
      {"tp2", "2 ranks x " + t + ", tensor parallel", 2, per_rank, {"--tensor_model_parallel_size", "2"}},
      {"pp2", "2 ranks x " + t + ", pipeline parallel", 2, per_rank, {"--pipeline_model_parallel_size", "2"}},
      {"tp2sp",
       "2 ranks x " + t + ", TP + sequence parallel",
       2,
       per_rank,
       {"--tensor_model_parallel_size", "2", "--sequence_parallel", "true"},
       false},
      {"pp2u",
       "2 ranks x " + t + ", PP, " + first + "+1 layers",
       2,
       per_rank,
       {"--pipeline_model_parallel_size", "2", "--decoder_first_pipeline_num_layers", first},
       false},
      {"cp2", "2 ranks x " + t + ", context parallel (ring)", 2, per_rank, {"--context_parallel_size", "2"}, false},
      {"cp2u",
       "2 ranks x " + t + ", context parallel (Ulysses)",
       2,
       per_rank,
       {"--context_parallel_size", "2", "--context_parallel_algo", "ulysses_cp_algo"},
       false},
  };
}

std::vector<std::string> mtrain_args(const RunSpec& spec, const Layout& layout, const std::string& output_dir) {
  const model::ModelConfig& c = spec.model;
  auto n = [](int64_t v) { return std::to_string(v); };
  const std::vector<std::pair<std::string, std::string>> flags = {
      {"--dataset", spec.dataset},
      {"--tokenizer", spec.tokenizer},
      // The model shape, flag by flag from the ModelConfig bench_train builds.
      {"--num_layers", n(c.num_layers)},
      {"--hidden_size", n(c.hidden)},
      {"--ffn_hidden_size", n(c.ffn)},
      {"--num_attention_heads", n(c.heads)},
      {"--group_query_attention", b(c.groups != c.heads)},
      {"--num_query_groups", n(c.groups)},
      {"--kv_channels", n(c.head_dim)},
      {"--vocab_size", n(c.vocab)},
      {"--seq_length", n(c.seq_length)},
      {"--max_position_embeddings", n(c.max_positions)},
      {"--normalization", c.rmsnorm ? "RMSNorm" : "LayerNorm"},
      {"--swiglu", b(c.swiglu)},
      {"--position_embedding_type", c.rope ? "rope" : "learned_absolute"},
      {"--untie_embeddings_and_output_weights", b(c.untie)},
      {"--add_bias_linear", b(c.add_bias_linear)},
      {"--add_qkv_bias", b(c.add_qkv_bias)},
      // bench_train's step: no recomputation, flash attention, every fusion on
      // (mtrain's defaults), AdamW wd 0.1, betas 0.9/0.95, clip 1.0, lr 6e-4.
      {"--recompute_granularity", "none"},
      {"--attention_backend", "flash"},
      {"--lr", "6e-4"},
      {"--lr_decay_style", "constant"},
      {"--micro_batch_size", n(c.micro_batch)},
      {"--global_batch_size", n(spec.global_batch)},
      {"--train_iters", n(spec.warmup + spec.steps)},
      {"--log_interval", "1"},
      {"--log_throughput", "true"},  // the simulated NPU's step time of the same layout, for comparison
      {"--num_threads", n(layout.threads)},
      {"--output_dir", output_dir},
  };
  std::vector<std::string> a = {"pt"};
  for (const auto& [flag, value] : flags) {
    a.push_back(flag);
    a.push_back(value);
  }
  a.insert(a.end(), layout.args.begin(), layout.args.end());
  return a;
}

RunResult run_layout(const RunSpec& spec, const Layout& layout, const std::string& work_dir) {
  namespace fs = std::filesystem;
  RunResult r;
  const std::string out = (fs::path(work_dir) / layout.name).string();
  r.log_path = out + ".log";
  fs::remove_all(out);  // the logger appends to logging.jsonl

  std::vector<std::string> argv = {spec.mtrain};
  for (std::string& s : mtrain_args(spec, layout, out)) argv.push_back(std::move(s));
  std::vector<std::string> env = child_env(spec, layout);
  std::vector<char*> argv_c = c_strings(argv), env_c = c_strings(env);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, r.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const double busy0 = machine_busy_s(), self0 = self_cpu_s();
  const Clock::time_point t0 = Clock::now();
  const int err = posix_spawn(&pid, spec.mtrain.c_str(), &fa, nullptr, argv_c.data(), env_c.data());
  posix_spawn_file_actions_destroy(&fa);
  if (err != 0) throw std::runtime_error("cannot start " + spec.mtrain + ": " + std::strerror(err));
  r.exit_code = wait_child(pid, spec.timeout_s, r.timed_out, r.cpu_s);
  r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double busy1 = machine_busy_s(), self1 = self_cpu_s();
  if (busy0 >= 0 && busy1 >= 0) r.others_cores = std::max(0.0, (busy1 - busy0 - r.cpu_s - (self1 - self0)) / r.wall_s);
  r.mpirun_command = mpirun_line(r.log_path);
  r.steps = read_steps((fs::path(out) / "logging.jsonl").string(), spec.warmup);
  return r;
}

std::string tail_of(const std::string& path, int lines) {
  std::ifstream in(path);
  std::deque<std::string> last;
  std::string line;
  while (std::getline(in, line)) {
    last.push_back(line);
    if (static_cast<int>(last.size()) > lines) last.pop_front();
  }
  std::string s;
  for (const std::string& l : last) s += "  | " + l + "\n";
  return s;
}

}  // namespace mtrain::bench

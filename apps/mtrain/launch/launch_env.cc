#include "mtrain/launch/launch_env.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "common/errors.h"

extern char** environ;

namespace mtrain::launch {

Env Env::from_process() {
  std::map<std::string, std::string> vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    vars.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return Env(std::move(vars));
}

std::optional<std::string> Env::get(const std::string& name) const {
  auto it = vars_.find(name);
  if (it == vars_.end()) return std::nullopt;
  return it->second;
}

bool under_mpi(const Env& env) {
  return env.has("OMPI_COMM_WORLD_SIZE") || env.has("OMPI_COMM_WORLD_RANK") || env.has("PMIX_RANK") ||
         env.has("PMI_RANK");
}

std::optional<long long> parse_integer(const std::string& text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return std::stoll(text);
}

namespace {

// An integer variable in [lo, hi]; nullopt when unset (an empty value counts as unset, as in torchrun).
std::optional<int> int_var(const Env& env, const std::string& name, long long lo, long long hi) {
  auto v = env.get(name);
  if (!v || v->empty()) return std::nullopt;
  auto n = parse_integer(*v);
  if (!n || *n < lo || *n > hi) {
    throw UsageError(fmt::format("{}={} is not an integer in [{}, {}]", name, *v, lo, hi),
                     fmt::format("set {} to a whole number, or unset it", name));
  }
  return static_cast<int>(*n);
}

double timeout_var(const Env& env) {
  auto v = env.get("MTRAIN_RDZV_TIMEOUT");
  if (!v || v->empty()) return kDefaultRdzvTimeoutSeconds;
  char* end = nullptr;
  errno = 0;
  const double t = std::strtod(v->c_str(), &end);
  if (errno != 0 || end == v->c_str() || *end != '\0' || !(t > 0) || t > 86400) {
    throw UsageError(fmt::format("MTRAIN_RDZV_TIMEOUT={} is not a number of seconds in (0, 86400]", *v),
                     "e.g. MTRAIN_RDZV_TIMEOUT=300 waits up to five minutes for every node to join");
  }
  return t;
}

}  // namespace

LaunchRequest read_launch_request(const Env& env) {
  LaunchRequest r;
  constexpr int kMaxProcs = 1 << 16;
  const auto nproc = int_var(env, "NPROC_PER_NODE", 1, kMaxProcs);
  const auto npus = int_var(env, "NPUS_PER_NODE", 1, kMaxProcs);
  if (nproc && npus && *nproc != *npus) {
    r.warnings.push_back(
        fmt::format("NPROC_PER_NODE={} and NPUS_PER_NODE={} disagree; using NPROC_PER_NODE", *nproc, *npus));
  }
  r.nproc_set = nproc || npus;
  r.nproc_per_node = nproc ? *nproc : npus.value_or(1);
  const auto nnodes = int_var(env, "NNODES", 1, kMaxProcs);
  r.nnodes_set = nnodes.has_value();
  r.nnodes = nnodes.value_or(1);
  r.node_rank = int_var(env, "NODE_RANK", 0, kMaxProcs).value_or(0);
  if (r.node_rank >= r.nnodes) {
    throw UsageError(fmt::format("NODE_RANK={} is out of range for NNODES={}", r.node_rank, r.nnodes),
                     fmt::format("NODE_RANK counts nodes from 0 to NNODES-1 ({})", r.nnodes - 1));
  }
  if (auto a = env.get("MASTER_ADDR"); a && !a->empty()) r.master_addr = *a;
  r.master_port = int_var(env, "MASTER_PORT", 1, 65535).value_or(kDefaultMasterPort);
  r.ompi_server_port =
      int_var(env, "MTRAIN_OMPI_SERVER_PORT", 0, 65535).value_or(r.master_port < 65535 ? r.master_port + 1 : 0);
  r.rdzv_timeout_s = timeout_var(env);
  r.ifname = env.get("MTRAIN_IFNAME").value_or("");
  r.master_addr_set = env.has("MASTER_ADDR");
  if (r.multi_node() && !r.master_addr_set) {
    r.warnings.push_back("NNODES > 1 without MASTER_ADDR: using 127.0.0.1 (every node on this machine)");
  }
  return r;
}

namespace {

// One flag over its variable; `var_value`: the variable's value when it was set.
void override_with_flag(const char* flag, std::optional<int> value, const char* var, std::optional<int> var_value,
                        int& field, std::vector<std::string>& warnings) {
  if (!value) return;
  if (*value < 1)
    throw UsageError(fmt::format("--{} {}: not a positive integer", flag, *value),
                     fmt::format("give --{} 1 or more (or drop it and set {})", flag, var));
  if (var_value && *var_value != *value)
    warnings.push_back(fmt::format("{}={} and --{} {} disagree; using --{}", var, *var_value, flag, *value, flag));
  field = *value;
}

}  // namespace

void apply_launch_flags(LaunchRequest& r, std::optional<int> nnodes, std::optional<int> nproc_per_node) {
  const bool was_multi_node = r.multi_node();
  override_with_flag("nproc_per_node", nproc_per_node, "NPROC_PER_NODE",
                     r.nproc_set ? std::optional<int>(r.nproc_per_node) : std::nullopt, r.nproc_per_node, r.warnings);
  override_with_flag("nnodes", nnodes, "NNODES", r.nnodes_set ? std::optional<int>(r.nnodes) : std::nullopt, r.nnodes,
                     r.warnings);
  r.nproc_set = r.nproc_set || nproc_per_node.has_value();
  r.nnodes_set = r.nnodes_set || nnodes.has_value();
  if (r.node_rank >= r.nnodes)
    throw UsageError(fmt::format("NODE_RANK={} is out of range for --nnodes {}", r.node_rank, r.nnodes),
                     fmt::format("NODE_RANK counts nodes from 0 to {}", r.nnodes - 1));
  if (r.multi_node() && !was_multi_node && !r.master_addr_set)
    r.warnings.push_back("--nnodes > 1 without MASTER_ADDR: using 127.0.0.1 (every node on this machine)");
}

bool wants_relaunch(const LaunchRequest& request, const Env& env, const std::vector<std::string>& args, bool dry_run) {
  if (under_mpi(env) || dry_run) return false;
  if (request.nproc_per_node <= 1 && !request.nnodes_set) return false;
  if (!args.empty() && args[0] == "npu-smi") return false;  // reads the machine's state; one process
  if (!args.empty() && args[0] == "plan") return false;     // plans the whole world in this process (lib/plan)
  for (const auto& a : args) {
    if (a == "-h" || a == "--help" || a == "--version") return false;
  }
  return true;
}

RankLaunchInfo read_rank_launch_info(const Env& env) {
  RankLaunchInfo info;
  auto get_int = [&](const char* name, int fallback) {
    auto v = env.get(name);
    if (!v) return fallback;
    auto n = parse_integer(*v);
    if (!n || *n > std::numeric_limits<int>::max()) {
      throw DistributedError(fmt::format("{}={} is malformed", name, *v),
                             "this variable is set by mtrain's launcher; do not set it by hand");
    }
    return static_cast<int>(*n);
  };
  info.nnodes = get_int(kEnvNnodes, 1);
  info.node_rank = get_int(kEnvNodeRank, 0);
  info.nproc_per_node = get_int(kEnvNprocPerNode, 1);
  info.rdzv_id = env.get(kEnvRdzvId).value_or("");
  info.endpoint = env.get(kEnvRdzvEndpoint).value_or("");
  info.joined_file = env.get(kEnvRdzvJoinedFile).value_or("");
  if (auto d = env.get(kEnvRdzvDeadline)) info.deadline_epoch_s = std::strtod(d->c_str(), nullptr);
  if (info.nnodes > 1 && info.rdzv_id.empty()) {
    throw DistributedError(fmt::format("{}={} without {}", kEnvNnodes, info.nnodes, kEnvRdzvId),
                           "multi-node jobs are started with NNODES/NODE_RANK/MASTER_ADDR/MASTER_PORT, not by hand");
  }
  return info;
}

}  // namespace mtrain::launch

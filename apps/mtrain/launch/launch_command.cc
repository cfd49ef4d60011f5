#include "mtrain/launch/launch_command.h"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

namespace mtrain::launch {

namespace {

int read_int_file(const std::string& path, int fallback) {
  std::ifstream in(path);
  int v = fallback;
  if (!(in >> v)) return fallback;
  return v;
}

// Variables a rank may need, forwarded with `-x NAME` when set. Any MTRAIN_* is forwarded too.
constexpr const char* kForwarded[] = {
    "OMP_NUM_THREADS",   "OPENBLAS_NUM_THREADS", "ASCEND_RT_VISIBLE_DEVICES",
    "CPU_AFFINITY_CONF", "CUDA_VISIBLE_DEVICES", "NNODES",
    "NODE_RANK",         "NPROC_PER_NODE",       "NPUS_PER_NODE",
    "MASTER_ADDR",       "MASTER_PORT",
};

bool is_loopback_addr(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

bool has_word(const std::vector<std::string>& words, std::initializer_list<const char*> any) {
  for (const auto& w : words) {
    for (const char* a : any) {
      if (w == a || w.rfind(std::string(a) + "=", 0) == 0) return true;
    }
  }
  return false;
}

void add_env(Command& c, const Env& env, const std::string& name, const std::string& value) {
  if (!env.has(name)) c.env.emplace_back(name, value);
}

// CPU_AFFINITY_CONF with a mode other than 0: the ranks bind themselves
// (lib/device/cpu_affinity.h) and need the whole node's cores to start from.
bool ranks_bind_themselves(const Env& env) {
  const std::string v = env.get("CPU_AFFINITY_CONF").value_or("");
  const std::string mode = v.substr(0, v.find(','));
  return mode.find_first_not_of(" \t0") != std::string::npos;
}

// Core binding: oversubscribed ranks must not be pinned (they would share one core
// each while others idle); otherwise each rank gets cores/nproc cores of its own.
void add_binding(Command& c, const MpirunPlan& plan, const std::vector<std::string>& extra, const Env& env) {
  const int nproc = plan.request.nproc_per_node;
  const bool user_binding = has_word(extra, {"--bind-to", "--map-by", "--rank-by", "--cpus-per-proc"}) ||
                            env.has("OMPI_MCA_hwloc_base_binding_policy") ||
                            env.has("OMPI_MCA_rmaps_base_mapping_policy");
  if (ranks_bind_themselves(env)) {
    if (nproc > plan.host.cores && !has_word(extra, {"--oversubscribe"})) c.argv.push_back("--oversubscribe");
    if (!user_binding) c.argv.insert(c.argv.end(), {"--bind-to", "none"});
  } else if (nproc > plan.host.cores) {
    if (!has_word(extra, {"--oversubscribe"})) c.argv.push_back("--oversubscribe");
    if (!user_binding) c.argv.insert(c.argv.end(), {"--bind-to", "none"});
  } else if (!user_binding) {
    const int per_rank = std::max(1, plan.host.cores / nproc);
    c.argv.insert(c.argv.end(), {"--map-by", fmt::format("slot:PE={}", per_rank), "--bind-to", "core"});
  }
}

}  // namespace

HostFacts probe_host() {
  HostFacts h;
  h.root = geteuid() == 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    h.cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    return h;
  }
  // Hardware threads of one core count once, as mpirun counts slots.
  std::set<std::pair<int, int>> cores;
  int cpus = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    ++cpus;
    const std::string topo = fmt::format("/sys/devices/system/cpu/cpu{}/topology/", cpu);
    cores.emplace(read_int_file(topo + "physical_package_id", 0), read_int_file(topo + "core_id", cpu));
  }
  h.cores = std::max(1, std::min(cpus, static_cast<int>(cores.size())));
  return h;
}

std::string shell_quote(const std::string& word) {
  if (word.empty()) return "''";
  const bool plain = std::all_of(word.begin(), word.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) ||
           std::string_view("_-./:=,+@%").find(ch) != std::string_view::npos;
  });
  if (plain) return word;
  std::string q = "'";
  for (char ch : word) {
    if (ch == '\'') {
      q += "'\\''";
    } else {
      q += ch;
    }
  }
  return q + "'";
}

std::string Command::display() const {
  std::string s;
  for (const auto& [k, v] : env) s += k + "=" + shell_quote(v) + " ";
  for (size_t i = 0; i < argv.size(); ++i) {
    if (i) s += ' ';
    s += shell_quote(argv[i]);
  }
  return s;
}

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

bool user_chose_interfaces(const Env& env) {
  for (const char* name : {"OMPI_MCA_oob_tcp_if_include", "OMPI_MCA_oob_tcp_if_exclude", "OMPI_MCA_btl_tcp_if_include",
                           "OMPI_MCA_btl_tcp_if_exclude", "PMIX_MCA_ptl_base_if_include",
                           "PMIX_MCA_ptl_base_if_exclude", "PMIX_MCA_ptl_tcp_if_include"}) {
    if (env.has(name)) return true;
  }
  return false;
}

std::string choose_mpi_interface(const LaunchRequest& request, const Env& env,
                                 const std::function<std::string(const std::string&)>& detect) {
  if (!request.ifname.empty()) return request.ifname;
  if (user_chose_interfaces(env)) return "";
  if (is_loopback_addr(request.master_addr)) return "lo";
  return detect ? detect(request.master_addr) : "";
}

std::vector<std::pair<std::string, std::string>> interface_env(const std::string& mpi_interface, const Env& env) {
  std::vector<std::pair<std::string, std::string>> out;
  if (mpi_interface.empty()) return out;
  for (const char* name :
       {"OMPI_MCA_oob_tcp_if_include", "OMPI_MCA_btl_tcp_if_include", "PMIX_MCA_ptl_base_if_include"}) {
    if (!env.has(name)) out.emplace_back(name, mpi_interface);
  }
  return out;
}

Command build_mpirun_command(const MpirunPlan& plan, const Env& env) {
  const LaunchRequest& req = plan.request;
  const std::vector<std::string> extra = split_words(env.get("MTRAIN_MPIRUN_ARGS").value_or(""));
  Command c;
  if (req.multi_node()) {
    for (auto& kv : interface_env(plan.mpi_interface, env)) c.env.push_back(std::move(kv));
    c.env.emplace_back("OMPI_MCA_pmix_server_uri", plan.server_uri);  // == mpirun --ompi-server <uri>
    c.env.emplace_back(kEnvNnodes, std::to_string(req.nnodes));
    c.env.emplace_back(kEnvNodeRank, std::to_string(req.node_rank));
    c.env.emplace_back(kEnvNprocPerNode, std::to_string(req.nproc_per_node));
    c.env.emplace_back(kEnvRdzvId, plan.rdzv_id);
    c.env.emplace_back(kEnvRdzvDeadline, fmt::format("{:.3f}", plan.deadline_epoch_s));
    c.env.emplace_back(kEnvRdzvEndpoint, fmt::format("{}:{}", req.master_addr, req.master_port));
    if (!plan.joined_file.empty()) c.env.emplace_back(kEnvRdzvJoinedFile, plan.joined_file);
  }
  if (plan.progress_records) c.env.emplace_back("MTRAIN_PROGRESS_RECORDS", "1");
  c.argv = {env.get("MTRAIN_MPIRUN").value_or("mpirun"), "-np", std::to_string(req.nproc_per_node)};
  if (plan.host.root) c.argv.push_back("--allow-run-as-root");
  add_binding(c, plan, extra, env);
  if (!req.multi_node() && !env.has("OMPI_MCA_btl") && !has_word(extra, {"--hostfile", "--host", "-H"})) {
    c.argv.insert(c.argv.end(), {"--mca", "btl", "self,vader"});  // one node: shared memory, no network
  }
  std::set<std::string> forwarded;
  for (const auto& [k, v] : env.vars()) {
    if (k.rfind("MTRAIN_", 0) == 0 && k != "MTRAIN_MPIRUN" && k != "MTRAIN_MPIRUN_ARGS") forwarded.insert(k);
  }
  for (const char* name : kForwarded) {
    if (env.has(name)) forwarded.insert(name);
  }
  for (const auto& [k, v] : c.env) {
    if (k.rfind("MTRAIN_", 0) == 0) forwarded.insert(k);
  }
  for (const auto& name : forwarded) c.argv.insert(c.argv.end(), {"-x", name});
  c.argv.insert(c.argv.end(), extra.begin(), extra.end());
  c.argv.push_back(plan.exe);
  c.argv.insert(c.argv.end(), plan.args.begin(), plan.args.end());
  return c;
}

Command build_ompi_server_command(const HostFacts& host, const std::string& mpi_interface, int port, const Env& env) {
  Command c;
  c.env = interface_env(mpi_interface, env);
  if (port > 0) {  // overrides a user's static ports: those are meant for mpirun, which shares node 0
    c.env.emplace_back("OMPI_MCA_oob_tcp_static_ipv4_ports", std::to_string(port));
    c.env.emplace_back("OMPI_MCA_oob_tcp_static_ipv6_ports", std::to_string(port));
  }
  if (host.root) {
    add_env(c, env, "OMPI_ALLOW_RUN_AS_ROOT", "1");  // ompi-server has no --allow-run-as-root flag
    add_env(c, env, "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
  }
  // `-r +` prints the URI on stderr; `-r -` sits in a stdio buffer when stdout is a pipe.
  c.argv = {env.get("MTRAIN_OMPI_SERVER").value_or("ompi-server"), "--no-daemonize", "-r", "+"};
  return c;
}

}  // namespace mtrain::launch

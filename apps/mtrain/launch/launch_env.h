// What the environment asks of a launch, read once into plain values.
//
// mtrain is started in one of three ways (docs/LAUNCH.md):
//   1. plainly: one process, no MPI;
//   2. under mpirun (`mpirun -np 4 mtrain ...`): OMPI_COMM_WORLD_* / PMIX_RANK
//      are set, every process is a rank, nothing is re-launched;
//   3. torchrun-style, with NPROC_PER_NODE (or MindSpeed's NPUS_PER_NODE) > 1
//      or NNODES set: mtrain re-executes itself under mpirun (launch_run.h).
// Env is a snapshot of variables so that parsing is testable without setenv().
#pragma once

#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mtrain::launch {

// A snapshot of environment variables.
class Env {
 public:
  Env() = default;
  explicit Env(std::map<std::string, std::string> vars) : vars_(std::move(vars)) {}
  Env(std::initializer_list<std::pair<const std::string, std::string>> vars) : vars_(vars) {}
  static Env from_process();  // copies `environ`

  std::optional<std::string> get(const std::string& name) const;
  bool has(const std::string& name) const { return vars_.count(name) != 0; }
  void set(const std::string& name, std::string value) { vars_[name] = std::move(value); }
  const std::map<std::string, std::string>& vars() const { return vars_; }

 private:
  std::map<std::string, std::string> vars_;
};

// True when this process is a rank started by mpirun (or another PMIx launcher).
bool under_mpi(const Env& env);

// Rendezvous timeout (seconds): MTRAIN_RDZV_TIMEOUT.
constexpr double kDefaultRdzvTimeoutSeconds = 120.0;
constexpr int kDefaultMasterPort = 29500;

// The torchrun-style variables, validated. Defaults are torchrun's.
struct LaunchRequest {
  int nproc_per_node = 1;                 // NPROC_PER_NODE or NPUS_PER_NODE
  int nnodes = 1;                         // NNODES
  int node_rank = 0;                      // NODE_RANK
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR
  int master_port = kDefaultMasterPort;   // MASTER_PORT
  double rdzv_timeout_s = kDefaultRdzvTimeoutSeconds;
  std::string ifname;                             // MTRAIN_IFNAME: NIC or CIDR for OpenMPI's TCP traffic
  int ompi_server_port = kDefaultMasterPort + 1;  // MTRAIN_OMPI_SERVER_PORT, default MASTER_PORT+1; 0 = any
  bool nproc_set = false;
  bool nnodes_set = false;
  bool master_addr_set = false;       // MASTER_ADDR given (else every node is this machine)
  std::vector<std::string> warnings;  // e.g. NPROC_PER_NODE and NPUS_PER_NODE disagree

  bool multi_node() const { return nnodes > 1; }
  int world_size() const { return nnodes * nproc_per_node; }
};

// Throws UsageError naming the variable for a malformed or out-of-range value.
LaunchRequest read_launch_request(const Env& env);

// torchrun's flags --nnodes / --nproc_per_node (command line or YAML config)
// win over NNODES / NPROC_PER_NODE, as a flag over the environment does in
// torchrun; a disagreement adds a warning. UsageError for a value below 1 or a
// NODE_RANK outside the new node count.
void apply_launch_flags(LaunchRequest& request, std::optional<int> nnodes, std::optional<int> nproc_per_node);

// Re-launch under mpirun? Only when not already a rank, when the request asks
// for it (NPROC_PER_NODE > 1 or NNODES set), not for a dry run (it plans the
// whole world in one process, lib/plan), and when the command line is not a
// request for help or the version (those print locally).
bool wants_relaunch(const LaunchRequest& request, const Env& env, const std::vector<std::string>& args,
                    bool dry_run = false);

// Variables the launcher hands to its ranks (set by mtrain, read in rendezvous.cc).
inline constexpr const char* kEnvNnodes = "MTRAIN_NNODES";
inline constexpr const char* kEnvNodeRank = "MTRAIN_NODE_RANK";
inline constexpr const char* kEnvNprocPerNode = "MTRAIN_NPROC_PER_NODE";
inline constexpr const char* kEnvRdzvId = "MTRAIN_RDZV_ID";                   // service-name prefix of this job
inline constexpr const char* kEnvRdzvDeadline = "MTRAIN_RDZV_DEADLINE";       // epoch seconds
inline constexpr const char* kEnvRdzvEndpoint = "MTRAIN_RDZV_ENDPOINT";       // MASTER_ADDR:MASTER_PORT, for messages
inline constexpr const char* kEnvRdzvJoinedFile = "MTRAIN_RDZV_JOINED_FILE";  // local rank 0 creates it once joined

// The launcher-set world description a rank reads (nnodes == 1 without a multi-node launch).
struct RankLaunchInfo {
  int nnodes = 1;
  int node_rank = 0;
  int nproc_per_node = 1;
  std::string rdzv_id;
  std::string endpoint;
  std::string joined_file;
  double deadline_epoch_s = 0;  // 0 = none
};
RankLaunchInfo read_rank_launch_info(const Env& env);

// Parses a whole decimal integer (no sign games, no trailing junk); nullopt if malformed.
std::optional<long long> parse_integer(const std::string& text);

}  // namespace mtrain::launch

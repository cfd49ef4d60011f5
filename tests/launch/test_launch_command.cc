// The launcher's pure decisions: reading the torchrun-style variables, when to
// re-launch, and the mpirun / ompi-server command lines (root, oversubscription,
// binding, shared-memory-only on one node, interfaces, forwarded variables).
#include <gtest/gtest.h>

#include <algorithm>

#include "common/errors.h"
#include "mtrain/launch/launch_command.h"
#include "mtrain/launch/launch_env.h"

namespace mtrain::launch {
namespace {

bool has_seq(const std::vector<std::string>& argv, const std::vector<std::string>& seq) {
  return std::search(argv.begin(), argv.end(), seq.begin(), seq.end()) != argv.end();
}

bool has(const std::vector<std::string>& argv, const std::string& word) { return has_seq(argv, {word}); }

std::string env_of(const Command& c, const std::string& name) {
  for (const auto& [k, v] : c.env) {
    if (k == name) return v;
  }
  return "<unset>";
}

MpirunPlan single_node(int nproc, int cores, bool root) {
  MpirunPlan p;
  p.request.nproc_per_node = nproc;
  p.request.nproc_set = true;
  p.host = {cores, root};
  p.exe = "/opt/mtrain/bin/mtrain";
  p.args = {"sft", "job.yaml", "--lr", "1e-4"};
  return p;
}

TEST(LaunchRequest, DefaultsAreTorchrunsAndNothingIsRequested) {
  const LaunchRequest r = read_launch_request(Env());
  EXPECT_EQ(r.nproc_per_node, 1);
  EXPECT_EQ(r.nnodes, 1);
  EXPECT_EQ(r.node_rank, 0);
  EXPECT_EQ(r.master_addr, "127.0.0.1");
  EXPECT_EQ(r.master_port, 29500);
  EXPECT_DOUBLE_EQ(r.rdzv_timeout_s, 120);
  EXPECT_FALSE(wants_relaunch(r, Env(), {"sft"}));
}

TEST(LaunchRequest, NpusPerNodeIsAnAliasAndDisagreementWarns) {
  EXPECT_EQ(read_launch_request(Env({{"NPUS_PER_NODE", "4"}})).nproc_per_node, 4);
  const LaunchRequest r = read_launch_request(Env({{"NPROC_PER_NODE", "2"}, {"NPUS_PER_NODE", "4"}}));
  EXPECT_EQ(r.nproc_per_node, 2);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("NPROC_PER_NODE=2 and NPUS_PER_NODE=4 disagree"), std::string::npos);
}

TEST(LaunchRequest, MalformedValuesAreUsageErrorsNamingTheVariable) {
  auto message = [](std::map<std::string, std::string> vars) {
    try {
      read_launch_request(Env(vars));
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(message({{"NPROC_PER_NODE", "two"}}), "NPROC_PER_NODE=two is not an integer in [1, 65536]");
  EXPECT_EQ(message({{"NPROC_PER_NODE", "0"}}), "NPROC_PER_NODE=0 is not an integer in [1, 65536]");
  EXPECT_EQ(message({{"MASTER_PORT", "70000"}}), "MASTER_PORT=70000 is not an integer in [1, 65535]");
  EXPECT_EQ(message({{"NNODES", "2"}, {"NODE_RANK", "2"}}), "NODE_RANK=2 is out of range for NNODES=2");
  EXPECT_EQ(message({{"MTRAIN_RDZV_TIMEOUT", "soon"}}),
            "MTRAIN_RDZV_TIMEOUT=soon is not a number of seconds in (0, 86400]");
  EXPECT_DOUBLE_EQ(read_launch_request(Env({{"MTRAIN_RDZV_TIMEOUT", "7.5"}})).rdzv_timeout_s, 7.5);
}

TEST(LaunchRequest, RelaunchOnlyWhenAskedAndNotAlreadyARank) {
  const Env two({{"NPROC_PER_NODE", "2"}});
  EXPECT_TRUE(wants_relaunch(read_launch_request(two), two, {"sft", "job.yaml"}));
  EXPECT_FALSE(wants_relaunch(read_launch_request(two), two, {"sft", "--help"}));
  EXPECT_FALSE(wants_relaunch(read_launch_request(two), two, {"--version"}));
  // A dry run (flag or YAML, read by the caller) plans the whole world in this one process.
  EXPECT_FALSE(wants_relaunch(read_launch_request(two), two, {"sft", "job.yaml"}, /*dry_run=*/true));
  const Env one({{"NPROC_PER_NODE", "1"}});
  EXPECT_FALSE(wants_relaunch(read_launch_request(one), one, {"sft"}));
  const Env nnodes({{"NNODES", "1"}});  // NNODES set: launch even with one process per node
  EXPECT_TRUE(wants_relaunch(read_launch_request(nnodes), nnodes, {"sft"}));
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"}) {
    const Env rank({{"NPROC_PER_NODE", "2"}, {var, "0"}});
    EXPECT_TRUE(under_mpi(rank)) << var;
    EXPECT_FALSE(wants_relaunch(read_launch_request(rank), rank, {"sft"})) << var;
  }
}

// torchrun's --nnodes / --nproc_per_node win over the variables (with a
// warning when they disagree) and make the same request the variables would.
TEST(LaunchRequest, FlagsOverTheVariables) {
  LaunchRequest r = read_launch_request(Env({{"NPROC_PER_NODE", "2"}, {"NNODES", "2"}, {"NODE_RANK", "1"}}));
  apply_launch_flags(r, std::nullopt, 4);
  EXPECT_EQ(r.nproc_per_node, 4);
  EXPECT_EQ(r.nnodes, 2);
  EXPECT_EQ(r.world_size(), 8);
  EXPECT_EQ(r.warnings.back(), "NPROC_PER_NODE=2 and --nproc_per_node 4 disagree; using --nproc_per_node");

  const Env none;
  LaunchRequest flags = read_launch_request(none);
  EXPECT_FALSE(wants_relaunch(flags, none, {"sft"}));
  apply_launch_flags(flags, 1, 2);  // as NNODES=1 NPROC_PER_NODE=2 would
  const LaunchRequest vars = read_launch_request(Env({{"NNODES", "1"}, {"NPROC_PER_NODE", "2"}}));
  EXPECT_EQ(flags.nnodes, vars.nnodes);
  EXPECT_EQ(flags.nproc_per_node, vars.nproc_per_node);
  EXPECT_EQ(flags.nnodes_set, vars.nnodes_set);
  EXPECT_TRUE(flags.warnings.empty());
  EXPECT_TRUE(wants_relaunch(flags, none, {"sft"}));
  EXPECT_FALSE(wants_relaunch(flags, none, {"sft"}, /*dry_run=*/true));

  LaunchRequest same = read_launch_request(Env({{"NPROC_PER_NODE", "2"}}));
  apply_launch_flags(same, std::nullopt, 2);
  EXPECT_TRUE(same.warnings.empty());
  const auto message = [](const Env& env, std::optional<int> nnodes, std::optional<int> nproc) {
    LaunchRequest bad = read_launch_request(env);
    try {
      apply_launch_flags(bad, nnodes, nproc);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(message(none, std::nullopt, 0), "--nproc_per_node 0: not a positive integer");
  LaunchRequest two_nodes = read_launch_request(none);
  apply_launch_flags(two_nodes, 2, std::nullopt);
  ASSERT_EQ(two_nodes.warnings.size(), 1u);
  EXPECT_EQ(two_nodes.warnings[0], "--nnodes > 1 without MASTER_ADDR: using 127.0.0.1 (every node on this machine)");
  EXPECT_EQ(message(Env({{"NNODES", "4"}, {"NODE_RANK", "3"}}), 2, std::nullopt),
            "NODE_RANK=3 is out of range for --nnodes 2");
}

TEST(MpirunCommand, RootFewerRanksThanCoresBindsBlocksOfCores) {
  const Command c = build_mpirun_command(single_node(2, 8, true), Env({{"OMP_NUM_THREADS", "1"}}));
  const auto& a = c.argv;
  ASSERT_GE(a.size(), 3u);
  EXPECT_EQ(std::vector<std::string>(a.begin(), a.begin() + 3), (std::vector<std::string>{"mpirun", "-np", "2"}));
  EXPECT_TRUE(has(a, "--allow-run-as-root"));
  EXPECT_TRUE(has_seq(a, {"--map-by", "slot:PE=4", "--bind-to", "core"}));
  EXPECT_FALSE(has(a, "--oversubscribe"));
  EXPECT_TRUE(has_seq(a, {"--mca", "btl", "self,vader"}));
  EXPECT_TRUE(has_seq(a, {"-x", "OMP_NUM_THREADS"}));
  EXPECT_TRUE(c.env.empty());  // one node needs no extra variables
  // The program and its arguments come last, unchanged.
  EXPECT_EQ(std::vector<std::string>(a.end() - 5, a.end()),
            (std::vector<std::string>{"/opt/mtrain/bin/mtrain", "sft", "job.yaml", "--lr", "1e-4"}));
}

TEST(MpirunCommand, MoreRanksThanCoresOversubscribesUnbound) {
  const Command c = build_mpirun_command(single_node(4, 2, false), Env());
  EXPECT_FALSE(has(c.argv, "--allow-run-as-root"));
  EXPECT_TRUE(has(c.argv, "--oversubscribe"));
  EXPECT_TRUE(has_seq(c.argv, {"--bind-to", "none"}));
  EXPECT_FALSE(has(c.argv, "--map-by"));
}

TEST(MpirunCommand, RanksThatBindThemselvesAreNotBoundByMpirun) {
  // CPU_AFFINITY_CONF 1/2: each rank binds itself and must start with the node's cores.
  const Command c = build_mpirun_command(single_node(2, 8, false), Env({{"CPU_AFFINITY_CONF", "2,npu0:0-1"}}));
  EXPECT_TRUE(has_seq(c.argv, {"--bind-to", "none"}));
  EXPECT_FALSE(has(c.argv, "--map-by"));
  EXPECT_TRUE(has_seq(c.argv, {"-x", "CPU_AFFINITY_CONF"}));
  // Mode 0 is no binding by the ranks: mpirun's own blocks of cores stay.
  const Command off = build_mpirun_command(single_node(2, 8, false), Env({{"CPU_AFFINITY_CONF", "0"}}));
  EXPECT_TRUE(has_seq(off.argv, {"--map-by", "slot:PE=4", "--bind-to", "core"}));
}

TEST(MpirunCommand, UserChoicesWin) {
  const Env env({{"OMPI_MCA_btl", "self,tcp"},
                 {"MTRAIN_MPIRUN_ARGS", "--bind-to socket --report-bindings"},
                 {"MTRAIN_MPIRUN", "/opt/ompi/bin/mpirun"}});
  const Command c = build_mpirun_command(single_node(2, 8, false), env);
  EXPECT_EQ(c.argv[0], "/opt/ompi/bin/mpirun");
  EXPECT_FALSE(has(c.argv, "self,vader"));
  EXPECT_FALSE(has(c.argv, "core"));
  EXPECT_TRUE(has_seq(c.argv, {"--bind-to", "socket", "--report-bindings", "/opt/mtrain/bin/mtrain"}));
  EXPECT_FALSE(has(c.argv, "MTRAIN_MPIRUN_ARGS"));  // launcher-only knobs are not forwarded
}

TEST(MpirunCommand, ForwardsWhatRanksNeed) {
  const Env env({{"ASCEND_RT_VISIBLE_DEVICES", "0,1"},
                 {"MTRAIN_DEVICES_PER_NODE", "4"},
                 {"HOME", "/root"},
                 {"NPROC_PER_NODE", "2"}});
  const Command c = build_mpirun_command(single_node(2, 2, false), env);
  for (const char* v : {"ASCEND_RT_VISIBLE_DEVICES", "MTRAIN_DEVICES_PER_NODE", "NPROC_PER_NODE"}) {
    EXPECT_TRUE(has_seq(c.argv, {"-x", v})) << v;
  }
  EXPECT_FALSE(has(c.argv, "HOME"));
  EXPECT_FALSE(has(c.argv, "OMP_NUM_THREADS"));  // not set: not forwarded
}

TEST(MpirunCommand, TheRanksLearnThatTheLauncherDrawsTheirProgressLine) {
  MpirunPlan plan = single_node(2, 2, false);
  EXPECT_EQ(env_of(build_mpirun_command(plan, Env()), "MTRAIN_PROGRESS_RECORDS"), "<unset>");
  plan.progress_records = true;
  const Command c = build_mpirun_command(plan, Env());
  EXPECT_EQ(env_of(c, "MTRAIN_PROGRESS_RECORDS"), "1");
  EXPECT_TRUE(has_seq(c.argv, {"-x", "MTRAIN_PROGRESS_RECORDS"}));  // also for ranks on a --hostfile's hosts
}

TEST(MpirunCommand, MultiNodePointsAtTheServerAndRestrictsTheInterface) {
  MpirunPlan p = single_node(2, 2, true);
  p.request.nnodes = 2;
  p.request.node_rank = 1;
  p.request.master_addr = "10.0.0.1";
  p.request.master_port = 29600;
  p.server_uri = "882507776.0;tcp://10.0.0.1:52339";
  p.rdzv_id = "mtrain29600xabc";
  p.deadline_epoch_s = 1000.5;
  p.mpi_interface = "eth0";
  const Command c = build_mpirun_command(p, Env());
  EXPECT_EQ(env_of(c, "OMPI_MCA_pmix_server_uri"), p.server_uri);
  EXPECT_EQ(env_of(c, "OMPI_MCA_oob_tcp_if_include"), "eth0");
  EXPECT_EQ(env_of(c, "OMPI_MCA_btl_tcp_if_include"), "eth0");
  EXPECT_EQ(env_of(c, "PMIX_MCA_ptl_base_if_include"), "eth0");
  EXPECT_EQ(env_of(c, "MTRAIN_NNODES"), "2");
  EXPECT_EQ(env_of(c, "MTRAIN_NODE_RANK"), "1");
  EXPECT_EQ(env_of(c, "MTRAIN_NPROC_PER_NODE"), "2");
  EXPECT_EQ(env_of(c, "MTRAIN_RDZV_ID"), "mtrain29600xabc");
  EXPECT_EQ(env_of(c, "MTRAIN_RDZV_DEADLINE"), "1000.500");
  EXPECT_EQ(env_of(c, "MTRAIN_RDZV_ENDPOINT"), "10.0.0.1:29600");
  EXPECT_TRUE(has_seq(c.argv, {"-x", "MTRAIN_NODE_RANK"}));
  EXPECT_FALSE(has(c.argv, "self,vader"));  // other nodes are reached over TCP
  // The URI holds ';': the printed command quotes it.
  EXPECT_NE(c.display().find("OMPI_MCA_pmix_server_uri='882507776.0;tcp://10.0.0.1:52339' "), std::string::npos)
      << c.display();
  // A user's own interface settings are kept.
  const Command user = build_mpirun_command(p, Env({{"OMPI_MCA_btl_tcp_if_include", "ib0"}}));
  EXPECT_EQ(env_of(user, "OMPI_MCA_btl_tcp_if_include"), "<unset>");
  EXPECT_EQ(env_of(user, "OMPI_MCA_oob_tcp_if_include"), "eth0");
}

TEST(MpiInterface, IfnameThenUserSettingsThenLoopbackThenRoute) {
  int detected = 0;
  auto detect = [&](const std::string& addr) {
    ++detected;
    return addr == "10.0.0.1" ? std::string("eth1") : std::string();
  };
  LaunchRequest r;
  r.master_addr = "10.0.0.1";
  EXPECT_EQ(choose_mpi_interface(r, Env(), detect), "eth1");
  EXPECT_EQ(choose_mpi_interface(r, Env({{"OMPI_MCA_oob_tcp_if_include", "ib0"}}), detect), "");
  r.ifname = "10.0.0.0/24";
  EXPECT_EQ(choose_mpi_interface(r, Env({{"OMPI_MCA_oob_tcp_if_include", "ib0"}}), detect), "10.0.0.0/24");
  r.ifname.clear();
  for (const char* lo : {"127.0.0.1", "localhost", "127.0.1.1"}) {
    r.master_addr = lo;
    EXPECT_EQ(choose_mpi_interface(r, Env(), detect), "lo") << lo;
  }
  EXPECT_EQ(detected, 1);
}

TEST(OmpiServerCommand, RootNeedsTheEnvironmentPairAndThePortIsPinned) {
  const Command c =
      build_ompi_server_command({2, true}, "lo", 29501, Env({{"OMPI_MCA_oob_tcp_static_ipv4_ports", "7"}}));
  EXPECT_EQ(c.argv, (std::vector<std::string>{"ompi-server", "--no-daemonize", "-r", "+"}));
  EXPECT_EQ(env_of(c, "OMPI_ALLOW_RUN_AS_ROOT"), "1");
  EXPECT_EQ(env_of(c, "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"), "1");
  EXPECT_EQ(env_of(c, "OMPI_MCA_oob_tcp_if_include"), "lo");
  EXPECT_EQ(env_of(c, "OMPI_MCA_oob_tcp_static_ipv4_ports"), "29501");
  EXPECT_EQ(env_of(c, "OMPI_MCA_oob_tcp_static_ipv6_ports"), "29501");
  const Command any = build_ompi_server_command({2, false}, "", 0, Env());
  EXPECT_EQ(env_of(any, "OMPI_ALLOW_RUN_AS_ROOT"), "<unset>");
  EXPECT_EQ(env_of(any, "OMPI_MCA_oob_tcp_static_ipv4_ports"), "<unset>");
}

TEST(LaunchRequest, OmpiServerPortDefaultsToMasterPortPlusOne) {
  EXPECT_EQ(read_launch_request(Env()).ompi_server_port, 29501);
  EXPECT_EQ(read_launch_request(Env({{"MASTER_PORT", "40000"}})).ompi_server_port, 40001);
  EXPECT_EQ(read_launch_request(Env({{"MASTER_PORT", "40000"}, {"MTRAIN_OMPI_SERVER_PORT", "0"}})).ompi_server_port, 0);
  EXPECT_EQ(read_launch_request(Env({{"MTRAIN_OMPI_SERVER_PORT", "31000"}})).ompi_server_port, 31000);
}

TEST(ShellQuote, OnlyWhenNeeded) {
  EXPECT_EQ(shell_quote("--lr"), "--lr");
  EXPECT_EQ(shell_quote("/a/b.yaml"), "/a/b.yaml");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote("x;y"), "'x;y'");
  Command c;
  c.env = {{"K", "v w"}};
  c.argv = {"mpirun", "-np", "2", "a b"};
  EXPECT_EQ(c.display(), "K='v w' mpirun -np 2 'a b'");
}

}  // namespace
}  // namespace mtrain::launch

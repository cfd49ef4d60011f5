// The launchers' rendezvous protocol on MASTER_ADDR:MASTER_PORT: node 0 hands
// ompi-server's URI to the other nodes' launchers, and the connection then
// stays open as a liveness link for the whole job. One line per message:
//
//   node k -> node 0   MTRAIN-RDZV 1 node=<k> nnodes=<N> nproc=<P>
//   node 0 -> node k   OK <job id> <ompi-server URI>     |  ERR <reason>
//   either way, last   DONE <exit code of this node's mpirun>
//
// A node that sees the link close without DONE, or DONE with a non-zero code,
// stops its own ranks: separate mpiruns do not watch each other, so this is
// what takes a multi-node job down when one node fails (openmpi-multinode.md §3).
#pragma once

#include <optional>
#include <set>
#include <string>

namespace mtrain::launch {

struct RdzvHello {
  int node = 0;
  int nnodes = 0;
  int nproc = 0;
};

std::string format_hello(const RdzvHello& hello);
std::optional<RdzvHello> parse_hello(const std::string& line);

// Node 0's verdict on a hello: "" to accept, else the reason (sent back as ERR and printed).
std::string check_hello(const RdzvHello& hello, int nnodes, int nproc, const std::set<int>& joined);

struct RdzvReply {
  bool ok = false;
  std::string job_id;  // ok
  std::string uri;     // ok
  std::string error;   // !ok
};
std::string format_ok(const std::string& job_id, const std::string& uri);
std::string format_err(const std::string& reason);
std::optional<RdzvReply> parse_reply(const std::string& line);

std::string format_done(int exit_code);
std::optional<int> parse_done(const std::string& line);

}  // namespace mtrain::launch

#include "mtrain/launch/rendezvous_protocol.h"

#include <fmt/format.h>

#include <sstream>

#include "mtrain/launch/launch_env.h"

namespace mtrain::launch {

namespace {

constexpr const char* kMagic = "MTRAIN-RDZV";
constexpr int kVersion = 1;

std::optional<int> field(const std::string& token, const std::string& key) {
  if (token.rfind(key + "=", 0) != 0) return std::nullopt;
  auto n = parse_integer(token.substr(key.size() + 1));
  if (!n || *n > (1 << 20)) return std::nullopt;
  return static_cast<int>(*n);
}

}  // namespace

std::string format_hello(const RdzvHello& h) {
  return fmt::format("{} {} node={} nnodes={} nproc={}\n", kMagic, kVersion, h.node, h.nnodes, h.nproc);
}

std::optional<RdzvHello> parse_hello(const std::string& line) {
  std::istringstream in(line);
  std::string magic, version, node, nnodes, nproc, extra;
  if (!(in >> magic >> version >> node >> nnodes >> nproc) || (in >> extra)) return std::nullopt;
  if (magic != kMagic || version != std::to_string(kVersion)) return std::nullopt;
  auto n = field(node, "node"), nn = field(nnodes, "nnodes"), np = field(nproc, "nproc");
  if (!n || !nn || !np) return std::nullopt;
  return RdzvHello{*n, *nn, *np};
}

std::string check_hello(const RdzvHello& h, int nnodes, int nproc, const std::set<int>& joined) {
  if (h.nnodes != nnodes)
    return fmt::format("NNODES differs: node {} has NNODES={}, node 0 has {}", h.node, h.nnodes, nnodes);
  if (h.nproc != nproc) {
    return fmt::format("NPROC_PER_NODE differs: node {} has {}, node 0 has {} (every node must run the same count)",
                       h.node, h.nproc, nproc);
  }
  if (h.node <= 0 || h.node >= nnodes) return fmt::format("NODE_RANK={} is not in 1..{}", h.node, nnodes - 1);
  if (joined.count(h.node))
    return fmt::format("NODE_RANK={} joined twice (two nodes with the same NODE_RANK?)", h.node);
  return "";
}

std::string format_ok(const std::string& job_id, const std::string& uri) {
  return fmt::format("OK {} {}\n", job_id, uri);
}

std::string format_err(const std::string& reason) { return fmt::format("ERR {}\n", reason); }

std::optional<RdzvReply> parse_reply(const std::string& line) {
  RdzvReply r;
  if (line.rfind("ERR ", 0) == 0) {
    r.error = line.substr(4);
    return r;
  }
  if (line.rfind("OK ", 0) != 0) return std::nullopt;
  const std::string rest = line.substr(3);
  const size_t sp = rest.find(' ');
  if (sp == std::string::npos || sp == 0 || sp + 1 >= rest.size()) return std::nullopt;
  r.ok = true;
  r.job_id = rest.substr(0, sp);
  r.uri = rest.substr(sp + 1);
  return r;
}

std::string format_done(int exit_code) { return fmt::format("DONE {}\n", exit_code); }

std::optional<int> parse_done(const std::string& line) {
  if (line.rfind("DONE ", 0) != 0) return std::nullopt;
  auto n = parse_integer(line.substr(5));
  if (!n || *n > 255) return std::nullopt;
  return static_cast<int>(*n);
}

}  // namespace mtrain::launch

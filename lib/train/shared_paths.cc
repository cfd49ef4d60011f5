#include "train/shared_paths.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/sharded_checkpoint.h"
#include "common/errors.h"
#include "config/profile_args.h"

namespace mtrain::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSharedHint =
    "a shared file system is required, as in Megatron; point {} at a directory every "
    "node sees (the same path on every node)";

// Every rank's `mine`, in rank order: a byte all-gather of equal-size chunks.
std::vector<std::string> all_gather_strings(parallel::Comm& c, const std::string& mine) {
  const int64_t chunk = c.all_reduce_value<int64_t>(static_cast<int64_t>(mine.size()) + 1, parallel::ReduceOp::kMax);
  std::vector<uint8_t> in(static_cast<size_t>(chunk), 0), out(static_cast<size_t>(chunk * c.size()));
  std::copy(mine.begin(), mine.end(), in.begin());
  c.all_gather(in.data(), out.data(), chunk);
  std::vector<std::string> all;
  for (int r = 0; r < c.size(); ++r) all.emplace_back(reinterpret_cast<const char*>(out.data() + r * chunk));
  return all;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// The ranks that saw each distinct value, grouped by where they run:
// "node 1 on host-b, ranks 2, 3: <value>" lines in rank order of first sight
// (ranks with an empty value left out when `skip_empty`).
std::vector<std::string> by_value(const std::vector<std::string>& values, const std::vector<std::string>& where,
                                  bool skip_empty = false) {
  std::vector<std::string> keys;
  std::map<std::string, std::vector<int>> ranks;
  for (int r = 0; r < static_cast<int>(values.size()); ++r) {
    if (skip_empty && values[r].empty()) continue;
    const std::string key = where[r] + "\x1f" + values[r];
    if (!ranks.count(key)) keys.push_back(key);
    ranks[key].push_back(r);
  }
  std::vector<std::string> lines;
  for (const std::string& k : keys) {
    const size_t sep = k.find('\x1f');
    const std::vector<int>& rs = ranks[k];
    lines.push_back(fmt::format("{}, rank{} {}: {}", k.substr(0, sep), rs.size() > 1 ? "s" : "", fmt::join(rs, ", "),
                                k.substr(sep + 1)));
  }
  return lines;
}

struct SharedDir {
  std::string flag;  // as the user knows it
  std::string path;
};

void agree_on_string(parallel::Comm& c, const SharedDir& d, const std::vector<std::string>& where) {
  const std::vector<std::string> all = all_gather_strings(c, d.path);
  if (std::all_of(all.begin(), all.end(), [&](const std::string& p) { return p == all.front(); })) return;
  throw DistributedError(
      fmt::format("{} differs between the ranks:\n  {}", d.flag, fmt::join(by_value(all, where), "\n  ")),
      fmt::format(fmt::runtime(kSharedHint), d.flag));
}

// Rank 0 creates the directory and writes a probe file with a random nonce.
// Returns "" or what went wrong.
std::string write_probe(const fs::path& file, const std::string& nonce) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (ec) return fmt::format("cannot create the directory: {}", ec.message());
  std::ofstream f(file, std::ios::trunc);
  f << nonce;
  f.close();
  return f ? "" : "cannot write a file there";
}

// What this rank finds at `file`: "" when it holds `nonce`.
std::string read_probe(const fs::path& file, const std::string& nonce) {
  std::ifstream f(file);
  if (!f) return fmt::format("does not see the probe file {} that rank 0 wrote", file.string());
  std::stringstream s;
  s << f.rdbuf();
  return s.str() == nonce ? "" : fmt::format("finds another rank's probe file at {}", file.string());
}

void probe_directory(parallel::Comm& c, const SharedDir& d, const std::vector<std::string>& where) {
  // The nonce and the file name come from rank 0; every rank builds the same name.
  int64_t nonce_value = 0;
  if (c.rank() == 0) {
    std::random_device rd;
    nonce_value = static_cast<int64_t>((uint64_t{rd()} << 32) | rd());
  }
  c.broadcast(&nonce_value, 1, 0);
  const std::string nonce = fmt::format("{:016x}", static_cast<uint64_t>(nonce_value));
  const fs::path file = fs::path(d.path) / (".mtrain_shared_probe_" + nonce);
  const std::string wrote = c.rank() == 0 ? write_probe(file, nonce) : "";
  const std::vector<std::string> written = all_gather_strings(c, wrote);
  if (!written[0].empty())
    throw ConfigError(fmt::format("{} {}: {} (rank 0, {})", d.flag, d.path, written[0], where[0]),
                      fmt::format("choose a writable {}", d.flag));
  const std::vector<std::string> seen = all_gather_strings(c, read_probe(file, nonce));  // also a barrier
  if (c.rank() == 0) {
    std::error_code ec;
    fs::remove(file, ec);
  }
  if (std::all_of(seen.begin(), seen.end(), [](const std::string& s) { return s.empty(); })) return;
  throw DistributedError(fmt::format("{} {} is not the same directory on every node: rank 0 ({}) wrote a probe file "
                                     "there, but\n  {}",
                                     d.flag, d.path, where[0], fmt::join(by_value(seen, where, true), "\n  ")),
                         fmt::format(fmt::runtime(kSharedHint), d.flag));
}

// The checkpoint a rank would load from `dir`: the tracker's content (or the
// --ckpt_step directory), as this rank sees it.
std::string checkpoint_seen(const config::Args& a) {
  const fs::path dir(*a.load);
  if (a.ckpt_step) {
    const std::string name = checkpoint::iteration_dir_name(*a.ckpt_step);
    return fs::exists(dir / name / "manifest.json") ? name : fmt::format("no {}/manifest.json", name);
  }
  std::ifstream f(dir / checkpoint::kTrackerFileName);
  if (!f) return fmt::format("no {}", checkpoint::kTrackerFileName);
  std::string text;
  std::getline(f, text);
  return fmt::format("{} says \"{}\"", checkpoint::kTrackerFileName, text);
}

void agree_on_checkpoint(parallel::Comm& c, const config::Args& a, const std::vector<std::string>& where) {
  const std::vector<std::string> seen = all_gather_strings(c, checkpoint_seen(a));
  if (std::all_of(seen.begin(), seen.end(), [&](const std::string& s) { return s == seen.front(); })) return;
  throw DistributedError(fmt::format("--load {}: the ranks see different checkpoints:\n  {}", *a.load,
                                     fmt::join(by_value(seen, where), "\n  ")),
                         fmt::format(fmt::runtime(kSharedHint), "--load"));
}

// The merged trace is written by the lowest profiled rank from every profiled
// rank's file, so it needs the directory shared when two or more are profiled.
bool merged_trace_wanted(const config::Args& a, int world_size) {
  if (!a.profile) return false;
  const std::vector<int> ranks = config::profile_ranks(a.profile_ranks);
  if (std::find(ranks.begin(), ranks.end(), -1) != ranks.end()) return world_size > 1;
  return std::count_if(ranks.begin(), ranks.end(), [&](int r) { return r < world_size; }) > 1;
}

}  // namespace

void check_shared_paths(const config::Args& a, parallel::Comm& world, int node) {
  if (world.size() == 1) return;
  const std::vector<std::string> where = all_gather_strings(world, fmt::format("node {} on {}", node, host_name()));
  const SharedDir save{"--output_dir (--save)", a.output_dir};
  agree_on_string(world, save, where);
  probe_directory(world, save, where);
  if (a.load) {
    agree_on_string(world, {"--load", *a.load}, where);
    agree_on_checkpoint(world, a, where);
  }
  if (merged_trace_wanted(a, world.size())) {
    const SharedDir profile{"--profile_save_path", a.profile_save_path};
    agree_on_string(world, profile, where);
    probe_directory(world, profile, where);
  }
}

}  // namespace mtrain::train

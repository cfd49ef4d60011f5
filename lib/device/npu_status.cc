#include "device/npu_status.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <tuple>

namespace mtrain::device {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json to_json(const NpuProcessStatus& s) {
  return json{{"node", s.node},
              {"npu", s.npu},
              {"rank", s.rank},
              {"pid", s.pid},
              {"start_ticks", s.start_ticks},
              {"process_name", s.process_name},
              {"profile", s.profile},
              {"chip_name", s.chip_name},
              {"hbm_bytes", s.hbm_bytes},
              {"allocated_bytes", s.memory.allocated},
              {"max_allocated_bytes", s.memory.max_allocated},
              {"reserved_bytes", s.memory.reserved},
              {"max_reserved_bytes", s.memory.max_reserved},
              {"outside_allocator_bytes", s.memory.runtime}};
}

NpuProcessStatus from_json(const json& j) {
  NpuProcessStatus s;
  s.node = j.at("node").get<int>();
  s.npu = j.at("npu").get<int>();
  s.rank = j.at("rank").get<int>();
  s.pid = j.at("pid").get<int>();
  s.start_ticks = j.at("start_ticks").get<int64_t>();
  s.process_name = j.at("process_name").get<std::string>();
  s.profile = j.at("profile").get<std::string>();
  s.chip_name = j.at("chip_name").get<std::string>();
  s.hbm_bytes = j.at("hbm_bytes").get<int64_t>();
  s.memory.allocated = j.at("allocated_bytes").get<int64_t>();
  s.memory.max_allocated = j.at("max_allocated_bytes").get<int64_t>();
  s.memory.reserved = j.at("reserved_bytes").get<int64_t>();
  s.memory.max_reserved = j.at("max_reserved_bytes").get<int64_t>();
  if (j.contains("outside_allocator_bytes")) s.memory.runtime = j.at("outside_allocator_bytes");
  return s;
}

// The pid in "node<N>-npu<D>-<pid>.json[.tmp]", or 0.
int pid_of_name(const std::string& name) {
  const size_t dash = name.rfind('-');
  const size_t dot = name.find('.', dash == std::string::npos ? 0 : dash);
  if (dash == std::string::npos || dot == std::string::npos || name.compare(dot, 5, ".json") != 0) return 0;
  return std::atoi(name.substr(dash + 1, dot - dash - 1).c_str());
}

// (state, start time in ticks) from /proc/<pid>/stat (fields 3 and 22).
std::optional<std::pair<char, int64_t>> read_proc_stat(int pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(text.substr(close + 1));
  std::string state, field;
  rest >> state;
  for (int i = 4; i <= 22 && rest >> field; ++i) {
    if (i == 22) return std::make_pair(state.empty() ? '?' : state[0], std::atoll(field.c_str()));
  }
  return std::nullopt;
}

// A rank is gone when its pid does not exist, is a zombie (killed, not yet
// reaped), or belongs to a process started at another time (a reused pid).
bool process_alive(int pid, int64_t start_ticks) {
  const auto st = read_proc_stat(pid);
  if (!st || st->first == 'Z' || st->first == 'X') return false;
  return start_ticks < 0 || st->second == start_ticks;
}

}  // namespace

std::string npu_status_dir() {
  const char* env = std::getenv("MTRAIN_NPU_STATUS_DIR");
  return env != nullptr && *env != '\0' ? env : "/dev/shm/mtrain-npu";
}

int64_t process_start_ticks(int pid) {
  const auto st = read_proc_stat(pid);
  return st ? st->second : -1;
}

NpuStatusPublisher::NpuStatusPublisher(std::string dir, NpuProcessStatus identity)
    : dir_(std::move(dir)), status_(std::move(identity)) {
  path_ = (fs::path(dir_) / fmt::format("node{}-npu{}-{}.json", status_.node, status_.npu, status_.pid)).string();
  // Shared by every user's ranks, like /tmp: sticky, so nobody removes another's file.
  if (::mkdir(dir_.c_str(), 01777) == 0) ::chmod(dir_.c_str(), 01777);
}

NpuStatusPublisher::~NpuStatusPublisher() {
  std::error_code ec;
  fs::remove(path_, ec);
  fs::remove(path_ + ".tmp", ec);
}

void NpuStatusPublisher::publish(const Device& dev) {
  status_.memory = dev.stats();
  const std::string tmp = path_ + ".tmp";
  bool ok = false;
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << to_json(status_).dump() << "\n";
    ok = static_cast<bool>(f);
  }
  std::error_code ec;
  if (ok) fs::rename(tmp, path_, ec);
  if ((!ok || ec) && !warned_) {
    warned_ = true;
    std::fprintf(stderr, "mtrain: warning: cannot publish the device status to %s (npu-smi will not show this rank)\n",
                 path_.c_str());
  }
}

std::vector<NpuProcessStatus> read_npu_status(const std::string& dir, std::vector<std::string>* warnings) {
  std::vector<NpuProcessStatus> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const int pid = pid_of_name(name);
    if (pid == 0) continue;  // not ours
    std::ifstream f(e.path());
    json j = json::parse(f, nullptr, /*allow_exceptions=*/false);
    const int64_t start = j.is_object() ? j.value("start_ticks", int64_t{-1}) : -1;
    if (!process_alive(pid, start)) {
      fs::remove(e.path(), ec);  // the rank was killed (or its pid reused): its device is free
      continue;
    }
    if (name.ends_with(".tmp")) continue;
    try {
      out.push_back(from_json(j));
    } catch (const json::exception& x) {
      if (warnings)
        warnings->push_back(fmt::format("{}: unreadable device status ({}); skipped", e.path().string(), x.what()));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::tie(a.node, a.npu, a.pid) < std::tie(b.node, b.npu, b.pid);
  });
  return out;
}

}  // namespace mtrain::device

// What `mtrain npu-smi info` knows about running ranks. Each training rank
// publishes its simulated device's accounting to a small JSON file,
//   $MTRAIN_NPU_STATUS_DIR (default /dev/shm/mtrain-npu)/node<N>-npu<D>-<pid>.json
// replaced atomically (write + rename) at train start and at every log
// interval, and removed when the rank ends (normally or by an exception). A
// rank that is killed leaves its file behind; the next reader removes files
// whose process is gone (or whose pid now belongs to another process).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/device.h"

namespace mtrain::device {

struct NpuProcessStatus {
  int node = 0;  // simulated node (NODE_RANK)
  int npu = 0;   // pool index
  int rank = 0;  // global rank
  int pid = 0;
  int64_t start_ticks = 0;   // the process's start time (/proc/<pid>/stat field 22): tells a reused pid
  std::string process_name;  // "mtrain sft"
  std::string profile;       // device profile name
  std::string chip_name;     // npu-smi's Name
  int64_t hbm_bytes = 0;     // capacity
  MemoryStats memory;        // allocated/reserved and their peaks (by_category unused)
};

// $MTRAIN_NPU_STATUS_DIR, else /dev/shm/mtrain-npu.
std::string npu_status_dir();

// One rank's file. publish() writes the current stats; the destructor removes
// the file. Failures to write are reported once on stderr and never stop training.
class NpuStatusPublisher {
 public:
  NpuStatusPublisher(std::string dir, NpuProcessStatus identity);
  ~NpuStatusPublisher();
  NpuStatusPublisher(const NpuStatusPublisher&) = delete;
  NpuStatusPublisher& operator=(const NpuStatusPublisher&) = delete;

  void publish(const Device& dev);
  const std::string& path() const { return path_; }

 private:
  std::string dir_, path_;
  NpuProcessStatus status_;
  bool warned_ = false;
};

// Every live rank's status in `dir`, by (node, npu, pid). Files of processes
// that are gone are removed (and their leftover .tmp files); an unreadable
// file of a live process is skipped with a line in `warnings`.
std::vector<NpuProcessStatus> read_npu_status(const std::string& dir, std::vector<std::string>* warnings = nullptr);

// /proc/<pid>/stat field 22 (start time in clock ticks since boot); -1 if the process does not exist.
int64_t process_start_ticks(int pid);

}  // namespace mtrain::device

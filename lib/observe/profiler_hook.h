// The profiler (--profile): a TrainHook that records the iterations of its
// window (profiler/schedule.h, MindSpeed's mapping of --profile_step_start /
// --profile_step_end) and writes Chrome Trace Event Format files.
//
// Two timelines per rank:
// - CPU (--profile_with_cpu): the regions as they ran on this host, in wall
//   time (steady_clock µs, shared by the processes of one host; ranks on
//   different nodes have unrelated clocks and the merged trace only lines
//   them up approximately).
// - NPU (simulated): each kernel and collective placed on a virtual device
//   clock, start = max(host issue time, device free), duration from the
//   device's cost model (device/cost_model.h); a region spans its first to
//   last device work; a region without instrumented kernels (the optimizer
//   step) takes its host duration. Collectives go on their own track and
//   stream: each starts after the compute issued before it; a blocking one
//   holds the compute stream until it ends, a non-blocking one (overlapped
//   DP bucket reduction) runs beside the kernels.
// The NPU clock is driven by kernel regions at every level; the level decides
// only which spans are written (level0: iterations, phases, collectives;
// level1: + modules and ops; level2: + kernels).
//
// Outside the window region_depth() is nullopt: profiling costs nothing.
// Inside it, a region costs a clock read and a push into a vector; all
// formatting happens when the window closes. Files (atomic writes):
//   <save_path>/rank_<r>_trace.json, rank_<r>_summary.txt, and, from the
//   lowest profiled rank after a barrier on the world communicator,
//   merged_trace.json (every profiled rank, pid = global rank).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/file_system.h"
#include "config/args.h"
#include "device/cost_model.h"
#include "device/device.h"
#include "device/device_clock.h"
#include "observe/hooks.h"
#include "parallel/parallel_state.h"
#include "profiler/schedule.h"

namespace mtrain::observe {

struct ProfilerOptions {
  profiler::Schedule schedule = profiler::Schedule::from_step_window(10, 12);
  std::vector<int> ranks = {-1};                  // global ranks; -1: all
  profiler::Kind level = profiler::Kind::kPhase;  // deepest kind written
  std::string level_name = "level0";
  bool with_cpu = false;
  bool with_stack = false;
  bool with_memory = false;
  bool record_shapes = false;
  std::string save_path = "./profile_dir";
  int dtype_bytes = 4;        // the model's compute dtype (2: bf16/fp16): kernel bytes and peak
  bool print_summary = true;  // print each profiled rank's summary table
  bool quiet = false;         // no window open / close lines (benchmarks)
};
ProfilerOptions profiler_options(const config::Args& args);

// One closed (or open) region of the window.
struct ProfiledSpan {
  const char* name = "";
  const char* fused_by = nullptr;
  profiler::Kind kind = profiler::Kind::kOp;
  profiler::Pass pass = profiler::Pass::kNone;
  int chunk = 0;
  int64_t index = -1;
  int64_t iteration = 0;
  int32_t parent = -1;                  // enclosing span, -1: none
  double host_begin = 0, host_end = 0;  // µs, steady_clock
  double npu_begin = -1, npu_end = -1;  // µs on the simulated device clock; -1: no device work yet
  double flops = 0, bytes = 0;
  int64_t m = 0, n = 0, k = 0;
  int32_t shapes_in = 0, n_in = 0, shapes_out = 0, n_out = 0;  // into ProfilerHook's shape records
};

struct ProfiledComm {
  parallel::CommOp op = parallel::CommOp::kBarrier;
  std::array<char, 16> group{};
  int group_size = 1;
  int64_t bytes = 0, recv_bytes = 0;
  int peer = -1, recv_peer = -1;
  bool nonblocking = false;
  int64_t iteration = 0;
  int32_t parent = -1;
  double host_begin = 0, host_end = 0, npu_begin = 0, npu_end = 0;  // µs
};

struct ProfiledShape {
  const char* role = "";
  const char* dtype = "";
  int ndim = 0;
  std::array<int64_t, 4> dims{};
};

struct MemorySample {
  double t = 0;  // µs, steady_clock
  int64_t allocated = 0, reserved = 0;
  std::array<int64_t, static_cast<int>(device::MemCategory::kCount)> by_category{};
};

class ProfilerHook : public TrainHook {
 public:
  // `state` may be null (a single process without communicators: no barrier,
  // the merged trace holds this rank only); `rank` is the global rank.
  ProfilerHook(ProfilerOptions opts, const device::Device& dev, parallel::ParallelState* state, int rank,
               FileSystem& fs);

  std::optional<profiler::Kind> region_depth(int64_t iteration) const override;
  bool region_tensors(int64_t iteration) const override;
  void on_train_begin(const TrainInfo& info) override;
  void on_step_begin(int64_t iteration) override;
  void on_step_end(const StepMetrics&) override;
  void on_iteration_end(int64_t iteration) override;
  void on_comm(const parallel::CommEvent& e) override;
  void on_train_end(const TrainInfo& info) override;
  void on_region_begin(const profiler::Region& r, std::span<const profiler::TensorRef> t) override;
  void on_region_end(const profiler::Region& r, std::span<const profiler::TensorRef> t) override;

  bool profiles_this_rank() const { return profiled_; }
  // Files written by the last save (empty before).
  const std::vector<std::string>& written() const { return written_; }

  // The recorded window (for tests and the writer).
  const std::vector<ProfiledSpan>& spans() const { return spans_; }
  const std::vector<ProfiledComm>& comms() const { return comms_; }

 private:
  friend struct TraceWriter;
  profiler::ScheduleAction action_of(int64_t iteration) const;
  double now_us() const;
  // Advances the device clock, opens ancestors' NPU spans; returns when the work starts.
  double place_on_device(double start, double dur);
  void sample_memory(double t);
  void save();               // writes this rank's files; barrier; merged trace
  void discard_recording();  // forgets what the window recorded (after a save, or a warmup step)

  ProfilerOptions opts_;
  const device::Device& dev_;
  parallel::ParallelState* state_;
  int rank_;
  FileSystem& fs_;
  device::CostModel cost_;
  bool profiled_ = false;
  std::vector<int> profiled_ranks_;                       // resolved, sorted
  std::vector<std::pair<std::string, int>> group_nodes_;  // group name -> the nodes it spans

  int64_t first_iteration_ = 1;  // step 0 of the schedule
  profiler::ScheduleAction action_ = profiler::ScheduleAction::kNone;
  bool in_step_ = false;
  bool window_open_ = false;                    // some iteration of the window has run and not yet been saved
  int64_t window_first_ = 0, window_last_ = 0;  // the recorded iterations of the open window
  int cycles_saved_ = 0;
  int64_t iteration_ = 0;

  // Open regions: the span index (or -1 for a kernel not written) per level.
  struct Open {
    int32_t span;
    bool kernel;
    bool placed;  // this region already has device work
  };
  std::vector<Open> open_;
  int open_kernels_ = 0;
  device::DeviceClock clock_;  // µs: the simulated device's compute and communication streams
  double npu_kernel_us_ = 0;   // µs of kernel work on the simulated device in the window (every level)

  std::vector<ProfiledSpan> spans_;
  std::vector<ProfiledComm> comms_;
  std::vector<ProfiledShape> shapes_;
  std::vector<MemorySample> memory_;
  std::vector<std::string> written_;
};

}  // namespace mtrain::observe

// The precision dumper (msprobe's dump, built in): a TrainHook that records,
// for the selected iterations and ranks, the statistics of every tensor at the
// edges of every module (level L0), op (L1) or both (mix) -- forward and
// backward, in execution order -- and writes them to
//   <path>/step<N>/rank<R>/dump.json      (layout: docs/PRECISION.md)
//   <path>/step<N>/rank<R>/dump_tensor_data/<record>.<role>.npy   (--precision_dump_tensors)
// A record is named "<full module/op name>.<forward|backward>.<call>", e.g.
// "decoder.layers.1.mlp.linear_fc1.forward.0"; `call` counts repeated calls
// within the iteration (micro-batches). Records are listed in the order they
// complete, so an inner module precedes the module holding it.
// Only regions inside an iteration count; layer forwards re-run by full
// recomputation inside a backward step are not dumped (they repeat the
// forward records). At the end of a dumped iteration the first record whose
// outputs hold NaN/Inf (preferring one whose inputs were all finite) is
// logged and stored. `mtrain compare` (precision_compare.h) reads the dumps.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/file_system.h"
#include "config/args.h"
#include "observe/hooks.h"
#include "parallel/parallel_state.h"
#include "profiler/tensor_stats.h"

namespace mtrain::observe {

enum class DumpLevel { kL0, kL1, kMix };   // modules, ops, both
const char* dump_level_name(DumpLevel l);  // "L0", "L1", "mix"

struct PrecisionDumpOptions {
  std::string path;
  DumpLevel level = DumpLevel::kL1;
  std::vector<int64_t> steps;  // 1-based iterations; empty: all
  std::vector<int64_t> ranks;  // global ranks; empty: all
  bool tensors = false;        // also write .npy files
};

// Where this rank sits, recorded in each dump so that `mtrain compare` can
// merge tensor-parallel shards and pipeline stages.
struct DumpRankInfo {
  int rank = 0, world_size = 1;
  int tp = 0, pp = 0, dp = 0;
  int tp_size = 1, pp_size = 1, dp_size = 1;
  std::string dtype = "float32";  // the model's compute dtype
};

// One tensor of a record.
struct DumpTensor {
  std::string role;
  std::vector<int64_t> shape;
  std::string dtype;
  bool tp_shard = false;  // partition: this rank holds a shard of the full tensor
  profiler::TensorStats stats;
};

struct DumpRecord {
  std::string name;    // "<module>.<pass>.<call>"
  std::string module;  // full module / op name
  std::string kind;    // "module" | "op"
  std::string pass;    // "forward" | "backward"
  int64_t call = 0;
  int64_t micro_batch = -1;
  int chunk = 0;
  std::string fused_by;  // empty: not fused
  std::vector<DumpTensor> inputs, outputs;
};

// The first record whose outputs are not all finite.
struct NonFiniteFinding {
  std::string record;
  std::string role;
  int64_t nan = 0, inf = 0;
};
std::optional<NonFiniteFinding> first_nonfinite(const std::vector<DumpRecord>& records);

PrecisionDumpOptions precision_dump_options(const config::Args& args);  // args validated
DumpRankInfo dump_rank_info(const parallel::ParallelState& state, const std::string& dtype);

class PrecisionDumpHook : public TrainHook {
 public:
  PrecisionDumpHook(PrecisionDumpOptions options, DumpRankInfo info);

  std::optional<profiler::Kind> region_depth(int64_t iteration) const override;
  bool region_tensors(int64_t iteration) const override { return region_depth(iteration).has_value(); }
  void on_region_begin(const profiler::Region& r, std::span<const profiler::TensorRef> t) override;
  void on_region_end(const profiler::Region& r, std::span<const profiler::TensorRef> t) override;

  // The records of the last dumped iteration (tests).
  const std::vector<DumpRecord>& records() const { return records_; }

 private:
  struct Open {
    profiler::Region region;
    std::string full_name;  // modules and ops only
    bool recorded = false;
    bool recompute = false;
    DumpRecord record;
  };
  bool selected_step(int64_t iteration) const;
  // The innermost open module/op when it is a recorded op (for steps inside it).
  const DumpRecord* parent_op() const;
  void add_tensors(const DumpRecord& rec, std::span<const profiler::TensorRef> t, const DumpRecord* parent_op,
                   std::vector<DumpTensor>& out);
  void finish_iteration();
  std::string rank_dir() const;    // <path>/step<N>/rank<R>
  std::string tensor_dir() const;  // its dump_tensor_data/ (--precision_dump_tensors)

  PosixFileSystem fs_;
  PrecisionDumpOptions opt_;
  DumpRankInfo info_;
  bool rank_selected_ = true;
  int64_t iteration_ = 0;  // the iteration open, 0: none
  std::vector<Open> stack_;
  std::map<std::string, int64_t> calls_;
  std::map<std::string, std::set<std::string>> fused_;  // flag -> op names
  std::vector<DumpRecord> records_;
};

// The hook for this rank, or null when --precision_dump_path is empty or
// this rank is not selected.
std::shared_ptr<PrecisionDumpHook> make_precision_dump_hook(const config::Args& args,
                                                            const parallel::ParallelState& state,
                                                            const std::string& dtype);

}  // namespace mtrain::observe

#include "observe/precision_dump.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/file_system.h"
#include "config/int_list.h"
#include "config/precision_dump_args.h"
#include "data/npy_file.h"
#include "observe/precision_dump_json.h"

namespace mtrain::observe {

namespace pf = profiler;

const char* dump_level_name(DumpLevel l) {
  switch (l) {
    case DumpLevel::kL0:
      return "L0";
    case DumpLevel::kL1:
      return "L1";
    case DumpLevel::kMix:
      return "mix";
  }
  return "?";
}

PrecisionDumpOptions precision_dump_options(const config::Args& a) {
  PrecisionDumpOptions o;
  o.path = a.precision_dump_path;
  o.level = a.precision_dump_level == "L0"    ? DumpLevel::kL0
            : a.precision_dump_level == "mix" ? DumpLevel::kMix
                                              : DumpLevel::kL1;
  o.steps = config::parse_int_list(a.precision_dump_steps, "precision_dump_steps");
  o.ranks = config::parse_int_list(a.precision_dump_ranks, "precision_dump_ranks");
  o.tensors = a.precision_dump_tensors;
  return o;
}

DumpRankInfo dump_rank_info(const parallel::ParallelState& state, const std::string& dtype) {
  DumpRankInfo i;
  i.rank = state.rank();
  i.world_size = state.world_size();
  const parallel::RankCoords c = state.coords();
  i.tp = c.tp, i.pp = c.pp, i.dp = c.dp;
  i.tp_size = state.grid().tp(), i.pp_size = state.grid().pp(), i.dp_size = state.grid().dp();
  i.dtype = dtype;
  return i;
}

std::optional<NonFiniteFinding> first_nonfinite(const std::vector<DumpRecord>& records) {
  auto bad = [](const std::vector<DumpTensor>& ts) -> const DumpTensor* {
    for (const DumpTensor& t : ts)
      if (!t.stats.all_finite()) return &t;
    return nullptr;
  };
  std::optional<NonFiniteFinding> any;
  for (const DumpRecord& r : records) {
    const DumpTensor* out = bad(r.outputs);
    if (!out) continue;
    NonFiniteFinding f{r.name, out->role, out->stats.nan, out->stats.inf};
    if (!bad(r.inputs)) return f;  // finite in, non-finite out: this record produced it
    if (!any) any = f;
  }
  return any;
}

PrecisionDumpHook::PrecisionDumpHook(PrecisionDumpOptions options, DumpRankInfo info)
    : opt_(std::move(options)), info_(std::move(info)) {
  rank_selected_ = opt_.ranks.empty() || std::binary_search(opt_.ranks.begin(), opt_.ranks.end(), info_.rank);
}

bool PrecisionDumpHook::selected_step(int64_t it) const {
  return rank_selected_ && (opt_.steps.empty() || std::binary_search(opt_.steps.begin(), opt_.steps.end(), it));
}

std::optional<pf::Kind> PrecisionDumpHook::region_depth(int64_t it) const {
  if (!selected_step(it)) return std::nullopt;
  // Ops need their modules open to get full names.
  return opt_.level == DumpLevel::kL0 ? pf::Kind::kModule : pf::Kind::kOp;
}

std::string PrecisionDumpHook::rank_dir() const {
  return (std::filesystem::path(opt_.path) / fmt::format("step{}", iteration_) / fmt::format("rank{}", info_.rank))
      .string();
}

std::string PrecisionDumpHook::tensor_dir() const { return rank_dir() + "/dump_tensor_data"; }

namespace {

// A float32 .npy file of `t`'s data (numpy.load opens it).
void write_npy_f32(FileSystem& fs, const std::string& path, const pf::TensorRef& t) {
  const std::string header = data::npy_header("<f4", std::vector<int64_t>(t.dims.begin(), t.dims.begin() + t.ndim));
  write_file_atomic(fs, path, [&](WritableFile& f) {
    f.append(std::as_bytes(std::span<const char>(header.data(), header.size())));
    f.append(std::as_bytes(std::span<const float>(t.data, static_cast<size_t>(t.numel))));
  });
}

}  // namespace

void PrecisionDumpHook::add_tensors(const DumpRecord& rec, std::span<const pf::TensorRef> ts,
                                    const DumpRecord* parent_op, std::vector<DumpTensor>& out) {
  for (const pf::TensorRef& t : ts) {
    DumpTensor d;
    d.role = t.role;
    d.shape.assign(t.dims.begin(), t.dims.begin() + t.ndim);
    d.dtype = t.dtype;
    d.tp_shard = t.partition == pf::Partition::kTpShard;
    // A step of an unfused kernel (an op inside an op) does not know the
    // model's dtype nor its TP layout: it takes the calling op's input's; a
    // per-row result (one column, e.g. the losses) is whole on every rank.
    if (parent_op && !parent_op->inputs.empty()) {
      const DumpTensor& pi = parent_op->inputs.front();
      d.dtype = pi.dtype;
      d.tp_shard = pi.tp_shard && t.ndim >= 2 && t.dims[t.ndim - 1] > 1;
    }
    d.stats = pf::tensor_stats(t.data, t.data ? t.numel : 0);  // shape only: no finite values
    d.stats.count = t.numel;
    out.push_back(std::move(d));
    if (opt_.tensors && t.data) write_npy_f32(fs_, fmt::format("{}/{}.{}.npy", tensor_dir(), rec.name, t.role), t);
  }
}

const DumpRecord* PrecisionDumpHook::parent_op() const {
  for (auto it = stack_.rbegin(); it != stack_.rend(); ++it)
    if (it->region.kind == pf::Kind::kModule || it->region.kind == pf::Kind::kOp)
      return it->region.kind == pf::Kind::kOp && it->recorded ? &it->record : nullptr;
  return nullptr;
}

void PrecisionDumpHook::on_region_begin(const pf::Region& r, std::span<const pf::TensorRef> t) {
  if (r.kind == pf::Kind::kIteration) {
    iteration_ = r.index;
    stack_.clear();
    calls_.clear();
    fused_.clear();
    records_.clear();
    if (opt_.tensors) fs_.create_dirs(tensor_dir());
    return;
  }
  if (iteration_ == 0) return;  // evaluation, or before the first dumped iteration
  Open o;
  o.region = r;
  const Open* parent = nullptr;
  for (auto it = stack_.rbegin(); it != stack_.rend(); ++it)
    if (!it->full_name.empty()) {
      parent = &*it;
      break;
    }
  const bool in_backward_phase = std::any_of(stack_.begin(), stack_.end(), [](const Open& x) {
    return x.region.kind == pf::Kind::kPhase && x.region.pass == pf::Pass::kBackward;
  });
  o.recompute = (parent && parent->recompute) || (in_backward_phase && r.pass == pf::Pass::kForward);
  if (r.kind == pf::Kind::kModule || r.kind == pf::Kind::kOp) {
    std::string leaf = r.index >= 0 ? fmt::format("{}.{}", r.name, r.index) : std::string(r.name);
    o.full_name = parent ? parent->full_name + "." + leaf : leaf;
    const bool level_ok = r.kind == pf::Kind::kModule ? opt_.level != DumpLevel::kL1 : opt_.level != DumpLevel::kL0;
    o.recorded = level_ok && !o.recompute && r.pass != pf::Pass::kNone;
  }
  if (r.fused_by) fused_[r.fused_by].insert(r.name);
  if (o.recorded) {
    DumpRecord& rec = o.record;
    rec.module = o.full_name;
    rec.kind = r.kind == pf::Kind::kModule ? "module" : "op";
    rec.pass = pf::pass_name(r.pass);
    rec.call = calls_[rec.module + "." + rec.pass]++;
    rec.name = fmt::format("{}.{}.{}", rec.module, rec.pass, rec.call);
    rec.fused_by = r.fused_by ? r.fused_by : "";
    for (auto it = stack_.rbegin(); it != stack_.rend(); ++it)
      if (it->region.kind == pf::Kind::kPhase) {
        rec.micro_batch = it->region.index;
        rec.chunk = it->region.chunk;
        break;
      }
    add_tensors(rec, t, parent_op(), rec.inputs);
  }
  stack_.push_back(std::move(o));
}

void PrecisionDumpHook::on_region_end(const pf::Region& r, std::span<const pf::TensorRef> t) {
  if (r.kind == pf::Kind::kIteration) {
    if (iteration_ != 0) {
      // Called from a scope's destructor when the iteration ends by an
      // exception (a non-finite loss): what was dumped so far still lands.
      try {
        finish_iteration();
      } catch (const std::exception& e) {
        fmt::print(stderr, "precision dump: iteration {} rank {}: cannot write the dump: {}\n", iteration_, info_.rank,
                   e.what());
      }
    }
    iteration_ = 0;
    stack_.clear();
    return;
  }
  if (iteration_ == 0 || stack_.empty()) return;
  Open o = std::move(stack_.back());
  stack_.pop_back();
  if (!o.recorded) return;
  add_tensors(o.record, t, parent_op(), o.record.outputs);
  records_.push_back(std::move(o.record));
}

void PrecisionDumpHook::finish_iteration() {
  const std::optional<NonFiniteFinding> bad = first_nonfinite(records_);
  if (bad)
    fmt::print("precision dump: iteration {} rank {}: first NaN/Inf in {} ({}: {} NaN, {} Inf)\n", iteration_,
               info_.rank, bad->record, bad->role, bad->nan, bad->inf);
  DumpFile f;
  f.iteration = iteration_;
  f.info = info_;
  f.level = dump_level_name(opt_.level);
  for (const auto& [flag, ops] : fused_) f.fused_ops[flag] = std::vector<std::string>(ops.begin(), ops.end());
  f.records = records_;
  f.first_nonfinite = bad;
  const std::string dir = rank_dir();
  fs_.create_dirs(dir);
  write_file_atomic(fs_, dir + "/dump.json", dump_file_to_json(f).dump(1) + "\n");
}

std::shared_ptr<PrecisionDumpHook> make_precision_dump_hook(const config::Args& args,
                                                            const parallel::ParallelState& state,
                                                            const std::string& dtype) {
  if (args.precision_dump_path.empty()) return nullptr;
  PrecisionDumpOptions o = precision_dump_options(args);
  if (!o.ranks.empty() && !std::binary_search(o.ranks.begin(), o.ranks.end(), int64_t{state.rank()})) return nullptr;
  return std::make_shared<PrecisionDumpHook>(std::move(o), dump_rank_info(state, dtype));
}

}  // namespace mtrain::observe

#include "plan/dry_step.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "common/errors.h"
#include "parallel/param_gather.h"
#include "plan/steady_state.h"
#include "profiler/kernel_region.h"
#include "train/grad_regions.h"
#include "train/trainer.h"

namespace mtrain::plan {

namespace {

// This rank's micro-batches of a global batch with their shape only: a dry
// run reads no dataset. Every row is the model's full sequence length (what
// pretraining always feeds; SFT pads to the longest row, at most this).
class ShapeOnlyBatches : public data::BatchSource {
 public:
  ShapeOnlyBatches(int64_t micro_batches, int64_t B, int64_t T, int64_t global_batch)
      : micro_batches_(micro_batches), B_(B), T_(T), global_batch_(global_batch) {}

  std::vector<data::Batch> next_global_batch() override {
    std::vector<data::Batch> out(static_cast<size_t>(micro_batches_));
    for (data::Batch& b : out) {
      b.B = B_;
      b.T = T_;
    }
    return out;
  }
  int64_t global_batch_samples() const override { return global_batch_; }
  data::DataLoader::State position() const override { return {}; }
  void set_position(const data::DataLoader::State&) override {
    throw Error(ExitCode::kInternal, "a dry run's batches have no position to restore");
  }

 private:
  int64_t micro_batches_, B_, T_, global_batch_;
};

// The shapes of a real source's micro-batches (rows x the longest row), no
// token ids; the lengths it served, in order.
class ShapesOf : public data::BatchSource {
 public:
  explicit ShapesOf(data::BatchSource& real) : real_(real) {}
  std::vector<data::Batch> next_global_batch() override {
    std::vector<data::Batch> out;
    for (const data::Batch& b : real_.next_global_batch()) {
      data::Batch s;
      s.B = b.B;
      s.T = b.T;
      lengths.push_back(b.T);
      out.push_back(std::move(s));
    }
    return out;
  }
  int64_t global_batch_samples() const override { return real_.global_batch_samples(); }
  data::DataLoader::State position() const override { return real_.position(); }
  void set_position(const data::DataLoader::State& s) override { real_.set_position(s); }
  std::vector<int64_t> lengths;

 private:
  data::BatchSource& real_;
};

// --overlap_param_gather: which of the gathers started after the optimizer
// step each chunk's next forward waits for (the trainer's wait, from the
// same bucket layout as the rank's GradSync).
std::vector<int> gathers_before_chunk(model::GptModel& model, const parallel::ParallelState& state,
                                      const train::TrainerOptions& to) {
  std::vector<int> out;
  // The dense region's buckets (grad_regions.h); an expert region's gathers
  // are not counted here.
  const train::GradRegion dense = train::grad_regions(model.params(), state, to.bucket_elems)[0];
  if (!to.overlap_param_gather || !to.distributed_optimizer || dense.size == 1) return out;
  const parallel::GradBuckets& buckets = dense.buckets;
  for (int c = 0; c < model.num_chunks(); ++c) {
    size_t n = 0;
    for (const auto& [b, e] : model.chunk_param_spans(c)) n = std::max(n, parallel::param_gather_prefix(buckets, b, e));
    out.push_back(static_cast<int>(n));
  }
  return out;
}

// The device's memory when each phase of the recorded iteration begins
// (the steady-state shortcut's check).
class MemoryAtPhases : public observe::TrainHook {
 public:
  explicit MemoryAtPhases(const device::Device& dev) : dev_(dev) {}
  std::optional<profiler::Kind> region_depth(int64_t iteration) const override {
    return iteration == 1 ? std::optional(profiler::Kind::kPhase) : std::nullopt;
  }
  void on_region_begin(const profiler::Region& r, std::span<const profiler::TensorRef>) override {
    if (r.kind == profiler::Kind::kPhase) at_begin.push_back(dev_.stats());
  }
  std::vector<device::MemoryStats> at_begin;

 private:
  const device::Device& dev_;
};

}  // namespace

std::optional<DryStep> run_dry_step(const config::Args& args, model::GptModel& model, train::TrainerSetup& setup,
                                    parallel::ParallelState& state, train::TrainerOptions to, data::BatchSource* data,
                                    std::vector<int64_t>* lengths_out, bool repeat_steady_state) {
  to.train_iters = 1;
  to.eval_interval = 0;
  std::optional<SteadyStatePlan> steady;
  if (repeat_steady_state && !data) {
    parallel::PipelineShape full;
    full.stages = state.grid().pp();
    full.stage = state.coords().pp;
    full.chunks = model.num_chunks();
    full.microbatches = static_cast<int>(args.num_micro_batches);
    full.chunk_pool = model.config().chunk_pool;
    steady = plan_steady_state(full);
  }
  const int64_t stepped = steady ? steady->microbatches : args.num_micro_batches;
  ShapeOnlyBatches shapes(stepped, args.micro_batch_size, model.config().seq_length, args.global_batch_size);
  std::optional<ShapesOf> of_data;
  if (data) of_data.emplace(*data);
  data::BatchSource& batches = of_data ? static_cast<data::BatchSource&>(*of_data) : shapes;
  const int dtype_bytes = model.config().dtype == DType::kF32 ? 4 : 2;
  auto recorder = std::make_shared<StepRecorder>(1, dtype_bytes);
  observe::HookList hooks;
  hooks.add(recorder);
  std::shared_ptr<MemoryAtPhases> memory;
  if (steady) {
    memory = std::make_shared<MemoryAtPhases>(model.device());
    hooks.add(memory);
  }
  profiler::ShapeOnlyScope shape_only;
  train::Trainer trainer(to, model, setup.optimizer, setup.scheduler, setup.scaler.get(), batches, nullptr, hooks,
                         &state);
  trainer.train();
  StepRecord r = recorder->take_record();
  if (steady) {
    std::optional<StepRecord> full = expand_steady_state(r, memory->at_begin, *steady);
    if (!full) return std::nullopt;
    r = std::move(*full);
  }
  r.gathers_before_chunk = gathers_before_chunk(model, state, to);
  if (lengths_out) *lengths_out = of_data ? of_data->lengths : std::vector<int64_t>{};
  return DryStep{std::move(r), model.device().stats(), static_cast<int>(stepped)};
}

}  // namespace mtrain::plan

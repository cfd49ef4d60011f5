// Probes: the regions the training code marks as it runs (an iteration, one
// phase (forward or backward of a micro-batch, the gradient reduction, the
// optimizer step), a module, an op, a kernel) and the tensors
// it shows at their edges. Whoever listens (the profiler, the precision
// dumper, a user's hook through observe/hooks.h) sees them; nobody listening
// costs a thread-local load and a branch per region (and filling the small
// TensorRefs a site passes, on the stack).
//
// A thread has at most one listener: each simulated rank is a thread (or a
// process), so ranks never see each other's regions. The listener says the
// deepest kind it wants; shallower regions are reported, deeper ones are not.
//
// Names: a region's `name` is a static string; modules and ops nest, and the
// listener builds the full Megatron-style name from the open regions
// ("decoder.layers.3.self_attention.linear_qkv"). `index` numbers the region
// (iteration, micro-batch, global layer number); -1 when it has none.
#pragma once

#include <array>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <span>

#include "common/kernel_work.h"

namespace mtrain::profiler {

// Outer to inner; a listener wants every kind up to its deepest.
enum class Kind : uint8_t {
  kIteration,  // one training iteration (train_step); index = iteration, 1-based
  kPhase,      // a phase of the iteration: forward_step / backward_step of one micro-batch through one
               // model chunk of this rank (index = micro-batch), grad_sync, optimizer_step
  kModule,     // a Megatron-core module: embedding, decoder.layers (index = layer), input_layernorm,
               // self_attention, linear_qkv, core_attention, linear_proj, pre_mlp_layernorm, mlp,
               // linear_fc1, linear_fc2, decoder.final_layernorm, output_layer
  kOp,         // a functional op between or inside modules: apply_rotary_pos_emb, self_attn_bda,
               // activation_func, mlp_bda, cross_entropy, and the steps of unfused paths
  kKernel,     // a kernel: one GEMM, one elementwise pass (flops and bytes for the cost model)
};
const char* kind_name(Kind k);

enum class Pass : uint8_t { kNone, kForward, kBackward };
const char* pass_name(Pass p);  // "", "forward", "backward"

// How this rank's tensor relates to the full tensor of a single-device run.
enum class Partition : uint8_t {
  kReplicated,  // every tensor-parallel rank holds the whole tensor
  kTpShard,     // each tensor-parallel rank holds a disjoint part; the full tensor is their union
};

// A tensor shown at a region's edge. `data` may be null (shape-only runs).
struct TensorRef {
  const char* role = "";  // "input", "output", "grad_output", "grad_input", "loss"...
  const float* data = nullptr;
  int64_t numel = 0;
  std::array<int64_t, 4> dims{};
  int ndim = 0;
  const char* dtype = "float32";  // the emulated dtype (host storage is fp32)
  Partition partition = Partition::kReplicated;
};
// A 2-D tensor ref (rows, cols), the common case of activations.
inline TensorRef tensor_2d(const char* role, const float* data, int64_t rows, int64_t cols, const char* dtype,
                           Partition p = Partition::kReplicated) {
  return {role, data, rows * cols, {rows, cols, 0, 0}, 2, dtype, p};
}
inline TensorRef tensor_4d(const char* role, const float* data, int64_t a, int64_t b, int64_t c, int64_t d,
                           const char* dtype, Partition p = Partition::kReplicated) {
  return {role, data, a * b * c * d, {a, b, c, d}, 4, dtype, p};
}

struct Region {
  Kind kind = Kind::kOp;
  Pass pass = Pass::kNone;
  const char* name = "";  // a string literal: records keep it (observe/step_record.h)
  int64_t index = -1;
  // Set when a fusion flag merges what would otherwise be several ops into
  // this one (e.g. "--bias_dropout_fusion"): its inside is not shown.
  const char* fused_by = nullptr;
  // kPhase: the model chunk (virtual pipeline stage) of this rank it runs.
  int chunk = 0;
  // Kernels: the work, for the simulated NPU's cost model (common/kernel_work.h).
  KernelWork work{};
};

class Listener {
 public:
  virtual ~Listener() = default;
  // `tensors` are the region's inputs at begin (incoming gradients for a
  // backward region) and its outputs at end. They are valid only during the
  // call (buffers are reused and updated in place).
  virtual void begin(const Region& r, std::span<const TensorRef> tensors) = 0;
  virtual void end(const Region& r, std::span<const TensorRef> tensors) = 0;
};

namespace detail {
struct ThreadProbe {
  Listener* listener = nullptr;
  Kind deepest = Kind::kIteration;
  bool tensors = false;
  std::exception_ptr pending;  // thrown by a listener while a Scope was being destroyed
};
extern thread_local ThreadProbe t_probe;
}  // namespace detail

// Installs this thread's listener (null: none), the deepest kind it wants and
// whether it reads tensors. Returns the previous listener.
Listener* set_listener(Listener* l, Kind deepest, bool tensors);
inline bool listening(Kind k) {
  const detail::ThreadProbe& p = detail::t_probe;
  return p.listener != nullptr && static_cast<uint8_t>(k) <= static_cast<uint8_t>(p.deepest);
}
// True when the listener reads tensors (sites skip building refs otherwise).
inline bool wants_tensors() { return detail::t_probe.listener != nullptr && detail::t_probe.tensors; }

// Rethrows (and clears) what a listener threw while a Scope was destroyed:
// a destructor must not throw, so ~Scope keeps the exception for the caller
// that closes the step (observe::HookList) to raise.
void rethrow_pending();
// Forgets such an exception (left by a step that ended in another one).
inline void discard_pending() { detail::t_probe.pending = nullptr; }

// A region for the life of a scope. Call end({...}) to show outputs; a scope
// left without end() (an exception, or just the end of the block) is ended
// with no tensors. The listener that saw begin sees end.
class Scope {
 public:
  explicit Scope(const Region& r, std::initializer_list<TensorRef> inputs = {})
      : r_(r), l_(listening(r.kind) ? detail::t_probe.listener : nullptr) {
    if (l_) l_->begin(r_, std::span<const TensorRef>(inputs.begin(), inputs.size()));
  }
  ~Scope() {
    if (!l_) return;
    try {
      l_->end(r_, {});
    } catch (...) {
      if (!detail::t_probe.pending) detail::t_probe.pending = std::current_exception();
    }
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  bool on() const { return l_ != nullptr; }
  void end(std::initializer_list<TensorRef> outputs) {
    if (!l_) return;
    Listener* l = l_;
    l_ = nullptr;
    l->end(r_, std::span<const TensorRef>(outputs.begin(), outputs.size()));
  }

 private:
  Region r_;
  Listener* l_;
};

}  // namespace mtrain::profiler

#include "train/forward_only.h"

namespace mtrain::train {

SequenceForward::SequenceForward(model::GptModel& model, parallel::ParallelState* parallel, bool stage_buffers)
    : model_(model), parallel_(parallel), stage_buffers_(stage_buffers) {
  const model::ModelConfig& c = model.config();
  if (stage_buffers && pipelined())
    buffers_ = parallel::PipelineBuffers(model.device(), pipeline_shape(), c.tokens_local(c.seq_length) * c.hidden,
                                         c.dtype, /*meta=*/false);
}

void SequenceForward::run(const int32_t* tokens, int64_t first, int64_t n, const ChunkForward& forward) {
  positions_.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) positions_[t] = static_cast<int32_t>(first + t);
  model::TokenBatch b;
  b.B = 1;
  b.T = n;
  b.tokens = tokens;
  b.positions = positions_.data();
  if (!pipelined()) {
    const float* h = nullptr;
    for (int ch = 0; ch < model_.num_chunks(); ++ch) h = forward(ch, b, h);
    return;
  }
  parallel::PipelineCallbacks cb;
  cb.message_elems = [&](int, int) { return model_.hidden_elems(b); };
  cb.forward = [&](const parallel::PipeAction& a, const float* input) { return forward(a.chunk, b, input); };
  parallel::run_pipeline_forward_only(parallel_->pp(), pipeline_shape(), cb, parallel::Wire{},
                                      stage_buffers_ ? &buffers_ : nullptr);
}

int32_t SequenceForward::share_token(int32_t token) {
  if (pipelined()) parallel_->pp().broadcast(&token, 1, parallel_->grid().pp() - 1);
  return token;
}

}  // namespace mtrain::train

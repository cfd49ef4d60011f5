// A tiny model and a fixed data source for in-process training tests.
#pragma once

#include <vector>

#include "common/rng.h"
#include "data/loader.h"
#include "train/trainer.h"

namespace mtrain::train {
namespace {

model::ModelConfig tiny() {
  model::ModelConfig c;
  c.num_layers = 2;
  c.hidden = 16;
  c.ffn = 24;
  c.heads = 4;
  c.groups = 2;
  c.head_dim = 4;
  c.vocab = 31;
  c.padded_vocab = 32;
  c.max_positions = 16;
  c.seq_length = 12;
  c.micro_batch = 4;
  return c;
}

std::vector<data::Sample> samples(int n) {
  std::vector<data::Sample> out;
  Rng rng(1);
  for (int i = 0; i < n; ++i) {
    data::Sample s;
    const int len = 5 + static_cast<int>(rng.next_u64() % 8);
    for (int t = 0; t < len; ++t) {
      s.tokens.push_back(static_cast<int32_t>(rng.next_u64() % 31));
      s.loss_mask.push_back(t >= 2 ? 1 : 0);
    }
    out.push_back(s);
  }
  return out;
}

// Global batch i is samples [4i, 4i+4), cut into micro-batches of `mbs`.
class FixedSource : public data::BatchSource {
 public:
  FixedSource(int64_t mbs) : samples_(samples(64)), mbs_(mbs) {}
  std::vector<data::Batch> next_global_batch() override {
    std::vector<data::Batch> out;
    for (int64_t s = 0; s < 4; s += mbs_) {
      std::vector<int64_t> idx;
      for (int64_t j = 0; j < mbs_; ++j) idx.push_back(next_ * 4 + s + j);
      out.push_back(data::make_batch(samples_, idx, 0, 0));
    }
    ++next_;
    return out;
  }
  int64_t global_batch_samples() const override { return 4; }
  data::DataLoader::State position() const override { return {0, next_ * 4, 0, next_ * 4, 64}; }
  void set_position(const data::DataLoader::State& s) override { next_ = s.cursor / 4; }

 private:
  std::vector<data::Sample> samples_;
  int64_t mbs_;
  int64_t next_ = 0;
};

optim::LrScheduleConfig constant_lr(double lr) {
  optim::LrScheduleConfig sc;
  sc.lr = lr;
  sc.decay_iters = 100;
  sc.style = "constant";
  return sc;
}

}  // namespace
}  // namespace mtrain::train

// Helpers for the sharded checkpoint tests: a 4-rank SimWorld save of a
// 6x8 matrix split 2x2, a replicated norm (one writer) and an unevenly split
// 1-D optimizer tensor; and readers that check any re-split bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/sharded_checkpoint.h"
#include "parallel/sim_comm.h"
#include "safetensors_test_util.h"

namespace mtrain::checkpoint::testing {

inline constexpr int64_t kRows = 6, kCols = 8, kNorm = 8, kOpt = 10;

// The global tensors of "iteration" `it` (distinct values per iteration).
struct Globals {
  std::vector<float> w, norm, opt;
  explicit Globals(int64_t it)
      : w(random_floats(kRows * kCols, static_cast<uint32_t>(it) * 3 + 1)),
        norm(random_floats(kNorm, static_cast<uint32_t>(it) * 3 + 2)),
        opt(random_floats(kOpt, static_cast<uint32_t>(it) * 3 + 3)) {}
};

// Rank r's blocks (backing storage in `store`): w rows (r / 2) x cols (r % 2),
// the norm (rank 0 writes it), opt elements [bounds[r], bounds[r + 1]).
inline std::vector<ShardedTensor> rank_blocks(const Globals& g, int r, std::vector<std::vector<float>>& store) {
  const int64_t r0 = (r / 2) * 3, c0 = (r % 2) * 4;
  std::vector<float> wb;
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 4; ++j) wb.push_back(g.w[static_cast<size_t>((r0 + i) * kCols + c0 + j)]);
  }
  const int64_t bounds[5] = {0, 3, 5, 9, 10};
  store = {wb, g.norm, std::vector<float>(g.opt.begin() + bounds[r], g.opt.begin() + bounds[r + 1])};
  return {
      {"decoder.w", {kRows, kCols}, {r0, c0}, {3, 4}, store[0].data()},
      {"decoder.norm", {kNorm}, {0}, {kNorm}, store[1].data(), r == 0},
      {"optimizer.exp_avg/decoder.w", {kOpt}, {bounds[r]}, {bounds[r + 1] - bounds[r]}, store[2].data()},
  };
}

// Every rank saves iteration `it`; returns each rank's CheckpointError text ("" = success).
inline std::vector<std::string> save_on_4_ranks(FileSystem& fs, const std::string& dir, int64_t it,
                                                const SaveOptions& opts = {}) {
  const Globals g(it);
  parallel::SimWorld world(4, parallel::SimWorldOptions{10.0, true});
  std::vector<std::string> errors(4);
  world.run([&](int rank) {
    auto comm = world.make_world_comm(rank);
    std::vector<std::vector<float>> store;
    const auto blocks = rank_blocks(g, rank, store);
    try {
      save_checkpoint(fs, *comm, dir, it, blocks, "{\"iteration\": " + std::to_string(it) + "}", opts);
    } catch (const CheckpointError& e) {
      errors[static_cast<size_t>(rank)] = e.what();
    }
  });
  return errors;
}

inline void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << what;
}

// Reads w back as row blocks [row_bounds] x column blocks [col_bounds] and
// the 1-D tensors whole, comparing with iteration `it`'s values bit for bit.
inline void expect_checkpoint(const CheckpointReader& r, int64_t it, const std::vector<int64_t>& row_bounds,
                              const std::vector<int64_t>& col_bounds) {
  const Globals g(it);
  EXPECT_EQ(r.iteration(), it);
  std::vector<float> w(static_cast<size_t>(kRows * kCols));
  for (size_t a = 0; a + 1 < row_bounds.size(); ++a) {
    for (size_t b = 0; b + 1 < col_bounds.size(); ++b) {
      const int64_t nr = row_bounds[a + 1] - row_bounds[a], nc = col_bounds[b + 1] - col_bounds[b];
      std::vector<float> block(static_cast<size_t>(nr * nc));
      r.read_block("decoder.w", {row_bounds[a], col_bounds[b]}, {nr, nc}, block.data());
      for (int64_t i = 0; i < nr; ++i) {
        for (int64_t j = 0; j < nc; ++j) {
          w[static_cast<size_t>((row_bounds[a] + i) * kCols + col_bounds[b] + j)] =
              block[static_cast<size_t>(i * nc + j)];
        }
      }
    }
  }
  expect_bits(w, g.w, "decoder.w");
  std::vector<float> norm(kNorm), opt(kOpt);
  r.read_block("decoder.norm", {0}, {kNorm}, norm.data());
  r.read_block("optimizer.exp_avg/decoder.w", {0}, {kOpt}, opt.data());
  expect_bits(norm, g.norm, "decoder.norm");
  expect_bits(opt, g.opt, "optimizer.exp_avg");
}

}  // namespace mtrain::checkpoint::testing

// Helpers of the tensor-parallel tests (test_tensor_parallel*.cc): slicing a
// reference tensor into a rank's shard, and running a body on simulated TP
// ranks with one OpenMP/OpenBLAS thread each while recording the collectives.
// Tolerance for sharded vs unsharded results: sharding only changes how sums
// are split (partial GEMMs added over ranks, softmax sums over vocabulary
// slices), so the bound is fp32 rounding. An element whose terms cancel can
// then move by far more than u times its size, so tensors are compared in the
// max norm: each result chains at most six stages (the MLP block: two GEMMs
// and the activation forward, their transposes backward) of sums of at most
// 48 terms, each within gamma_48 of its terms' size in any order.
#pragma once

#include <cblas.h>
#include <omp.h>

#include <cstdint>
#include <vector>

#include "../tensor/kernel_test_util.h"
#include "parallel/sim_comm.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::parallel::tp_testing {

using kernels::testing::Vec;

inline const double kTpRtol = 2 * 6 * mtrain::testing::fp32_gamma(48);  // 3.4e-5

// a and b agree to kTpRtol of b's max norm.
inline ::testing::AssertionResult tp_close(const Vec& a, const Vec& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "size " << a.size() << " vs " << b.size();
  return mtrain::testing::close_in_max_norm(a.data(), b.data(), a.size(), kTpRtol);
}
inline constexpr int64_t kVocab = 40;  // padded vocabulary, divisible by 2 and 4

// Rows [r0, r0 + nr) of a row-major (*, ncols) buffer.
inline Vec rows(const Vec& x, int64_t r0, int64_t nr, int64_t ncols) {
  return Vec(x.begin() + r0 * ncols, x.begin() + (r0 + nr) * ncols);
}

// Columns [c0, c0 + nc) of a row-major (nrows, ncols) buffer.
inline Vec cols(const Vec& x, int64_t nrows, int64_t ncols, int64_t c0, int64_t nc) {
  Vec out(nrows * nc);
  for (int64_t i = 0; i < nrows; ++i)
    for (int64_t j = 0; j < nc; ++j) out[i * nc + j] = x[i * ncols + c0 + j];
  return out;
}

// An empty vector stands for a null (absent) buffer.
inline const float* ptr(const Vec& v) { return v.empty() ? nullptr : v.data(); }
inline float* ptr(Vec& v) { return v.empty() ? nullptr : v.data(); }

// Token ids (N) with repeats, spread over every rank's slice of kVocab.
inline std::vector<int32_t> token_ids(int64_t N, int64_t mul, int64_t add) {
  std::vector<int32_t> t(N);
  for (int64_t i = 0; i < N; ++i) t[i] = static_cast<int32_t>((i * mul + add) % kVocab);
  return t;
}

// Runs body(rank, tp_comm) on `tp` simulated ranks, one OpenMP/OpenBLAS thread each; records each rank's
// collectives in ops[rank].
template <class Body>
void run_tp(int tp, std::vector<std::vector<CommOp>>& ops, Body&& body) {
  openblas_set_num_threads(1);
  ops.assign(tp, {});
  RankGroup members;
  for (int r = 0; r < tp; ++r) members.push_back(r);
  SimWorld world(tp);
  world.run([&](int r) {
    omp_set_num_threads(1);
    auto comm = world.make_comm("tp", members, r);
    comm->set_observer([&ops, r](const CommEvent& e) { ops[r].push_back(e.op); });
    body(r, *comm);
  });
}

}  // namespace mtrain::parallel::tp_testing

#include "parallel/ring_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "profiler/kernel_region.h"
#include "profiler/probe.h"
#include "tensor/attention.h"

namespace mtrain::parallel {

namespace k = kernels;

namespace {

constexpr int kRingTag = 11;  // the cp group carries nothing else

// The ring's shape on this rank: P ranks, this one r, the block held at step i
// came from rank (r - i) mod P.
struct Ring {
  int P, r;
  int64_t B, H, G, T, D, c;  // c = T / 2 rows per chunk
  int source(int step) const { return (r - step + P) % P; }
  int next() const { return (r + 1) % P; }
  int prev() const { return (r + P - 1) % P; }
  int64_t kv_floats() const { return B * G * T * D; }
};

Ring ring_of(const Comm& cp, int64_t B, int64_t H, int64_t G, int64_t T, int64_t D) {
  return Ring{cp.size(), cp.rank(), B, H, G, T, D, T / 2};
}

// Calls f(qh, kh, mask, dropout) for each local query half qh and key half kh
// of the block from `src` that the device computes: with the causal mask the
// pairs this rank's queries can see (the diagonal's hidden half skipped);
// with the general mask every pair, whole (MindSpeed computes each step's
// block under the explicit mask). dropout places the pair's mask at the
// chunks' positions in the whole sequence.
template <class F>
void for_computed_pairs(const Ring& g, int src, const CpDropout& dr, CpMask cp_mask, F&& f) {
  const bool general = cp_mask == CpMask::kGeneral;
  for (int qh = 0; qh < 2; ++qh)
    for (int kh = 0; kh < 2; ++kh) {
      const int64_t qc = cp_chunk(g.r, g.P, qh), kc = cp_chunk(src, g.P, kh);
      if (kc > qc && !general) continue;
      const k::BlockMask mask = kc > qc   ? k::BlockMask::kHidden
                                : kc < qc ? k::BlockMask::kVisible
                                : general ? k::BlockMask::kCausalWhole
                                          : k::BlockMask::kCausal;
      const kernels::BlockDropout bd{
          dr.p, dr.seed, dr.head_offset, dr.total_heads, std::max(g.P * g.T, dr.mask_seq), qc * g.c, kc * g.c};
      f(qh, kh, mask, bd);
    }
}

// The online-softmax update of one block's c rows per head into the
// running out and lse, in fp32 (as MindSpeed's unfused update): each row
// reads out, the block's out and both lse, writes out and lse.
profiler::Region merge_region(const Ring& g) {
  const double rows = static_cast<double>(g.B * g.H * g.c), D = static_cast<double>(g.D);
  return profiler::memory_kernel("attention_lse_merge", rows * (3 * D + 3) * 4, rows * (4 * D + 8));
}

// Passes the block in `from` (n floats and, with documents, its doc ids) to
// the next rank and receives the previous rank's into `to`.
void shift(Comm& cp, const Ring& g, const float* from, float* to, int64_t n, const int32_t* from_doc, int32_t* to_doc,
           Wire wire) {
  cp.send_recv(from, n, g.next(), to, n, g.prev(), kRingTag, wire);
  if (from_doc) cp.send_recv(from_doc, g.B * g.T, g.next(), to_doc, g.B * g.T, g.prev(), kRingTag);
}

}  // namespace

void ring_attention_forward(Comm& cp, float* out, float* lse, const float* q, const float* k, const float* v,
                            const int32_t* doc, int64_t B, int64_t H, int64_t G, int64_t T, int64_t D,
                            const CpDropout& dropout, const RingBuffers& buf, CpMask mask, Wire wire) {
  const Ring g = ring_of(cp, B, H, G, T, D);
  const bool data = cp.moves_data();
  const int64_t n = g.kv_floats(), c = g.c;
  if (data) {
    std::fill(out, out + B * H * T * D, 0.0f);
    std::fill(lse, lse + B * H * T, -INFINITY);
    std::copy(k, k + n, buf.travel[0]);
    std::copy(v, v + n, buf.travel[0] + n);
    if (doc) std::copy(doc, doc + B * T, buf.docs[0]);
  }
  for (int step = 0; step < g.P; ++step) {
    const int cur = step % 2;
    const float* kb = buf.travel[cur];
    const float* vb = kb + n;
    const int32_t* kdoc = doc ? buf.docs[cur] : nullptr;
    if (step > 0) profiler::Scope needed({profiler::Kind::kOp, profiler::Pass::kNone, kRingBlockNeeded, step});
    // The next block is on its way while this one is used (one exchange per step).
    if (step + 1 < g.P) shift(cp, g, buf.travel[cur], buf.travel[1 - cur], 2 * n, kdoc, buf.docs[1 - cur], wire);
    for_computed_pairs(
        g, g.source(step), dropout, mask, [&](int qh, int kh, k::BlockMask m, const k::BlockDropout& bd) {
          const int64_t qo = qh * c, ko = kh * c;
          k::attention_flash_block_forward(buf.block_out + qo * D, buf.block_lse + qo, q + qo * D, kb + ko * D,
                                           vb + ko * D, doc ? doc + qo : nullptr, kdoc ? kdoc + ko : nullptr, B, H, G,
                                           c, c, D, T, T, m, buf.scratch, bd);
          profiler::Scope merge(merge_region(g));
          if (!data) return;
          for (int64_t pair = 0; pair < B * H; ++pair)
            k::attention_lse_merge(out + (pair * T + qo) * D, lse + pair * T + qo, buf.block_out + (pair * T + qo) * D,
                                   buf.block_lse + pair * T + qo, c, D);
        });
  }
}

void ring_attention_backward(Comm& cp, float* dq, float* dk, float* dv, const float* dout, const float* q,
                             const float* k, const float* v, const float* out, const float* lse, const int32_t* doc,
                             int64_t B, int64_t H, int64_t G, int64_t T, int64_t D, const CpDropout& dropout,
                             const RingBuffers& buf, CpMask mask, Wire wire) {
  const Ring g = ring_of(cp, B, H, G, T, D);
  const bool data = cp.moves_data();
  const int64_t n = g.kv_floats(), c = g.c;
  if (data) {
    std::fill(dq, dq + B * H * T * D, 0.0f);
    std::copy(k, k + n, buf.travel[0]);
    std::copy(v, v + n, buf.travel[0] + n);
    std::fill(buf.travel[0] + 2 * n, buf.travel[0] + 4 * n, 0.0f);
    if (doc) std::copy(doc, doc + B * T, buf.docs[0]);
  }
  int cur = 0;
  for (int step = 0; step < g.P; ++step) {
    float* blk = buf.travel[cur];  // k | v | dk | dv of the block from source(step)
    const int32_t* kdoc = doc ? buf.docs[cur] : nullptr;
    for_computed_pairs(
        g, g.source(step), dropout, mask, [&](int qh, int kh, k::BlockMask m, const k::BlockDropout& bd) {
          const int64_t qo = qh * c, ko = kh * c;
          k::attention_flash_block_backward(dq + qo * D, blk + 2 * n + ko * D, blk + 3 * n + ko * D, dout + qo * D,
                                            q + qo * D, blk + ko * D, blk + n + ko * D, out + qo * D, lse + qo,
                                            doc ? doc + qo : nullptr, kdoc ? kdoc + ko : nullptr, B, H, G, c, c, D, T,
                                            T, m, buf.scratch, bd);
        });
    // The block moves on with its gradients so far; after the last step only
    // the gradients go, to the rank the block belongs to.
    if (step + 1 < g.P) {
      shift(cp, g, blk, buf.travel[1 - cur], 4 * n, kdoc, buf.docs[1 - cur], wire);
      cur = 1 - cur;
    } else if (g.P == 1) {  // a group of one: the block never left
      if (data) {
        std::copy(blk + 2 * n, blk + 3 * n, dk);
        std::copy(blk + 3 * n, blk + 4 * n, dv);
      }
    } else {
      float* mine = buf.travel[1 - cur];
      cp.send_recv(blk + 2 * n, 2 * n, g.next(), mine, 2 * n, g.prev(), kRingTag, wire);
      if (data) {
        std::copy(mine, mine + n, dk);
        std::copy(mine + n, mine + 2 * n, dv);
      }
    }
  }
}

}  // namespace mtrain::parallel

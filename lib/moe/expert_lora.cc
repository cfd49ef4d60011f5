#include "moe/expert_lora.h"

#include <algorithm>

namespace mtrain::moe {

namespace {

// Null stays null: a dry run's buffers have no storage (its kernels only count their cost).
template <class T>
T* at(T* p, int64_t off) {
  return p ? p + off : nullptr;
}

// Expert e's part of the site: its rows' ids from `off`.
lora::DropoutSite rows_from(const lora::DropoutSite& d, int64_t off) {
  lora::DropoutSite e = d;
  e.row_ids = at(d.row_ids, off);
  e.row_seeds = at(d.row_seeds, off);
  return e;
}

constexpr int64_t kIdBits = 24;  // fp32 holds integers below 2^24 exactly

}  // namespace

bool ExpertAdapterSite::any() const {
  return std::any_of(a.begin(), a.end(), [](const float* p) { return p != nullptr; });
}

lora::DropoutSite expert_dropout(const ExpertAdapters& ad, uint64_t seed, int64_t in_full, int64_t col0,
                                 const int64_t* row_ids, const uint64_t* row_seeds) {
  lora::DropoutSite d;
  if (ad.dropout <= 0.f) return d;
  d.p = ad.dropout;
  d.seed = seed;
  d.row_stride = in_full;
  d.col0 = col0;
  d.row_ids = row_ids;
  d.row_seeds = row_seeds;
  return d;
}

void expert_adapter_forward(float* y, float* h, float* scratch, const float* x, const ExpertAdapterSite& s, int64_t r,
                            float scale, const int64_t* rows, int64_t E_local, int64_t IN, int64_t OUT,
                            const lora::DropoutSite& d) {
  for (int64_t e = 0, off = 0; e < E_local; off += rows[e++]) {
    if (s.a[e] == nullptr) continue;
    lora::lora_down_forward(at(h, off * r), scratch, at(x, off * IN), s.a[e], rows[e], IN, r, rows_from(d, off));
    lora::lora_up_forward(at(y, off * OUT), at(h, off * r), s.b[e], scale, rows[e], r, OUT);
  }
}

void expert_adapter_backward(float* dx, float* dh, float* scratch, const float* dy, const float* x, const float* h,
                             const ExpertAdapterSite& s, int64_t r, float scale, const int64_t* rows, int64_t E_local,
                             int64_t IN, int64_t OUT, const lora::DropoutSite& d) {
  for (int64_t e = 0, off = 0; e < E_local; off += rows[e++]) {
    if (s.a[e] == nullptr) continue;
    lora::lora_up_backward(at(dh, off * r), s.b_grad[e], at(dy, off * OUT), at(h, off * r), s.b[e], scale, rows[e], r,
                           OUT);
    lora::lora_down_backward(at(dx, off * IN), s.a_grad[e], at(dh, off * r), at(x, off * IN), s.a[e], scratch, rows[e],
                             IN, r, rows_from(d, off));
  }
}

void expert_row_ids(int64_t* ids, const int32_t* row_token, const int64_t* rows_all, int64_t E, int64_t token0,
                    int64_t T, int64_t pitch) {
  for (int64_t e = 0, row = 0; e < E; ++e)
    for (int64_t i = 0; i < rows_all[e]; ++i, ++row) {
      const int64_t t = row_token[row];
      const int64_t g = token0 + t;
      ids[row] = t < 0 ? 0 : ((g / T) * pitch + g % T) * E + e;
    }
}

void pack_row_ids(float* out, const int64_t* ids, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    out[2 * i] = static_cast<float>(ids[i] >> kIdBits);
    out[2 * i + 1] = static_cast<float>(ids[i] & ((int64_t{1} << kIdBits) - 1));
  }
}

void unpack_row_ids(int64_t* ids, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    ids[i] = (static_cast<int64_t>(in[2 * i]) << kIdBits) + static_cast<int64_t>(in[2 * i + 1]);
}

}  // namespace mtrain::moe

#include "moe/expert_lora.h"

#include <algorithm>

#include "lora/lora_kernels.h"

namespace mtrain::moe {

namespace {
// Null stays null: a dry run's buffers have no storage (its kernels only count their cost).
template <class T>
T* at(T* p, int64_t off) {
  return p ? p + off : nullptr;
}
}  // namespace

bool ExpertAdapterSite::any() const {
  return std::any_of(a.begin(), a.end(), [](const float* p) { return p != nullptr; });
}

void expert_adapter_forward(float* y, float* h, const float* x, const ExpertAdapterSite& s, int64_t r, float scale,
                            const int64_t* rows, int64_t E_local, int64_t IN, int64_t OUT) {
  const lora::DropoutSite none{};
  for (int64_t e = 0, off = 0; e < E_local; off += rows[e++]) {
    if (s.a[e] == nullptr) continue;
    lora::lora_down_forward(at(h, off * r), nullptr, at(x, off * IN), s.a[e], rows[e], IN, r, none);
    lora::lora_up_forward(at(y, off * OUT), at(h, off * r), s.b[e], scale, rows[e], r, OUT);
  }
}

void expert_adapter_backward(float* dx, float* dh, const float* dy, const float* x, const float* h,
                             const ExpertAdapterSite& s, int64_t r, float scale, const int64_t* rows, int64_t E_local,
                             int64_t IN, int64_t OUT) {
  const lora::DropoutSite none{};
  for (int64_t e = 0, off = 0; e < E_local; off += rows[e++]) {
    if (s.a[e] == nullptr) continue;
    lora::lora_up_backward(at(dh, off * r), s.b_grad[e], at(dy, off * OUT), at(h, off * r), s.b[e], scale, rows[e], r,
                           OUT);
    lora::lora_down_backward(at(dx, off * IN), s.a_grad[e], at(dh, off * r), at(x, off * IN), s.a[e], nullptr, rows[e],
                             IN, r, none);
  }
}

}  // namespace mtrain::moe

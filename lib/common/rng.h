// Counter-based random numbers: a value is a pure function of (seed, stream,
// index), so dropout masks are regenerated in backward instead of stored,
// fused and unfused kernels draw identical masks, and a rerun with the same
// seed is bit-identical whatever the thread count.
#pragma once

#include <cstdint>

namespace mtrain {

// SplitMix64 finaliser: a strong 64-bit mixer.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A uniform float in [0, 1) for element `index` of stream `seed`.
inline float uniform01(uint64_t seed, uint64_t index) {
  return static_cast<float>(mix64(seed ^ mix64(index)) >> 40) * (1.0f / 16777216.0f);
}

// Token numbering of per-token dropout counters, independent of padding: the
// block's row n is global row g = row0 + n; with seq > 0 (rows per sequence
// in this batch) token t of sequence b gets b * pitch + t, pitch being the
// longest a sequence may be (--seq_length), so padding a batch (sequence
// parallelism rounds T up to a multiple of TP) never moves a real token's mask.
// Under context parallelism (cp > 1) a sequence's seq rows on this rank are
// two chunks of seq / 2 positions, chunks cp_rank and 2 cp - 1 - cp_rank of
// the whole sequence (parallel/ring_attention.h); t is then that chunk's
// position, so a CP rank draws its slice of the single device's masks.
struct TokenNumbering {
  int64_t row0 = 0;   // first row of the block in the (unsharded) batch
  int64_t seq = 0;    // rows per sequence in this batch (0: g itself is the number)
  int64_t pitch = 0;  // rows per sequence in the numbering
  int64_t cp = 1;     // context-parallel ranks (seq > 0 only)
  int64_t cp_rank = 0;
};
inline int64_t numbered_token(const TokenNumbering& t, int64_t n) {
  const int64_t g = t.row0 + n;
  if (t.seq <= 0) return g;
  int64_t pos = g % t.seq;
  if (t.cp > 1) {
    const int64_t c = t.seq / 2, half = pos / c;
    pos = (half == 0 ? t.cp_rank : 2 * t.cp - 1 - t.cp_rank) * c + pos % c;
  }
  return (g / t.seq) * t.pitch + pos;
}

// Derives a sub-stream seed, e.g. stream(seed, {iteration, microbatch, layer, site}).
inline uint64_t stream_seed(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0, uint64_t d = 0) {
  uint64_t s = mix64(seed);
  s = mix64(s ^ a);
  s = mix64(s ^ (b + 0x1234567ULL));
  s = mix64(s ^ (c + 0x89abcdeULL));
  return mix64(s ^ (d + 0xf0e1d2cULL));
}

// Sequential generator for initialisation and data shuffling (xoshiro-like
// quality via SplitMix64 stepping; deterministic across platforms).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64() { return mix64(state_++); }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
  // Standard normal (Box-Muller; one value per call keeps the stream simple).
  double normal();
  uint64_t state() const { return state_; }
  void set_state(uint64_t s) { state_ = s; }

 private:
  uint64_t state_;
};

}  // namespace mtrain

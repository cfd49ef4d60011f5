// Megatron GPTDataset index building (gpt_indices.h).
#include "data/gpt_indices.h"

#include <fmt/format.h>

#include <cmath>
#include <numeric>
#include <sstream>

#include "common/errors.h"

namespace mtrain::data {

std::array<double, 3> parse_split(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return ConfigError(fmt::format("--split {}: {}", text, why),
                       "give one to three comma-separated weights for train,valid,test, e.g. --split 969,30,1");
  };
  std::array<double, 3> s{0, 0, 0};
  std::stringstream in(text);
  std::string part;
  int n = 0;
  while (std::getline(in, part, ',')) {
    if (n == 3) throw bad("more than three parts");
    size_t used = 0;
    double v = -1;
    try {
      v = std::stod(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size() || !std::isfinite(v)) throw bad(fmt::format("'{}' is not a number", part));
    if (v < 0) throw bad(fmt::format("{} is negative", part));
    s[n++] = v;
  }
  const double sum = s[0] + s[1] + s[2];
  if (n == 0 || sum <= 0) throw bad("the weights must sum to more than 0");
  for (double& v : s) v /= sum;
  return s;
}

std::array<int64_t, 4> split_bounds(const std::array<double, 3>& split, int64_t n) {
  std::array<int64_t, 4> b{0, 0, 0, 0};
  for (int i = 0; i < 3; ++i) b[i + 1] = b[i] + static_cast<int64_t>(std::nearbyint(split[i] * static_cast<double>(n)));
  const int64_t excess = b[3] - n;  // rounding may overshoot or fall short
  for (int i = 1; i < 4; ++i) b[i] -= excess;
  return b;
}

int64_t gpt_num_epochs(int64_t tokens_per_epoch, int64_t seq_length, std::optional<int64_t> num_samples) {
  if (!num_samples) return 1;
  const int64_t requested = *num_samples * seq_length + 1;
  int64_t epochs = 1;
  for (int64_t tokens = tokens_per_epoch; tokens < requested; tokens += tokens_per_epoch) ++epochs;
  return epochs;
}

std::vector<int32_t> build_document_index(std::span<const int32_t> sequences, int64_t num_epochs, NumpyRandomState& rng,
                                          bool separate_final_epoch) {
  if (!separate_final_epoch || num_epochs == 1) {
    std::vector<int32_t> idx;
    idx.reserve(sequences.size() * num_epochs);
    for (int64_t e = 0; e < num_epochs; ++e) idx.insert(idx.end(), sequences.begin(), sequences.end());
    rng.shuffle(idx);
    return idx;
  }
  std::vector<int32_t> first = build_document_index(sequences, num_epochs - 1, rng, false);
  const std::vector<int32_t> last = build_document_index(sequences, 1, rng, false);
  first.insert(first.end(), last.begin(), last.end());
  return first;
}

std::vector<int64_t> build_sample_index(std::span<const int32_t> lengths, std::span<const int32_t> document_index,
                                        int64_t seq_length, int64_t num_epochs, int64_t tokens_per_epoch) {
  const int64_t num_samples = (num_epochs * tokens_per_epoch - 1) / seq_length;  // drop the last partial sample
  std::vector<int64_t> idx(2 * (num_samples + 1), 0);
  int64_t doc = 0, offset = 0;
  for (int64_t s = 1; s <= num_samples; ++s) {
    int64_t remaining = seq_length + 1;
    while (remaining != 0) {
      if (doc >= static_cast<int64_t>(document_index.size()))
        throw Error(ExitCode::kInternal, "sample index ran past the document index");
      const int64_t doc_length = lengths[document_index[doc]] - offset;
      remaining -= doc_length;
      if (remaining <= 0) {
        offset += remaining + doc_length - 1;  // the last token is the next sample's first
        remaining = 0;
      } else {
        ++doc;
        offset = 0;
      }
    }
    idx[2 * s] = doc;
    idx[2 * s + 1] = offset;
  }
  return idx;
}

std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size, NumpyRandomState& rng) {
  std::vector<int64_t> first(num_samples);
  std::iota(first.begin(), first.end(), int64_t{0});
  rng.shuffle(first);
  if (num_samples == total_size) return first;
  std::vector<int64_t> last(total_size - num_samples);
  std::iota(last.begin(), last.end(), num_samples);
  rng.shuffle(last);
  first.insert(first.end(), last.begin(), last.end());
  return first;
}

GptIndices build_gpt_indices(std::span<const int32_t> lengths, int64_t begin, int64_t end, int64_t seq_length,
                             std::optional<int64_t> num_samples, uint32_t seed, const std::string& what) {
  std::vector<int32_t> sequences;
  int64_t tokens_per_epoch = 0;
  for (int64_t i = begin; i < end; ++i) {
    sequences.push_back(static_cast<int32_t>(i));
    tokens_per_epoch += lengths[i];
  }
  if (tokens_per_epoch < seq_length + 1)
    throw DataError(fmt::format("{}: {} tokens in {} documents, fewer than one sample of --seq_length {} + 1", what,
                                tokens_per_epoch, end - begin, seq_length),
                    "use more data, a smaller --seq_length, or give this split a larger share in --split");
  const int64_t epochs = gpt_num_epochs(tokens_per_epoch, seq_length, num_samples);
  bool separate_final_epoch = false;
  int64_t samples_sans_final = 0;
  if (epochs > 1) {
    samples_sans_final = ((epochs - 1) * tokens_per_epoch - 1) / seq_length;
    const int64_t from_final = *num_samples - samples_sans_final;
    const int64_t per_epoch = (tokens_per_epoch - 1) / seq_length;
    separate_final_epoch = from_final < static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
  }
  NumpyRandomState rng(seed);
  GptIndices g;
  g.document_index = build_document_index(sequences, epochs, rng, separate_final_epoch);
  g.sample_index = build_sample_index(lengths, g.document_index, seq_length, epochs, tokens_per_epoch);
  const int64_t total = static_cast<int64_t>(g.sample_index.size()) / 2 - 1;
  g.shuffle_index = build_shuffle_index(separate_final_epoch ? samples_sans_final : total, total, rng);
  return g;
}

}  // namespace mtrain::data

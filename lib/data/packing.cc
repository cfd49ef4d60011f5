#include "data/packing.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "common/errors.h"

namespace mtrain::data {

std::vector<Sample> pack_samples(const std::vector<Sample>& samples, int64_t packing_length) {
  std::vector<int64_t> by_length(samples.size());
  std::iota(by_length.begin(), by_length.end(), int64_t{0});
  std::stable_sort(by_length.begin(), by_length.end(),
                   [&](int64_t a, int64_t b) { return samples[a].tokens.size() > samples[b].tokens.size(); });
  std::vector<std::vector<int64_t>> members;    // per row: sample indices in placement order
  std::multimap<int64_t, size_t> rows_by_room;  // room left -> row (equal room: insertion order)
  for (int64_t index : by_length) {
    const auto length = static_cast<int64_t>(samples[index].tokens.size());
    if (length > packing_length || length < 2) {
      throw DataError("sample " + std::to_string(index) + " has " + std::to_string(length) +
                          " tokens; packing needs 2.." + std::to_string(packing_length),
                      "samples are cut or dropped to --max_length before packing");
    }
    auto it = rows_by_room.lower_bound(length);
    size_t row = members.size();
    if (it != rows_by_room.end()) {
      row = it->second;
      rows_by_room.erase(it);
    } else {
      members.emplace_back();
    }
    members[row].push_back(index);
    const int64_t used = std::accumulate(members[row].begin(), members[row].end(), int64_t{0},
                                         [&](int64_t sum, int64_t i) { return sum + samples[i].tokens.size(); });
    if (used < packing_length) rows_by_room.emplace(packing_length - used, row);
  }
  std::vector<Sample> rows(members.size());
  for (size_t r = 0; r < members.size(); ++r) {
    for (int64_t index : members[r]) {
      const Sample& s = samples[index];
      rows[r].tokens.insert(rows[r].tokens.end(), s.tokens.begin(), s.tokens.end());
      rows[r].loss_mask.insert(rows[r].loss_mask.end(), s.loss_mask.begin(), s.loss_mask.end());
      rows[r].doc_lengths.push_back(static_cast<int32_t>(s.tokens.size()));
    }
  }
  return rows;
}

void fill_packed_row(const Sample& row, Batch& batch, int64_t b) {
  const auto base = static_cast<size_t>(b * batch.T);
  size_t offset = 0;
  int32_t doc = 0;
  for (int32_t n : row.doc_lengths) {
    for (int32_t t = 0; t < n; ++t) {
      const size_t at = base + offset + t;
      batch.tokens[at] = row.tokens[offset + t];
      batch.positions[at] = t;
      batch.doc_ids[at] = doc;
      if (t + 1 < n) {  // the sample's last token predicts nothing: target stays padding, weight 0
        batch.targets[at] = row.tokens[offset + t + 1];
        batch.loss_weights[at] = row.loss_mask[offset + t + 1] ? 1.0f : 0.0f;
      }
    }
    offset += static_cast<size_t>(n);
    ++doc;
  }
  // Padding is a document of its own, positions continuing from 0.
  for (size_t t = offset; t < static_cast<size_t>(batch.T); ++t) {
    batch.positions[base + t] = static_cast<int32_t>(t - offset);
    batch.doc_ids[base + t] = doc;
  }
}

}  // namespace mtrain::data

// Packing (swift --packing): several tokenized samples share one row of at
// most packing_length (= --max_length) tokens; a sample is never split.
// Rows are filled best-fit-decreasing (longest sample first, into the row
// with the least room that still fits it; ties: the earlier row), a
// deterministic function of the input order. In a batch a packed row's
// positions restart at 0 per sample and its doc_ids number the samples, so
// attention never crosses a sample boundary; every token of the row is an
// input, and each sample's last token has no target. Per sample the loss is
// therefore exactly that of the sample alone.
#pragma once

#include <cstdint>
#include <vector>

#include "data/loader.h"
#include "data/sample.h"

namespace mtrain::data {

// Packs `samples` (each at most packing_length tokens, at least 2) into rows
// with doc_lengths set. Throws DataError for a sample that does not fit.
std::vector<Sample> pack_samples(const std::vector<Sample>& samples, int64_t packing_length);

// Writes packed row `row` (doc_lengths non-empty) into row b of `batch`,
// whose buffers are sized (B, T) with T >= row.tokens.size() and pre-filled
// with padding.
void fill_packed_row(const Sample& row, Batch& batch, int64_t b);

}  // namespace mtrain::data

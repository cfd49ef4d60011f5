// --dry_run_lengths: the sample lengths an sft dry run batches when it has no
// dataset, as a histogram: inline "LENGTH:COUNT[,LENGTH:COUNT...]", or a file
// with one "LENGTH COUNT" pair a line (blank lines and '#' comments skipped;
// "LENGTH,COUNT" as a CSV row too). A mean and a maximum alone do not say how
// long the rows of a micro-batch are, so they are refused with that hint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mtrain::plan {

// Every sample's length, COUNT times each LENGTH in the order given.
// ConfigError naming the entry (or file:line) for a malformed pair, a length
// of 0 or above max_length, and more than 10 million samples in all.
std::vector<int64_t> parse_dry_run_lengths(const std::string& spec, int64_t max_length);

}  // namespace mtrain::plan

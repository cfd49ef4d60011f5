// JSONL -> .bin/.idx (preprocess.h).
#include "data/preprocess.h"

#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <memory>

#include "common/errors.h"
#include "data/indexed_dataset.h"
#include "data/jsonl.h"

namespace mtrain::data {

PreprocessResult preprocess_data(const PreprocessOptions& o, const Tokenizer& tok,
                                 const std::function<void(const std::string&)>& progress,
                                 const std::function<void(int64_t)>& documents_done) {
  if (o.json_keys.empty()) throw DataError("preprocess_data: no --json_keys", "e.g. --json_keys text");
  const int32_t eod = tok.special().eod;
  if (o.append_eod && eod < 0)
    throw DataError(fmt::format("{}: --append_eod but the tokenizer has no end-of-document token", tok.source()),
                    "use a tokenizer with <|endoftext|> or an eos token");
  const IndexedDType dtype = optimal_indexed_dtype(tok.vocab_size());
  PreprocessResult r;
  std::vector<std::unique_ptr<IndexedDatasetBuilder>> builders;
  for (const std::string& key : o.json_keys) {
    r.prefixes.push_back(fmt::format("{}_{}_document", o.output_prefix, key));
    builders.push_back(std::make_unique<IndexedDatasetBuilder>(indexed_bin_path(r.prefixes.back()), dtype));
  }
  const auto start = std::chrono::steady_clock::now();
  int64_t bytes = 0;
  std::vector<int32_t> ids;
  read_jsonl(o.input, [&](const nlohmann::json& record, const std::string& origin) {
    for (size_t k = 0; k < o.json_keys.size(); ++k) {
      const auto it = record.is_object() ? record.find(o.json_keys[k]) : record.end();
      if (it == record.end() || !it->is_string())
        throw DataError(fmt::format("{}: no string field '{}'", origin, o.json_keys[k]),
                        "every line must be a JSON object with the --json_keys fields as strings");
      const std::string& text = it->get_ref<const std::string&>();
      bytes += static_cast<int64_t>(text.size());
      ids.clear();
      tok.encode_append(text, ids, /*add_special_tokens=*/true);  // Megatron: tokenizer(text).input_ids
      if (!ids.empty() && o.append_eod) ids.push_back(eod);
      const int32_t length = static_cast<int32_t>(ids.size());
      // An empty text is an empty document (no sequence), as Megatron writes it.
      builders[k]->add_document(ids, ids.empty() ? std::span<const int32_t>() : std::span<const int32_t>(&length, 1));
      r.tokens += length;
    }
    ++r.documents;
    if (documents_done) documents_done(r.documents);
    if (progress && o.log_interval > 0 && r.documents % o.log_interval == 0) {
      const double s = std::max(1e-9, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      progress(fmt::format("Processed {} documents ({:.1f} docs/s, {:.2f} MB/s).", r.documents, r.documents / s,
                           static_cast<double>(bytes) / s / 1e6));
    }
  });
  for (size_t k = 0; k < builders.size(); ++k) builders[k]->finalize(indexed_idx_path(r.prefixes[k]));
  return r;
}

int64_t count_nonblank_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  int64_t lines = 0;
  bool content = false;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      const char c = buf[i];
      if (c == '\n') {
        lines += content;
        content = false;
      } else if (c != ' ' && c != '\t' && c != '\r') {
        content = true;
      }
    }
  }
  return lines + content;
}

}  // namespace mtrain::data

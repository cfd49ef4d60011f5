#include "data/pretrain.h"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "data/jsonl.h"

namespace mtrain::data {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> read_jsonl_documents(const std::string& path, const std::string& text_key) {
  std::vector<std::string> documents;
  read_jsonl(path, [&](const nlohmann::json& record, const std::string& origin) {
    if (!record.is_object()) throw DataError(origin + ": expected a JSON object, got " + record.type_name());
    auto it = record.find(text_key);
    if (it == record.end()) throw DataError(origin + ": missing field '" + text_key + "'");
    if (!it->is_string()) throw DataError(origin + ": field '" + text_key + "' must be a string");
    documents.push_back(it->get<std::string>());
  });
  return documents;
}

std::vector<std::string> read_text_documents(const std::string& path) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path)) {
    if (errno == 0) errno = ENOENT;
    throw_unreadable_dataset(path);
  }
  std::vector<std::string> documents;
  std::string line, document;
  bool in_document = false;
  const auto flush = [&] {
    if (in_document) documents.push_back(std::move(document));
    document.clear();
    in_document = false;
  };
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) {
      flush();
      continue;
    }
    if (in_document) document += '\n';
    document += line;
    in_document = true;
  }
  flush();
  return documents;
}

}  // namespace

std::vector<std::string> read_pretrain_documents(const std::string& path, const std::string& text_key) {
  std::vector<std::string> documents =
      ends_with(path, ".jsonl") ? read_jsonl_documents(path, text_key) : read_text_documents(path);
  if (documents.empty()) {
    throw DataError(
        path + ": the dataset has no documents (the file is empty)",
        "a .txt corpus holds documents separated by blank lines; a .jsonl one a '" + text_key + "' field per line");
  }
  return documents;
}

std::vector<int32_t> tokenize_documents(const std::vector<std::string>& documents, const Tokenizer& tokenizer,
                                        int32_t eod_id) {
  if (eod_id < 0 || eod_id >= tokenizer.vocab_size()) {
    throw DataError("tokenizer " + tokenizer.source() + " has no end-of-document token",
                    "pretraining needs <|endoftext|> or an eos_token in tokenizer_config.json");
  }
  std::vector<int32_t> stream;
  for (const auto& document : documents) {
    // add_special_tokens as Megatron's preprocess_data with a Hugging Face
    // tokenizer: Llama-family documents start with their BOS.
    tokenizer.encode_append(document, stream, /*add_special_tokens=*/true);
    stream.push_back(eod_id);
  }
  return stream;
}

std::vector<Sample> make_pretrain_samples(const std::vector<int32_t>& stream, int64_t seq_length,
                                          const std::string& source) {
  if (seq_length <= 0) throw DataError("seq_length must be positive, got " + std::to_string(seq_length));
  const int64_t length = static_cast<int64_t>(stream.size());
  const int64_t num_samples = length > 0 ? (length - 1) / seq_length : 0;
  if (num_samples == 0) {
    throw DataError(source + ": the corpus has " + std::to_string(length) + " tokens, fewer than one sample of " +
                        std::to_string(seq_length + 1) + " (seq_length + 1)",
                    "use a larger corpus or a smaller --seq_length / --max_length");
  }
  std::vector<Sample> samples(num_samples);
  for (int64_t i = 0; i < num_samples; ++i) {
    const auto begin = stream.begin() + i * seq_length;
    samples[i].tokens.assign(begin, begin + seq_length + 1);
    samples[i].loss_mask.assign(seq_length + 1, 1);
  }
  return samples;
}

PretrainDataset load_pretrain_dataset(const std::string& path, const Tokenizer& tokenizer, int64_t seq_length,
                                      const std::string& text_key) {
  const std::vector<std::string> documents = read_pretrain_documents(path, text_key);
  const std::vector<int32_t> stream = tokenize_documents(documents, tokenizer, tokenizer.special().eod);
  PretrainDataset dataset;
  dataset.num_documents = static_cast<int64_t>(documents.size());
  dataset.num_tokens = static_cast<int64_t>(stream.size());
  dataset.samples = make_pretrain_samples(stream, seq_length, path);
  return dataset;
}

}  // namespace mtrain::data

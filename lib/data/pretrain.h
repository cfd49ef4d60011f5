// Pretraining data (`mtrain pt`), Megatron GPTDataset style: documents are
// tokenized, each followed by the end-of-document token, and concatenated
// into one stream; sample i is the window stream[i*S .. i*S+S] (S+1 tokens,
// S = seq_length), so consecutive windows share one token and every token
// but the first of the stream is predicted exactly once. The tail that does
// not fill a window is dropped. All loss_mask entries are 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/sample.h"
#include "data/tokenizer.h"

namespace mtrain::data {

// .jsonl: the string field `text_key` of each line. Anything else: raw text,
// documents separated by blank lines (lines of a document joined with "\n").
// Throws DataError for an unreadable file, a bad line or no documents.
std::vector<std::string> read_pretrain_documents(const std::string& path, const std::string& text_key = "text");

// Token stream: each document's tokens, encoded with add_special_tokens as
// Megatron's preprocess_data does (Llama-family documents start with their
// BOS), followed by `eod_id`.
std::vector<int32_t> tokenize_documents(const std::vector<std::string>& documents, const Tokenizer& tokenizer,
                                        int32_t eod_id);

// Windows of seq_length + 1 tokens with stride seq_length. Throws DataError
// (naming `source`) if the stream is shorter than one window.
std::vector<Sample> make_pretrain_samples(const std::vector<int32_t>& stream, int64_t seq_length,
                                          const std::string& source);

struct PretrainDataset {
  std::vector<Sample> samples;
  int64_t num_documents = 0;
  int64_t num_tokens = 0;  // stream length including eod tokens
};
// read -> tokenize (eod = tokenizer.special().eod) -> windows.
PretrainDataset load_pretrain_dataset(const std::string& path, const Tokenizer& tokenizer, int64_t seq_length,
                                      const std::string& text_key = "text");

}  // namespace mtrain::data

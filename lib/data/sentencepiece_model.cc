// SentencePiece models: the libsentencepiece wrapper and
// Tokenizer::load_sentencepiece (same Tokenizer interface as tokenizer.json).
#include "data/sentencepiece_model.h"

#include <sentencepiece_processor.h>

#include <filesystem>

#include "common/errors.h"
#include "data/tokenizer_internal.h"

namespace mtrain::data {

std::shared_ptr<const SentencePieceModel> SentencePieceModel::load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw DataError("cannot open SentencePiece model '" + path + "'",
                    "pass the path of a tokenizer.model, or a --model directory that holds one");
  }
  std::shared_ptr<SentencePieceModel> model(new SentencePieceModel());
  model->path_ = path;
  model->processor_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = model->processor_->Load(path);
  if (!status.ok()) {
    throw DataError(path + ": not a SentencePiece model: " + status.ToString(),
                    "a tokenizer.model is a serialized sentencepiece ModelProto (e.g. Llama-2's)");
  }
  return model;
}

SentencePieceModel::~SentencePieceModel() = default;

int32_t SentencePieceModel::piece_count() const { return processor_->GetPieceSize(); }
const std::string& SentencePieceModel::piece(int32_t id) const { return processor_->IdToPiece(id); }
bool SentencePieceModel::is_special(int32_t id) const { return processor_->IsControl(id) || processor_->IsUnknown(id); }
int32_t SentencePieceModel::bos_id() const { return processor_->bos_id(); }
int32_t SentencePieceModel::eos_id() const { return processor_->eos_id(); }
int32_t SentencePieceModel::pad_id() const { return processor_->pad_id(); }

void SentencePieceModel::encode(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  if (!status.ok()) throw DataError(path_ + ": SentencePiece encode failed: " + status.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

std::string SentencePieceModel::decode(std::span<const int32_t> ids) const {
  const std::vector<int> as_int(ids.begin(), ids.end());
  std::string text;
  const auto status = processor_->Decode(as_int, &text);
  if (!status.ok()) throw DataError(path_ + ": SentencePiece decode failed: " + status.ToString());
  return text;
}

Tokenizer Tokenizer::load_sentencepiece(const std::string& model_path) {
  auto model = SentencePieceModel::load(model_path);
  BpeModelSpec spec;  // only the tables: no merges, no pre-tokenizer
  for (int32_t id = 0; id < model->piece_count(); ++id) {
    if (model->is_special(id)) {
      spec.added_tokens.push_back({.id = id, .content = model->piece(id), .special = true});
    } else {
      spec.vocab.emplace_back(model->piece(id), id);
    }
  }
  auto impl = Impl::build(std::move(spec), model_path);
  impl->spm = model;
  Tokenizer tokenizer(std::move(impl));
  SpecialTokenIds& special = tokenizer.special_;
  special = {};
  special.bos = model->bos_id();
  special.eos = model->eos_id();
  special.pad = model->pad_id() >= 0 ? model->pad_id() : special.eos;
  special.eod = special.eos;
  tokenizer.apply_config_file((std::filesystem::path(model_path).parent_path() / "tokenizer_config.json").string());
  return tokenizer;
}

}  // namespace mtrain::data

// Internal to lib/data: a SentencePiece model (`tokenizer.model`, Llama-2
// family) loaded through Debian's libsentencepiece. Tokenizer::load_sentencepiece
// turns its control/unknown pieces into special added tokens and its other
// pieces into the model vocabulary; encoding of the text between special tokens
// and decoding of runs of ordinary ids are delegated to this class. The
// sentencepiece headers stay inside sentencepiece_model.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace mtrain::data {

class SentencePieceModel {
 public:
  // Throws DataError("<path>: ...") when the file is missing or not a model.
  static std::shared_ptr<const SentencePieceModel> load(const std::string& path);
  ~SentencePieceModel();

  int32_t piece_count() const;
  const std::string& piece(int32_t id) const;  // e.g. "▁Hello", "<0x0A>", "</s>"
  bool is_special(int32_t id) const;           // control (<s>, </s>) or unknown (<unk>)
  int32_t bos_id() const;                      // -1 when the model has none
  int32_t eos_id() const;
  int32_t pad_id() const;

  // Text without special tokens -> ids (libsentencepiece adds the dummy prefix "▁").
  void encode(std::string_view text, std::vector<int32_t>& out) const;
  // Ordinary (non-special) ids -> text; byte pieces <0xNN> become their bytes.
  std::string decode(std::span<const int32_t> ids) const;

 private:
  SentencePieceModel() = default;
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

}  // namespace mtrain::data

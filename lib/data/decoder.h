// Internal to lib/data: the `decoder` of a tokenizer.json as Hugging Face
// defines it, a chain over the token strings of the ids (model tokens and
// added tokens alike): ByteLevel, Metaspace, ByteFallback, Fuse, Strip,
// Replace and Sequence. Without a decoder the tokens are joined with spaces,
// as the reference does. Other decoders are refused by name.
//
// One deliberate difference: ByteLevel and ByteFallback keep byte sequences
// that are not valid UTF-8 as raw bytes (the reference substitutes U+FFFD),
// so decoding a prefix of a sequence loses nothing.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/pretokenizer.h"

namespace mtrain::data {

class Decoder {
 public:
  Decoder() = default;  // joins tokens with " "
  static Decoder byte_level();
  // Parses a tokenizer.json `decoder` (null = none); throws DataError naming `where`.
  static Decoder from_json(const nlohmann::json& node, const std::string& where);

  std::string decode(std::vector<std::string> tokens) const;

  Decoder(Decoder&&) noexcept = default;
  Decoder& operator=(Decoder&&) noexcept = default;

 private:
  enum class Kind { kByteLevel, kMetaspace, kByteFallback, kFuse, kStrip, kReplace };
  struct Step {
    Kind kind;
    std::string content{};               // kMetaspace: replacement; kStrip: the character; kReplace: replacement
    bool prepend = true;                 // kMetaspace: prepend_scheme is not "never"
    size_t start = 0, stop = 0;          // kStrip
    std::vector<RegexSplitter> regex{};  // kReplace
  };
  void add_step(const nlohmann::json& node, const std::string& where);
  static void run_step(const Step& step, std::vector<std::string>& tokens);

  std::vector<Step> steps_;
  bool configured_ = false;  // false: no decoder in the file
};

}  // namespace mtrain::data

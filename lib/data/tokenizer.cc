// Tokenizer construction and decoding; encoding is in tokenizer_encode.cc,
// file I/O in tokenizer_json.cc.
#include <algorithm>
#include <queue>

#include "common/errors.h"
#include "data/byte_level.h"
#include "data/tokenizer_internal.h"

namespace mtrain::data {
namespace {

// "<0xAB>": SentencePiece's byte piece, used by byte_fallback.
std::string byte_piece(int b) {
  const char* digits = "0123456789ABCDEF";
  return std::string("<0x") + digits[b >> 4] + digits[b & 15] + ">";
}

}  // namespace

std::shared_ptr<Tokenizer::Impl> Tokenizer::Impl::build(BpeModelSpec spec, std::string source) {
  auto impl = std::make_shared<Impl>();
  impl->source = std::move(source);
  const std::string& src = impl->source;
  int32_t max_id = -1;
  for (const auto& [text, id] : spec.vocab) {
    if (id < 0) throw DataError(src + ": model.vocab: token '" + text + "' has negative id " + std::to_string(id));
    max_id = std::max(max_id, id);
  }
  for (const auto& t : spec.added_tokens) {
    if (t.id < 0) throw DataError(src + ": added_tokens: '" + t.content + "' has negative id " + std::to_string(t.id));
    max_id = std::max(max_id, t.id);
  }
  const size_t size = static_cast<size_t>(max_id + 1);
  impl->id_to_text.assign(size, "");
  impl->kinds.assign(size, Kind::kUnused);
  impl->special_flags.assign(size, 0);

  for (const auto& [text, id] : spec.vocab) {
    if (impl->kinds[id] != Kind::kUnused) {
      throw DataError(src + ": model.vocab: id " + std::to_string(id) + " is given to both '" + impl->id_to_text[id] +
                      "' and '" + text + "'");
    }
    if (!impl->model_ids.emplace(text, id).second) {
      throw DataError(src + ": model.vocab: token '" + text + "' appears twice");
    }
    impl->kinds[id] = Kind::kModel;
    impl->id_to_text[id] = text;
  }
  for (const auto& t : spec.added_tokens) {
    if (t.content.empty()) throw DataError(src + ": added_tokens: id " + std::to_string(t.id) + " has empty content");
    if (impl->kinds[t.id] == Kind::kAdded ||
        (impl->kinds[t.id] == Kind::kModel && impl->id_to_text[t.id] != t.content)) {
      throw DataError(src + ": added_tokens: '" + t.content + "' has id " + std::to_string(t.id) +
                      ", which is already given to '" + impl->id_to_text[t.id] + "'");
    }
    if (!impl->added_ids.emplace(t.content, t.id).second) {
      throw DataError(src + ": added_tokens: '" + t.content + "' appears twice");
    }
    impl->kinds[t.id] = Kind::kAdded;
    impl->id_to_text[t.id] = t.content;
    impl->special_flags[t.id] = t.special ? 1 : 0;
  }

  const auto model_id = [&](const std::string& token, size_t rank, const char* what) {
    auto it = impl->model_ids.find(token);
    if (it == impl->model_ids.end()) {
      throw DataError(src + ": model.merges[" + std::to_string(rank) + "]: " + what + " '" + token +
                      "' is not in model.vocab");
    }
    return it->second;
  };
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    const int32_t a = model_id(left, rank, "left token");
    const int32_t b = model_id(right, rank, "right token");
    // With continuing_subword_prefix ("##"), "a" + "##b" makes "ab".
    const std::string& prefix = spec.continuing_subword_prefix;
    const bool strip = !prefix.empty() && right.compare(0, prefix.size(), prefix) == 0;
    const int32_t merged = model_id(left + right.substr(strip ? prefix.size() : 0), rank, "merged token");
    impl->merge_rules.emplace(merge_key(a, b), MergeRule{static_cast<int32_t>(rank), merged});  // first rank wins
  }
  for (int b = 0; b < 256; ++b) {
    auto it = impl->model_ids.find(bytes_to_symbols(std::string(1, static_cast<char>(b))));
    impl->byte_ids[b] = it == impl->model_ids.end() ? -1 : it->second;
    auto piece = impl->model_ids.find(byte_piece(b));
    impl->byte_fallback_ids[b] = piece == impl->model_ids.end() ? -1 : piece->second;
  }
  if (!spec.unk_token.empty()) {
    auto it = impl->model_ids.find(spec.unk_token);
    if (it == impl->model_ids.end())
      throw DataError(src + ": model.unk_token '" + spec.unk_token + "' is not in vocab");
    impl->unk_id = it->second;
  }
  impl->pre_tokenizer =
      PreTokenizer::byte_level_splits(spec.split_patterns, spec.add_prefix_space, src + ": pre_tokenizer");
  impl->decoder = Decoder::byte_level();
  impl->spec = std::move(spec);
  impl->index_added_tokens();
  return impl;
}

void Tokenizer::Impl::AddedTokenSet::build(std::vector<AddedToken> list) {
  tokens = std::move(list);
  by_content.clear();
  for (auto& l : lengths) l.clear();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!by_content.emplace(tokens[i].content, i).second) continue;  // first of equal normalized contents wins
    std::vector<size_t>& l = lengths[static_cast<uint8_t>(tokens[i].content[0])];
    if (std::find(l.begin(), l.end(), tokens[i].content.size()) == l.end()) l.push_back(tokens[i].content.size());
  }
  for (auto& l : lengths) std::sort(l.rbegin(), l.rend());
  empty = tokens.empty();
}

void Tokenizer::Impl::index_added_tokens() {
  std::vector<AddedToken> raw, normalized;
  for (AddedToken t : spec.added_tokens) {
    if (t.normalized && !normalizer.empty()) {  // matched on the normalized text, as its normalized form
      t.content = normalizer.normalize(t.content);
      if (!t.content.empty()) normalized.push_back(std::move(t));
    } else {
      raw.push_back(std::move(t));
    }
  }
  added_raw.build(std::move(raw));
  added_normalized.build(std::move(normalized));
}

// --- Tokenizer -------------------------------------------------------------------

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl)
    : impl_(std::move(impl)),
      special_prefix_(impl_->post_processor.prefix),
      special_suffix_(impl_->post_processor.suffix) {
  resolve_default_special_tokens();
}
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_spec(BpeModelSpec spec, std::string source) {
  return Tokenizer(Impl::build(std::move(spec), std::move(source)));
}

void Tokenizer::resolve_default_special_tokens() {
  const auto first_of = [&](std::initializer_list<const char*> names) {
    for (const char* name : names) {
      if (auto id = find_token(name)) return *id;
    }
    return int32_t{-1};
  };
  special_ = {};
  special_.eos = first_of({"<|endoftext|>", "</s>", "<|end_of_text|>"});
  special_.pad = special_.eos;
  special_.eod = special_.eos;
  special_.im_start = first_of({"<|im_start|>"});
  special_.im_end = first_of({"<|im_end|>"});
}

void Tokenizer::set_special_tokens(const std::string& eos, const std::string& pad, const std::string& bos) {
  if (!eos.empty()) special_.eos = token_id(eos);
  if (!bos.empty()) special_.bos = token_id(bos);
  if (!pad.empty()) special_.pad = token_id(pad);
  if (special_.pad < 0) special_.pad = special_.eos;
  if (special_.eod < 0) special_.eod = special_.eos;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  encode_append(text, out, add_special_tokens);
  return out;
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out, bool add_special_tokens) const {
  if (add_special_tokens) out.insert(out.end(), special_prefix_.begin(), special_prefix_.end());
  impl_->encode_append(text, out);
  if (add_special_tokens) out.insert(out.end(), special_suffix_.begin(), special_suffix_.end());
}

std::string Tokenizer::Impl::decode_model_run(std::span<const int32_t> ids) const {
  return ids.empty() ? "" : spm->decode(ids);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  if (!impl_->spm) {  // Hugging Face: the decoder chain runs over all token strings
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size() || impl_->kinds[id] == Impl::Kind::kUnused) {
        throw DataError("token id " + std::to_string(id) + " is not in tokenizer " + impl_->source + " (vocab_size " +
                        std::to_string(vocab_size()) + ")");
      }
      if (!(skip_special_tokens && impl_->special_flags[id])) tokens.push_back(impl_->id_to_text[id]);
    }
    return impl_->decoder.decode(std::move(tokens));
  }
  std::string out;
  size_t run_start = 0;  // first id of the current run of model tokens
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size() || impl_->kinds[id] == Impl::Kind::kUnused) {
      throw DataError("token id " + std::to_string(id) + " is not in tokenizer " + impl_->source + " (vocab_size " +
                      std::to_string(vocab_size()) + ")");
    }
    if (impl_->kinds[id] == Impl::Kind::kModel) continue;
    out += impl_->decode_model_run(ids.subspan(run_start, i - run_start));
    run_start = i + 1;
    if (!(skip_special_tokens && impl_->special_flags[id])) out += impl_->id_to_text[id];
  }
  out += impl_->decode_model_run(ids.subspan(run_start));
  return out;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_to_text.size()); }

std::optional<int32_t> Tokenizer::find_token(std::string_view token) const {
  const std::string key(token);
  if (auto it = impl_->added_ids.find(key); it != impl_->added_ids.end()) return it->second;
  if (auto it = impl_->model_ids.find(key); it != impl_->model_ids.end()) return it->second;
  return std::nullopt;
}

int32_t Tokenizer::token_id(std::string_view token) const {
  if (auto id = find_token(token)) return *id;
  throw DataError("token '" + std::string(token) + "' is not in tokenizer " + impl_->source,
                  "check the special tokens in tokenizer.json added_tokens / tokenizer_config.json");
}

const std::string& Tokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw DataError("token id " + std::to_string(id) + " is not in tokenizer " + impl_->source);
  }
  return impl_->id_to_text[id];
}

bool Tokenizer::is_special(int32_t id) const { return id >= 0 && id < vocab_size() && impl_->special_flags[id]; }
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->spec.added_tokens; }
const SpecialTokenIds& Tokenizer::special() const { return special_; }
const std::string& Tokenizer::chat_template() const { return chat_template_; }
const std::string& Tokenizer::source() const { return impl_->source; }
bool Tokenizer::is_sentencepiece() const { return impl_->spm != nullptr; }
std::string Tokenizer::kind() const {
  if (is_sentencepiece()) return "SentencePiece";
  return impl_->pre_tokenizer.byte_level() ? "byte-level BPE" : "BPE";
}

}  // namespace mtrain::data

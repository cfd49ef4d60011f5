// Tokenizer construction, encoding (added tokens -> regex split -> byte-level
// BPE) and decoding. File I/O lives in tokenizer_json.cc.
#include <algorithm>
#include <queue>

#include "common/errors.h"
#include "data/byte_level.h"
#include "data/tokenizer_internal.h"

namespace mtrain::data {
namespace {

constexpr size_t kWordCacheLimit = 1 << 18;  // entries; the cache is cleared when full

std::string hex_byte(uint8_t b) {
  const char* digits = "0123456789abcdef";
  return std::string("0x") + digits[b >> 4] + digits[b & 15];
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
    impl->added_first_byte[static_cast<uint8_t>(t.content[0])] = true;
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
    const int32_t merged = model_id(left + right, rank, "merged token");
    impl->merge_rules.emplace(merge_key(a, b), MergeRule{static_cast<int32_t>(rank), merged});  // first rank wins
  }
  for (int b = 0; b < 256; ++b) {
    auto it = impl->model_ids.find(bytes_to_symbols(std::string(1, static_cast<char>(b))));
    impl->byte_ids[b] = it == impl->model_ids.end() ? -1 : it->second;
  }
  if (!spec.unk_token.empty()) {
    auto it = impl->model_ids.find(spec.unk_token);
    if (it == impl->model_ids.end())
      throw DataError(src + ": model.unk_token '" + spec.unk_token + "' is not in vocab");
    impl->unk_id = it->second;
  }
  impl->added_longest_first = spec.added_tokens;
  std::stable_sort(impl->added_longest_first.begin(), impl->added_longest_first.end(),
                   [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
  for (const auto& pattern : spec.split_patterns) impl->splitters.emplace_back(pattern, src + ": pre_tokenizer");
  impl->spec = std::move(spec);
  return impl;
}

namespace {

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Approximates Hugging Face's "word character" for single_word on raw bytes:
// ASCII letters, digits and '_', and any byte of a non-ASCII character.
bool is_word_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

}  // namespace

Tokenizer::Impl::AddedMatch Tokenizer::Impl::match_added(std::string_view text, size_t at, size_t floor) const {
  for (const auto& t : added_longest_first) {
    if (text.compare(at, t.content.size(), t.content) != 0) continue;
    size_t begin = at, end = at + t.content.size();
    if (t.single_word &&
        ((begin > 0 && is_word_byte(text[begin - 1])) || (end < text.size() && is_word_byte(text[end])))) {
      continue;
    }
    if (t.lstrip) {
      while (begin > floor && is_ascii_space(text[begin - 1])) --begin;
    }
    if (t.rstrip) {
      while (end < text.size() && is_ascii_space(text[end])) ++end;
    }
    return {&t, begin, end};
  }
  return {};
}

void Tokenizer::Impl::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  size_t segment_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (added_first_byte[static_cast<uint8_t>(text[i])]) {
      if (const AddedMatch m = match_added(text, i, segment_start); m.token != nullptr) {
        encode_ordinary(text.substr(segment_start, m.begin - segment_start), out);
        out.push_back(m.token->id);
        i = segment_start = m.end;
        continue;
      }
    }
    ++i;
  }
  encode_ordinary(text.substr(segment_start), out);
}

void Tokenizer::Impl::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (spm) {
    spm->encode(text, out);
    return;
  }
  std::string prefixed;
  if (spec.add_prefix_space && text.front() != ' ') {
    prefixed.reserve(text.size() + 1);
    prefixed.push_back(' ');
    prefixed.append(text);
    text = prefixed;
  }
  std::vector<std::string_view> pieces{text};
  std::vector<std::string_view> finer;
  for (const auto& splitter : splitters) {
    finer.clear();
    for (std::string_view p : pieces) splitter.split(p, finer);
    pieces.swap(finer);
  }
  for (std::string_view p : pieces) encode_piece(p, out);
}

void Tokenizer::Impl::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  const std::string key(piece);
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.ids.find(key);
    if (it != cache.ids.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> symbols;
  auto whole = spec.ignore_merges ? model_ids.find(bytes_to_symbols(piece)) : model_ids.end();
  if (whole != model_ids.end()) {
    symbols.push_back(whole->second);
  } else {
    symbols.reserve(piece.size());
    for (char c : piece) {
      const auto b = static_cast<uint8_t>(c);
      if (byte_ids[b] < 0 && unk_id < 0) {
        throw DataError(source + ": no vocabulary token for byte " + hex_byte(b) + " and no model.unk_token",
                        "a byte-level BPE vocabulary should contain all 256 byte symbols");
      }
      symbols.push_back(byte_ids[b] >= 0 ? byte_ids[b] : unk_id);
    }
    merge_symbols(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
  std::lock_guard<std::mutex> lock(cache.mutex);
  if (cache.ids.size() >= kWordCacheLimit) cache.ids.clear();
  cache.ids.emplace(key, std::move(symbols));
}

// Applies merges lowest rank first (leftmost first among equal ranks), as HF
// tokenizers does: a linked list of symbols plus a heap of candidate pairs,
// where candidates made stale by an earlier merge are skipped when popped.
void Tokenizer::Impl::merge_symbols(std::vector<int32_t>& symbols) const {
  const int32_t n = static_cast<int32_t>(symbols.size());
  if (n < 2) return;
  struct Node {
    int32_t id, prev, next;
  };
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, merged_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::vector<Node> nodes(n);
  for (int32_t i = 0; i < n; ++i) nodes[i] = {symbols[i], i - 1, i + 1 < n ? i + 1 : -1};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  const auto push_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    auto it = merge_rules.find(merge_key(nodes[left].id, nodes[right].id));
    if (it == merge_rules.end()) return;
    heap.push({it->second.rank, left, right, nodes[left].id, nodes[right].id, it->second.merged_id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i, i + 1);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Node& left = nodes[c.left];
    Node& right = nodes[c.right];
    if (left.id != c.left_id || right.id != c.right_id || left.next != c.right) continue;  // stale
    left.id = c.merged_id;
    left.next = right.next;
    if (right.next >= 0) nodes[right.next].prev = c.left;
    right.id = -1;
    push_pair(left.prev, c.left);
    push_pair(c.left, left.next);
  }
  symbols.clear();
  for (int32_t i = 0; i >= 0; i = nodes[i].next) symbols.push_back(nodes[i].id);
}

// --- Tokenizer -------------------------------------------------------------------

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) { resolve_default_special_tokens(); }
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

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  impl_->encode_append(text, out);
  return out;
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  impl_->encode_append(text, out);
}

std::string Tokenizer::Impl::decode_model_run(std::span<const int32_t> ids) const {
  if (ids.empty()) return "";
  if (spm) return spm->decode(ids);
  std::string symbols;  // consecutive model tokens are converted to bytes together
  for (int32_t id : ids) symbols += id_to_text[id];
  return symbols_to_bytes(symbols);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
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

}  // namespace mtrain::data

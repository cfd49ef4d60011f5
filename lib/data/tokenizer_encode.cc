// Encoding: added tokens are cut out of the raw text, the stretches between
// them are normalized (then tokens marked `normalized` are cut out of the
// normalized text), pre-tokenized and BPE-encoded piece by piece, as Hugging
// Face's tokenizers does. BPE results are memoised per piece.
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

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Approximates Hugging Face's "word character" for single_word on raw bytes:
// ASCII letters, digits and '_', and any byte of a non-ASCII character.
bool is_word_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 1;
}

}  // namespace

Tokenizer::Impl::AddedMatch Tokenizer::Impl::match_added(const AddedTokenSet& set, std::string_view text, size_t at,
                                                         size_t floor) {
  for (size_t length : set.lengths[static_cast<uint8_t>(text[at])]) {
    if (at + length > text.size()) continue;
    const auto it = set.by_content.find(text.substr(at, length));
    if (it == set.by_content.end()) continue;
    const AddedToken& t = set.tokens[it->second];
    size_t begin = at, end = at + length;
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

template <typename Gap>
void Tokenizer::Impl::split_added(const AddedTokenSet& set, std::string_view text, std::vector<int32_t>& out,
                                  Gap&& gap) const {
  size_t segment_start = 0;
  size_t i = 0;
  while (!set.empty && i < text.size()) {
    if (const AddedMatch m = match_added(set, text, i, segment_start); m.token != nullptr) {
      gap(text.substr(segment_start, m.begin - segment_start), segment_start == 0);
      out.push_back(m.token->id);
      i = segment_start = m.end;
      continue;
    }
    ++i;
  }
  gap(text.substr(segment_start), segment_start == 0);
}

void Tokenizer::Impl::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  split_added(added_raw, text, out, [&](std::string_view segment, bool at_start) {
    if (segment.empty()) return;
    if (spm || normalizer.empty()) {
      encode_ordinary(segment, at_start, out);
      return;
    }
    const std::string normalized = normalizer.normalize(segment);
    split_added(added_normalized, normalized, out, [&](std::string_view piece, bool piece_at_start) {
      encode_ordinary(piece, at_start && piece_at_start, out);
    });
  });
}

void Tokenizer::Impl::encode_ordinary(std::string_view text, bool at_text_start, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (spm) {
    spm->encode(text, out);
    return;
  }
  std::vector<std::string> pieces;
  pre_tokenizer.split(text, at_text_start, pieces);
  for (const std::string& p : pieces) encode_piece(p, out);
}

void Tokenizer::Impl::initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const {
  if (pre_tokenizer.byte_level()) {
    for (char c : piece) {
      const auto b = static_cast<uint8_t>(c);
      if (byte_ids[b] < 0 && unk_id < 0) {
        throw DataError(source + ": no vocabulary token for byte " + hex_byte(b) + " and no model.unk_token",
                        "a byte-level BPE vocabulary should contain all 256 byte symbols");
      }
      symbols.push_back(byte_ids[b] >= 0 ? byte_ids[b] : unk_id);
    }
    return;
  }
  const BpeModelSpec& s = spec;
  bool last_was_unk = false;
  std::string symbol;
  for (size_t pos = 0; pos < piece.size();) {
    const size_t len = std::min(utf8_length(static_cast<unsigned char>(piece[pos])), piece.size() - pos);
    symbol.assign(pos > 0 ? s.continuing_subword_prefix : "");
    symbol.append(piece.substr(pos, len));
    if (pos + len == piece.size()) symbol += s.end_of_word_suffix;
    if (auto it = model_ids.find(symbol); it != model_ids.end()) {
      symbols.push_back(it->second);
      last_was_unk = false;
    } else if (s.byte_fallback && std::all_of(piece.begin() + pos, piece.begin() + pos + len, [&](char c) {
                 return byte_fallback_ids[static_cast<uint8_t>(c)] >= 0;
               })) {
      for (size_t k = pos; k < pos + len; ++k) symbols.push_back(byte_fallback_ids[static_cast<uint8_t>(piece[k])]);
      last_was_unk = false;
    } else {
      if (unk_id < 0) {
        throw DataError(source + ": character '" + std::string(piece.substr(pos, len)) +
                            "' is not in the vocabulary and the model has no unk_token",
                        "the tokenizer cannot encode this text");
      }
      if (!(s.fuse_unk && last_was_unk)) symbols.push_back(unk_id);
      last_was_unk = true;
    }
    pos += len;
  }
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
  auto whole = model_ids.end();
  if (spec.ignore_merges) whole = model_ids.find(pre_tokenizer.byte_level() ? bytes_to_symbols(piece) : key);
  if (whole != model_ids.end()) {
    symbols.push_back(whole->second);
  } else {
    symbols.reserve(piece.size());
    initial_symbols(piece, symbols);
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

}  // namespace mtrain::data

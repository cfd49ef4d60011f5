// Deterministic byte-level BPE training (declared in tokenizer.h).
//
// Words are the GPT-2 pre-tokens of the corpus with their counts. Each step
// merges the most frequent adjacent symbol pair (ties: smaller left id, then
// smaller right id). Pair counts are kept incrementally: only the words that
// contain the merged pair are re-counted, and an ordered set serves as the
// priority queue, so a step costs O(touched words * word length * log pairs).
#include <algorithm>
#include <set>
#include <unordered_map>

#include "common/errors.h"
#include "data/byte_level.h"
#include "data/pretokenizer.h"
#include "data/tokenizer.h"
#include "data/tokenizer_internal.h"

namespace mtrain::data {
namespace {

struct Word {
  std::vector<int32_t> symbols;
  int64_t count = 0;
};

// Cuts special-token occurrences out of `text`, then counts GPT-2 pre-tokens.
void count_words(std::string_view text, const std::vector<std::string>& special_tokens, const RegexSplitter& splitter,
                 std::unordered_map<std::string, int64_t>& counts) {
  std::vector<std::string_view> pieces;
  while (!text.empty()) {
    size_t cut = text.size(), cut_len = 0;
    for (const auto& s : special_tokens) {
      const size_t at = text.find(s);
      if (at < cut || (at == cut && at != std::string_view::npos && s.size() > cut_len)) {
        cut = at;
        cut_len = s.size();
      }
    }
    pieces.clear();
    splitter.split(text.substr(0, cut), pieces);
    for (std::string_view p : pieces) ++counts[std::string(p)];
    text = cut == text.size() ? std::string_view() : text.substr(cut + cut_len);
  }
}

class PairCounter {
 public:
  // Adds `delta` occurrences of (a, b) found in word `w`.
  void add(int32_t a, int32_t b, int64_t delta, int32_t w) {
    const uint64_t key = merge_key(a, b);
    int64_t& count = counts_[key];
    if (count > 0) queue_.erase({-count, a, b});
    count += delta;
    if (count > 0) queue_.insert({-count, a, b});
    if (delta > 0) where_[key].push_back(w);
  }
  void add_word(const Word& word, int64_t sign, int32_t w) {
    for (size_t i = 0; i + 1 < word.symbols.size(); ++i)
      add(word.symbols[i], word.symbols[i + 1], sign * word.count, w);
  }
  bool empty() const { return queue_.empty(); }
  // (count, left, right) of the best pair.
  std::tuple<int64_t, int32_t, int32_t> best() const {
    const auto& [neg_count, a, b] = *queue_.begin();
    return {-neg_count, a, b};
  }
  // Indices of words that may contain (a, b), sorted and unique; forgets them.
  std::vector<int32_t> take_words(int32_t a, int32_t b) {
    auto node = where_.extract(merge_key(a, b));
    std::vector<int32_t> words = node.empty() ? std::vector<int32_t>() : std::move(node.mapped());
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    return words;
  }

 private:
  std::unordered_map<uint64_t, int64_t> counts_;
  std::set<std::tuple<int64_t, int32_t, int32_t>> queue_;  // (-count, left, right): best first
  std::unordered_map<uint64_t, std::vector<int32_t>> where_;
};

// Replaces every non-overlapping (a, b), left to right, by `merged`; false if none.
bool merge_in_word(std::vector<int32_t>& symbols, int32_t a, int32_t b, int32_t merged) {
  size_t out = 0;
  bool changed = false;
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (i + 1 < symbols.size() && symbols[i] == a && symbols[i + 1] == b) {
      symbols[out++] = merged;
      ++i;
      changed = true;
    } else {
      symbols[out++] = symbols[i];
    }
  }
  symbols.resize(out);
  return changed;
}

}  // namespace

Tokenizer train_bpe(const std::vector<std::string>& texts, int vocab_size,
                    const std::vector<std::string>& special_tokens, int min_frequency) {
  const int model_size = vocab_size - static_cast<int>(special_tokens.size());
  if (model_size < 256) {
    throw DataError(
        "train_bpe: vocab_size " + std::to_string(vocab_size) + " is too small",
        "it must hold the 256 byte symbols plus " + std::to_string(special_tokens.size()) + " special tokens");
  }
  for (const auto& s : special_tokens) {
    if (s.empty()) throw DataError("train_bpe: a special token is empty");
  }
  const RegexSplitter splitter(kGpt2SplitPattern, "train_bpe");
  std::unordered_map<std::string, int64_t> word_counts;
  for (const auto& text : texts) count_words(text, special_tokens, splitter, word_counts);

  // Base vocabulary: the 256 byte symbols in code point order (GPT-2's order).
  std::vector<std::pair<uint32_t, int>> alphabet;
  for (int b = 0; b < 256; ++b) alphabet.emplace_back(byte_to_codepoint(static_cast<uint8_t>(b)), b);
  std::sort(alphabet.begin(), alphabet.end());
  std::vector<std::string> id_to_symbols;
  std::array<int32_t, 256> byte_id{};
  for (const auto& [cp, b] : alphabet) {
    byte_id[b] = static_cast<int32_t>(id_to_symbols.size());
    id_to_symbols.push_back(bytes_to_symbols(std::string(1, static_cast<char>(b))));
  }
  std::unordered_map<std::string, int32_t> symbols_to_id;
  for (size_t i = 0; i < id_to_symbols.size(); ++i) symbols_to_id[id_to_symbols[i]] = static_cast<int32_t>(i);

  std::vector<std::pair<std::string, int64_t>> sorted_words(word_counts.begin(), word_counts.end());
  std::sort(sorted_words.begin(), sorted_words.end());
  std::vector<Word> words(sorted_words.size());
  PairCounter pairs;
  for (size_t w = 0; w < sorted_words.size(); ++w) {
    for (char c : sorted_words[w].first) words[w].symbols.push_back(byte_id[static_cast<uint8_t>(c)]);
    words[w].count = sorted_words[w].second;
    pairs.add_word(words[w], +1, static_cast<int32_t>(w));
  }

  BpeModelSpec spec;
  while (static_cast<int>(id_to_symbols.size()) < model_size && !pairs.empty()) {
    const auto [count, a, b] = pairs.best();
    if (count < min_frequency) break;
    const std::string merged_text = id_to_symbols[a] + id_to_symbols[b];
    auto [it, inserted] = symbols_to_id.emplace(merged_text, static_cast<int32_t>(id_to_symbols.size()));
    if (inserted) id_to_symbols.push_back(merged_text);
    spec.merges.emplace_back(id_to_symbols[a], id_to_symbols[b]);
    for (int32_t w : pairs.take_words(a, b)) {
      std::vector<int32_t> before = words[w].symbols;
      if (!merge_in_word(words[w].symbols, a, b, it->second)) continue;
      std::swap(before, words[w].symbols);
      pairs.add_word(words[w], -1, w);
      std::swap(before, words[w].symbols);
      pairs.add_word(words[w], +1, w);
    }
  }

  for (size_t id = 0; id < id_to_symbols.size(); ++id)
    spec.vocab.emplace_back(id_to_symbols[id], static_cast<int32_t>(id));
  for (size_t i = 0; i < special_tokens.size(); ++i) {
    spec.added_tokens.push_back({static_cast<int32_t>(id_to_symbols.size() + i), special_tokens[i], true});
  }
  spec.split_patterns = {kGpt2SplitPattern};
  return Tokenizer::from_spec(std::move(spec), "<trained byte-level BPE>");
}

}  // namespace mtrain::data

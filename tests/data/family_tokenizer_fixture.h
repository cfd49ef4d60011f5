// A tiny byte-level BPE tokenizer.json per model family (GPT-2, Qwen2,
// Llama-3) with one shared vocabulary whose ids are easy to derive by hand:
//
//   ids 0..255  the 256 byte symbols, id = byte value (so an unmerged byte of
//               "你" = E4 BD A0 has ids 228, 189, 160)
//   merges, in rank order (byte-level symbols: Ġ = space, Ċ = newline,
//   "你" = "ä½ł"):
//     r0 h e -> he 256      r4 Ġ h -> Ġh 260     r8 ä½ ł -> ä½ł ("你") 264
//     r1 l l -> ll 257      r5 3 4 -> 34 261     r9 Ċ Ċ -> ĊĊ 265
//     r2 he ll -> hell 258  r6 1 2 -> 12 262
//     r3 hell o -> hello 259 r7 ä ½ -> ä½ 263
//   266 "Ġhi": in the vocabulary but made by no merge (only Llama-3's
//       ignore_merges can produce it)
//   added: 267 <|endoftext|> (special), 268 <|im_start|> (special),
//          269 <tool> (not special), 270 <mask> (special, lstrip),
//          271 <r> (not special, rstrip), 272 <w> (not special, single_word)
//
// The pre_tokenizer and merges format are those each family's real file uses:
// GPT-2 ByteLevel(use_regex) and "a b" merges; Qwen2 NFC + Split(regex) +
// ByteLevel and "a b" merges; Llama-3 Split(regex) + ByteLevel, [a, b] merges
// and ignore_merges.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "data/byte_level.h"

namespace mtrain::data::testing {

enum class Family { kGpt2, kQwen2, kLlama3 };

// The Split regexes exactly as the families' tokenizer.json files give them.
inline const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

inline nlohmann::json family_tokenizer_json(Family family) {
  using nlohmann::json;
  const auto sym = [](const std::string& bytes) { return bytes_to_symbols(bytes); };
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[sym(std::string(1, static_cast<char>(b)))] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {{"h", "e"},
                                                                   {"l", "l"},
                                                                   {"he", "ll"},
                                                                   {"hell", "o"},
                                                                   {sym(" "), "h"},
                                                                   {"3", "4"},
                                                                   {"1", "2"},
                                                                   {sym("\xE4"), sym("\xBD")},
                                                                   {sym("\xE4\xBD"), sym("\xA0")},
                                                                   {sym("\n"), sym("\n")}};
  json merge_list = json::array();
  int32_t next_id = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = next_id++;
    if (family == Family::kLlama3) {
      merge_list.push_back({a, b});
    } else {
      merge_list.push_back(a + " " + b);
    }
  }
  vocab[sym(" hi")] = next_id++;  // 266
  const auto added = [](int id, const char* content, bool special, bool lstrip = false, bool rstrip = false,
                        bool single_word = false) {
    return json{{"id", id},         {"content", content},  {"single_word", single_word}, {"lstrip", lstrip},
                {"rstrip", rstrip}, {"normalized", false}, {"special", special}};
  };
  json j = {
      {"version", "1.0"},
      {"added_tokens",
       {added(267, "<|endoftext|>", true), added(268, "<|im_start|>", true), added(269, "<tool>", false),
        added(270, "<mask>", true, true), added(271, "<r>", false, false, true),
        added(272, "<w>", false, false, false, true)}},
      {"normalizer", nullptr},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}, {"ignore_merges", family == Family::kLlama3}}}};
  const auto split = [](const char* pattern) {
    return json{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}};
  };
  const json byte_level_no_regex = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  if (family == Family::kGpt2) {
    j["pre_tokenizer"] = {
        {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  } else {
    if (family == Family::kQwen2) j["normalizer"] = {{"type", "NFC"}};
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers", {split(family == Family::kQwen2 ? kQwen2Pattern : kLlama3Pattern), byte_level_no_regex}}};
  }
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  return j;
}

}  // namespace mtrain::data::testing

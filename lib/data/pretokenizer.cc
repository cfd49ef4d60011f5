#include "data/pretokenizer.h"

#include <oniguruma.h>

#include <algorithm>
#include <mutex>

#include "common/errors.h"

namespace mtrain::data {

struct RegexSplitter::Code {
  regex_t* regex = nullptr;
  ~Code() {
    if (regex != nullptr) onig_free(regex);
  }
};

namespace {

void initialize_oniguruma() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

struct Region {
  Region() : region(onig_region_new()) {}
  ~Region() { onig_region_free(region, 1); }
  OnigRegion* region;
};

// Length of the valid UTF-8 character at s[pos], or 0 if it is not one.
size_t utf8_char_length(std::string_view s, size_t pos) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = b(pos);
  size_t len = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 0;
  if (len == 0 || pos + len > s.size()) return 0;
  uint32_t cp = len == 1 ? lead : lead & (0x7F >> len);
  for (size_t i = 1; i < len; ++i) {
    if ((b(pos + i) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(pos + i) & 0x3F);
  }
  const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

}  // namespace

std::string regex_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    const bool plain = u >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!plain) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

RegexSplitter::RegexSplitter(const std::string& pattern, const std::string& where)
    : pattern_(pattern), code_(std::make_unique<Code>()) {
  initialize_oniguruma();
  OnigErrorInfo info;
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  const int rc =
      onig_new(&code_->regex, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
  if (rc != ONIG_NORMAL) {
    OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(message, rc, &info);
    code_->regex = nullptr;
    throw DataError(where + ": invalid pre-tokenizer regex: " + reinterpret_cast<const char*>(message),
                    "the pattern must be an Oniguruma regex, as Hugging Face tokenizers compiles it: " + pattern);
  }
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

// Successive leftmost matches of text[begin, end); after an empty match right
// where the previous match ended the search moves on one character (as the
// onig crate's find_iter does).
void RegexSplitter::search_valid_run(std::string_view text, size_t begin, size_t end,
                                     std::vector<SplitSpan>& spans) const {
  Region region;
  const auto* base = reinterpret_cast<const OnigUChar*>(text.data());
  size_t gap_start = begin, search_from = begin;
  bool have_previous = false;
  size_t previous_end = 0;
  while (search_from <= end) {
    onig_region_clear(region.region);
    const int rc = onig_search(code_->regex, base + begin, base + end, base + search_from, base + end, region.region,
                               ONIG_OPTION_NONE);
    if (rc == ONIG_MISMATCH) break;
    if (rc < 0) throw DataError("pre-tokenizer regex failed with Oniguruma error " + std::to_string(rc));
    const size_t s = begin + region.region->beg[0], e = begin + region.region->end[0];
    if (s == e && have_previous && previous_end == e) {
      if (search_from >= end) break;
      const size_t step = utf8_char_length(text, search_from);
      search_from += step == 0 ? 1 : step;
      continue;
    }
    if (s > gap_start) spans.push_back({gap_start, s, false});
    spans.push_back({s, e, true});
    gap_start = search_from = e;
    have_previous = true;
    previous_end = e;
  }
  if (gap_start < end) spans.push_back({gap_start, end, false});
}

void RegexSplitter::find_spans(std::string_view text, std::vector<SplitSpan>& spans) const {
  size_t run_start = 0, pos = 0;
  while (pos < text.size()) {
    const size_t len = utf8_char_length(text, pos);
    if (len > 0) {
      pos += len;
      continue;
    }
    if (pos > run_start) search_valid_run(text, run_start, pos, spans);
    spans.push_back({pos, pos + 1, false});  // an invalid byte is a gap piece of its own
    run_start = ++pos;
  }
  if (pos > run_start) search_valid_run(text, run_start, pos, spans);
}

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  std::vector<SplitSpan> spans;
  find_spans(text, spans);
  apply_split_behavior(text, spans, SplitBehavior::kIsolated, false, pieces);
}

std::string RegexSplitter::replace_all(std::string_view text, std::string_view content) const {
  std::vector<SplitSpan> spans;
  find_spans(text, spans);
  std::string out;
  out.reserve(text.size());
  for (const SplitSpan& s : spans) {
    if (s.is_match) {
      out += content;
    } else {
      out += text.substr(s.begin, s.end - s.begin);
    }
  }
  return out;
}

// Mirrors tokenizers' NormalizedString::split: each behaviour turns the spans
// into (range, drop) pairs; empty ranges never become pieces.
void apply_split_behavior(std::string_view text, const std::vector<SplitSpan>& spans, SplitBehavior behavior,
                          bool invert, std::vector<std::string_view>& pieces) {
  struct Out {
    size_t begin, end;
    bool drop;
  };
  std::vector<Out> out;
  out.reserve(spans.size());
  bool previous_match = false;
  const size_t n = spans.size();
  for (size_t k = 0; k < n; ++k) {
    // MergedWithNext walks the spans backwards; the others forwards.
    const bool backwards = behavior == SplitBehavior::kMergedWithNext;
    const SplitSpan& s = spans[backwards ? n - 1 - k : k];
    const bool is_match = s.is_match != invert;
    switch (behavior) {
      case SplitBehavior::kIsolated:
        out.push_back({s.begin, s.end, false});
        break;
      case SplitBehavior::kRemoved:
        out.push_back({s.begin, s.end, is_match});
        break;
      case SplitBehavior::kContiguous:
        if (is_match == previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        break;
      case SplitBehavior::kMergedWithPrevious:  // a match joins the gap before it
      case SplitBehavior::kMergedWithNext:      // (walking backwards: the gap after it)
        if (is_match && !previous_match && !out.empty()) {
          (backwards ? out.back().begin : out.back().end) = backwards ? s.begin : s.end;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        break;
    }
    previous_match = is_match;
  }
  if (behavior == SplitBehavior::kMergedWithNext) std::reverse(out.begin(), out.end());
  for (const Out& o : out) {
    if (!o.drop && o.end > o.begin) pieces.push_back(text.substr(o.begin, o.end - o.begin));
  }
}

}  // namespace mtrain::data

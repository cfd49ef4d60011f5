#include "data/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "common/errors.h"

namespace mtrain::data {

struct RegexSplitter::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int error_code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(error_code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

struct MatchData {
  explicit MatchData(const pcre2_code* code) : data(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(data); }
  pcre2_match_data* data;
};

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
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error_code,
                              &error_offset, nullptr);
  if (code_->code == nullptr) {
    throw DataError(where + ": invalid pre-tokenizer regex at offset " + std::to_string(error_offset) + ": " +
                        pcre2_message(error_code),
                    "the pattern must be a PCRE-compatible regex: " + pattern);
  }
  // JIT is an optimisation only: if unavailable, the interpreter is used.
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  const size_t n = text.size();
  if (n == 0) return;
  MatchData match(code_->code);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t piece_start = 0;  // start of the not-yet-emitted text
  size_t offset = 0;       // where the next search starts
  while (offset < n) {
    const int rc = pcre2_match(code_->code, subject, n, offset, 0, match.data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw DataError("pre-tokenizer regex failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {  // an empty match carries no piece; step past it
      offset = begin + 1;
      continue;
    }
    if (begin > piece_start) pieces.push_back(text.substr(piece_start, begin - piece_start));
    pieces.push_back(text.substr(begin, end - begin));
    piece_start = offset = end;
  }
  if (piece_start < n) pieces.push_back(text.substr(piece_start));
}

}  // namespace mtrain::data

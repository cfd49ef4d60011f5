#include "data/normalizer.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "common/errors.h"
#include "data/pre_tokenizer_steps.h"

namespace mtrain::data {
namespace {

using Json = nlohmann::json;

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

icu::UnicodeString to_utf16(std::string_view text) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  return u;
}

std::string to_utf8(const icu::UnicodeString& u) {
  std::string out;
  u.toUTF8String(out);
  return out;
}

const icu::Normalizer2& icu_normalizer(int kind) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = kind == 0   ? icu::Normalizer2::getNFCInstance(status)
                              : kind == 1 ? icu::Normalizer2::getNFDInstance(status)
                              : kind == 2 ? icu::Normalizer2::getNFKCInstance(status)
                                          : icu::Normalizer2::getNFKDInstance(status);
  if (U_FAILURE(status) || n == nullptr)
    throw DataError(std::string("ICU normalizer unavailable: ") + u_errorName(status));
  return *n;
}

std::string unicode_normalize(int kind, std::string text) {
  if (is_ascii(text)) return text;  // ASCII is invariant under all four forms
  const icu::Normalizer2& n = icu_normalizer(kind);
  UErrorCode status = U_ZERO_ERROR;
  const icu::UnicodeString u = to_utf16(text);
  if (n.isNormalized(u, status) && U_SUCCESS(status)) return text;
  status = U_ZERO_ERROR;
  const icu::UnicodeString out = n.normalize(u, status);
  if (U_FAILURE(status)) throw DataError(std::string("Unicode normalization failed: ") + u_errorName(status));
  return to_utf8(out);
}

std::string lowercase(std::string text) {
  if (is_ascii(text)) {
    for (char& c : text) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    return text;
  }
  icu::UnicodeString u = to_utf16(text);
  u.toLower(icu::Locale::getRoot());
  return to_utf8(u);
}

// Rust's trim_start/trim_end: White_Space characters.
std::string strip(const std::string& text, bool left, bool right) {
  const icu::UnicodeString u = to_utf16(text);
  int32_t begin = 0, end = u.length();
  while (left && begin < end && u_isUWhiteSpace(u.char32At(begin))) begin = u.moveIndex32(begin, 1);
  while (right && end > begin && u_isUWhiteSpace(u.char32At(u.moveIndex32(end, -1)))) end = u.moveIndex32(end, -1);
  return to_utf8(u.tempSubStringBetween(begin, end));
}

}  // namespace

Normalizer Normalizer::from_json(const Json& node, const std::string& where) {
  Normalizer n;
  if (!node.is_null()) n.add_step(node, where + ": normalizer");
  return n;
}

void Normalizer::add_step(const Json& node, const std::string& where) {
  const std::string type = node.is_object() ? node.value("type", std::string()) : "";
  if (type == "Sequence") {
    for (const auto& step : node.at("normalizers")) add_step(step, where);
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    const Kind kinds[] = {Kind::kNfc, Kind::kNfd, Kind::kNfkc, Kind::kNfkd};
    const int index = type == "NFC" ? 0 : type == "NFD" ? 1 : type == "NFKC" ? 2 : 3;
    steps_.push_back({.kind = kinds[index]});
  } else if (type == "Lowercase") {
    steps_.push_back({.kind = Kind::kLowercase});
  } else if (type == "Strip") {
    steps_.push_back(
        {.kind = Kind::kStrip, .left = node.value("strip_left", true), .right = node.value("strip_right", true)});
  } else if (type == "Prepend") {
    steps_.push_back({.kind = Kind::kPrepend, .content = node.at("prepend").get<std::string>()});
  } else if (type == "Replace") {
    Step step{.kind = Kind::kReplace, .content = node.at("content").get<std::string>()};
    step.regex.emplace_back(pattern_regex(node.at("pattern"), where), where + ": Replace");
    steps_.push_back(std::move(step));
  } else {
    throw DataError(where + " '" + type + "' is not supported",
                    "supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace, Prepend, Sequence");
  }
}

std::string Normalizer::run_step(const Step& step, std::string text) {
  switch (step.kind) {
    case Kind::kNfc:
      return unicode_normalize(0, std::move(text));
    case Kind::kNfd:
      return unicode_normalize(1, std::move(text));
    case Kind::kNfkc:
      return unicode_normalize(2, std::move(text));
    case Kind::kNfkd:
      return unicode_normalize(3, std::move(text));
    case Kind::kLowercase:
      return lowercase(std::move(text));
    case Kind::kStrip:
      return strip(text, step.left, step.right);
    case Kind::kPrepend:
      return text.empty() ? text : step.content + text;  // Hugging Face prepends to non-empty text only
    case Kind::kReplace:
      return step.regex.front().replace_all(text, step.content);
  }
  return text;
}

std::string Normalizer::normalize(std::string_view text) const {
  std::string out(text);
  for (const Step& step : steps_) out = run_step(step, std::move(out));
  return out;
}

}  // namespace mtrain::data

#include "data/decoder.h"

#include "common/errors.h"
#include "data/byte_level.h"
#include "data/pre_tokenizer_steps.h"

namespace mtrain::data {
namespace {

using Json = nlohmann::json;

// A token's bytes when every character is a byte-level symbol, else the
// token as it is (the reference's per-token fallback).
void append_byte_level(const std::string& token, std::string& out) {
  std::string bytes;
  for (size_t pos = 0; pos < token.size();) {
    const int b = codepoint_to_byte(next_codepoint(token, pos));
    if (b < 0) {
      out += token;
      return;
    }
    bytes.push_back(static_cast<char>(b));
  }
  out += bytes;
}

// "<0xAB>" -> 0xAB, or -1.
int byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = t[i];
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                         : -1;
    if (d < 0) return -1;
    value = value * 16 + d;
  }
  return value;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
}

}  // namespace

Decoder Decoder::byte_level() {
  Decoder d;
  d.steps_.push_back({.kind = Kind::kByteLevel});
  d.configured_ = true;
  return d;
}

Decoder Decoder::from_json(const Json& node, const std::string& where) {
  Decoder d;
  if (node.is_null()) return d;
  d.add_step(node, where + ": decoder");
  d.configured_ = true;
  return d;
}

void Decoder::add_step(const Json& node, const std::string& where) {
  const std::string type = node.is_object() ? node.value("type", std::string()) : "";
  if (type == "Sequence") {
    for (const auto& step : node.at("decoders")) add_step(step, where);
  } else if (type == "ByteLevel" || type == "ByteFallback" || type == "Fuse") {
    steps_.push_back({.kind = type == "ByteLevel" ? Kind::kByteLevel
                              : type == "Fuse"    ? Kind::kFuse
                                                  : Kind::kByteFallback});
  } else if (type == "Metaspace") {
    const std::string scheme = node.value("prepend_scheme", node.value("add_prefix_space", true) ? "always" : "never");
    steps_.push_back({.kind = Kind::kMetaspace,
                      .content = node.value("replacement", std::string("\u2581")),
                      .prepend = scheme != "never"});
  } else if (type == "Strip") {
    steps_.push_back({.kind = Kind::kStrip,
                      .content = node.at("content").get<std::string>(),
                      .start = node.value("start", size_t{0}),
                      .stop = node.value("stop", size_t{0})});
  } else if (type == "Replace") {
    Step step{.kind = Kind::kReplace, .content = node.at("content").get<std::string>()};
    step.regex.emplace_back(pattern_regex(node.at("pattern"), where), where + ": Replace");
    steps_.push_back(std::move(step));
  } else {
    throw DataError(where + " '" + type + "' is not supported",
                    "supported: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence");
  }
}

void Decoder::run_step(const Step& step, std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  switch (step.kind) {
    case Kind::kByteLevel: {
      std::string joined;
      for (const auto& t : tokens) append_byte_level(t, joined);
      out.push_back(std::move(joined));
      break;
    }
    case Kind::kFuse: {
      std::string joined;
      for (const auto& t : tokens) joined += t;
      out.push_back(std::move(joined));
      break;
    }
    case Kind::kByteFallback: {
      std::string bytes;  // a run of <0xNN> tokens becomes one token of its bytes
      for (auto& t : tokens) {
        const int b = byte_token(t);
        if (b >= 0) {
          bytes.push_back(static_cast<char>(b));
          continue;
        }
        if (!bytes.empty()) out.push_back(std::move(bytes));
        bytes.clear();
        out.push_back(std::move(t));
      }
      if (!bytes.empty()) out.push_back(std::move(bytes));
      break;
    }
    case Kind::kMetaspace:
      for (size_t i = 0; i < tokens.size(); ++i) {
        std::string t = std::move(tokens[i]);
        replace_all(t, step.content, " ");
        if (i == 0 && step.prepend && !t.empty() && t.front() == ' ') t.erase(0, 1);
        out.push_back(std::move(t));
      }
      break;
    case Kind::kStrip:
      for (auto& t : tokens) {
        size_t begin = 0, end = t.size();
        const size_t w = step.content.size();
        for (size_t k = 0; k < step.start && end - begin >= w && t.compare(begin, w, step.content) == 0; ++k)
          begin += w;
        for (size_t k = 0; k < step.stop && end - begin >= w && t.compare(end - w, w, step.content) == 0; ++k) end -= w;
        out.push_back(t.substr(begin, end - begin));
      }
      break;
    case Kind::kReplace:
      for (const auto& t : tokens) out.push_back(step.regex.front().replace_all(t, step.content));
      break;
  }
  tokens.swap(out);
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  std::string text;
  if (!configured_) {
    for (size_t i = 0; i < tokens.size(); ++i) text += (i == 0 ? "" : " ") + tokens[i];
    return text;
  }
  for (const Step& step : steps_) run_step(step, tokens);
  for (const auto& t : tokens) text += t;
  return text;
}

}  // namespace mtrain::data

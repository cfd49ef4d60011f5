#include "config/moe_layer_freq.h"

#include <fmt/format.h>

#include <cctype>

#include "common/errors.h"

namespace mtrain::config {

namespace {

// Recursive descent over: expr := term ('+' term)*;
// term := atom ('*' int)* | int '*' atom; atom := '[' int (',' int)* ']' | '(' expr ')' | int.
// A bare int inside an expression is a number used as a repeat count.
class PatternParser {
 public:
  explicit PatternParser(const std::string& s) : s_(s) {}

  std::vector<int> parse() {
    std::vector<int> v = expr();
    if (pos_ != s_.size()) fail("unexpected '" + std::string(1, s_[pos_]) + "'");
    return v;
  }

 private:
  const std::string& s_;
  size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw ConfigError(fmt::format("Invalid pattern: {} ({} at character {})", s_, what, pos_ + 1),
                      "--moe_layer_freq takes an integer N or a list expression like \"([1]*3+[0]*1)*2\"");
  }
  bool eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }
  bool at_digit() const { return pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_])); }
  long number() {
    if (!at_digit()) fail("expected a number");
    long n = 0;
    while (at_digit() && n < 1000000) n = n * 10 + (s_[pos_++] - '0');
    return n;
  }
  static std::vector<int> repeat(const std::vector<int>& v, long n) {
    std::vector<int> out;
    for (long i = 0; i < n; ++i) out.insert(out.end(), v.begin(), v.end());
    return out;
  }
  std::vector<int> atom() {
    if (eat('[')) {
      std::vector<int> v;
      if (eat(']')) return v;
      do v.push_back(static_cast<int>(number()));
      while (eat(','));
      if (!eat(']')) fail("expected ']'");
      return v;
    }
    if (eat('(')) {
      std::vector<int> v = expr();
      if (!eat(')')) fail("expected ')'");
      return v;
    }
    fail("expected '[' or '('");
  }
  std::vector<int> term() {
    std::vector<int> v;
    if (at_digit()) {  // N * [..]
      const long n = number();
      if (!eat('*')) fail("a number must multiply a list");
      v = repeat(atom(), n);
    } else {
      v = atom();
    }
    while (eat('*')) v = repeat(v, number());
    return v;
  }
  std::vector<int> expr() {
    std::vector<int> v = term();
    while (eat('+')) {
      std::vector<int> t = term();
      v.insert(v.end(), t.begin(), t.end());
    }
    return v;
  }
};

}  // namespace

std::vector<int> moe_layer_pattern(const std::string& freq, int num_layers) {
  std::vector<int> pattern;
  if (freq.find('[') == std::string::npos) {
    int n = 0;
    try {
      size_t used = 0;
      n = std::stoi(freq, &used);
      if (used != freq.size()) n = 0;
    } catch (const std::exception&) {
      n = 0;
    }
    if (n < 1)
      throw ConfigError(fmt::format("--moe_layer_freq {}: expected an integer >= 1 or a list pattern", freq),
                        "e.g. --moe_layer_freq 2 (every other layer MoE) or \"([0]+[1]*3)\"");
    for (int i = 0; i < num_layers; ++i) pattern.push_back(i % n == 0 ? 1 : 0);
    return pattern;
  }
  for (char c : freq)
    if (!std::isdigit(static_cast<unsigned char>(c)) && std::string(",[]()+*").find(c) == std::string::npos)
      throw ConfigError(fmt::format("Invalid pattern: {}", freq),
                        "only digits and , [ ] ( ) + * are allowed (Megatron's rule)");
  pattern = PatternParser(freq).parse();
  for (int v : pattern)
    if (v != 0 && v != 1)
      throw ConfigError(
          fmt::format("--moe_layer_freq {}: pattern values must be 0 (dense) or 1 (MoE), got {}", freq, v));
  if (static_cast<int>(pattern.size()) != num_layers)
    throw ConfigError(fmt::format("Invalid length of moe_layer_pattern: {}, expected {}, current moe layer pattern: {}",
                                  pattern.size(), num_layers, freq),
                      "give one 0/1 per layer (--num_layers)");
  return pattern;
}

}  // namespace mtrain::config

#include "config/int_list.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "common/errors.h"

namespace mtrain::config {

namespace {

int64_t parse_number(const std::string& text, const std::string& item, const char* flag) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end)
    throw ConfigError(fmt::format("--{}: '{}' is not a number or a range a-b", flag, item),
                      fmt::format("e.g. --{} 1 3-5", flag));
  return v;
}

}  // namespace

std::vector<int64_t> parse_int_list(const std::vector<std::string>& items, const char* flag) {
  std::vector<int64_t> out;
  for (const std::string& item : items) {
    size_t start = 0;
    while (start <= item.size()) {
      const size_t comma = std::min(item.find(',', start), item.size());
      const std::string part = item.substr(start, comma - start);
      start = comma + 1;
      if (part.empty()) continue;
      const size_t dash = part.find('-', 1);
      if (dash == std::string::npos) {
        out.push_back(parse_number(part, item, flag));
        continue;
      }
      const int64_t lo = parse_number(part.substr(0, dash), item, flag);
      const int64_t hi = parse_number(part.substr(dash + 1), item, flag);
      if (hi < lo) throw ConfigError(fmt::format("--{}: range '{}' runs backwards", flag, part));
      if (hi - lo > 1'000'000) throw ConfigError(fmt::format("--{}: range '{}' is too long", flag, part));
      for (int64_t v = lo; v <= hi; ++v) out.push_back(v);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace mtrain::config

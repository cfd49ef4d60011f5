// Converting raw values into Args fields, and Args fields back into text.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>

#include "config/flag_table_parts.h"
#include "config/flags.h"

namespace mtrain::config {

namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

std::optional<int> parse_int(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  long long v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) return std::nullopt;
  return static_cast<int>(v);
}

std::optional<double> parse_double(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::string quoted_choices(const FlagSpec& spec) {
  std::string out;
  for (auto c : spec.choices) out += fmt::format("{}'{}'", out.empty() ? "" : ", ", c);
  return out;
}

// "" if `v` is allowed by the flag's choices.
std::string check_choice(const FlagSpec& spec, const std::string& v) {
  if (spec.choices.empty() || std::find(spec.choices.begin(), spec.choices.end(), v) != spec.choices.end()) {
    return "";
  }
  std::string msg = fmt::format("invalid choice: '{}' (choose from {})", v, quoted_choices(spec));
  std::vector<std::string> choices(spec.choices.begin(), spec.choices.end());
  for (auto c : spec.choices) {
    if (lower(c) == lower(v)) return msg + fmt::format("; did you mean '{}'?", c);
  }
  if (auto s = suggest_name(v, choices); !s.empty()) msg += fmt::format("; did you mean '{}'?", s);
  return msg;
}

// The single scalar of `value`, or an error.
std::string single_item(const RawValue& value, const char* expected, std::string* out) {
  if (value.bare) return fmt::format("missing value: expected {}", expected);
  if (value.items.size() != 1) {
    return fmt::format("got {} values but expected a single value ({})", value.items.size(), expected);
  }
  *out = value.items.front();
  return "";
}

// Converts a scalar for a field of type T (T is bool, int, double or std::string).
template <class T>
std::string convert(const FlagSpec& spec, bool negated, const RawValue& value, T* out) {
  if constexpr (std::is_same_v<T, bool>) {
    bool v = true;
    if (!value.bare) {
      std::string s;
      if (auto e = single_item(value, "a boolean", &s); !e.empty()) return e;
      auto b = parse_truthy(s);
      if (!b) return truthy_error(s);
      v = *b;
    }
    *out = negated ? !v : v;
    return "";
  } else {
    std::string s;
    if constexpr (std::is_same_v<T, int>) {
      if (auto e = single_item(value, "an integer", &s); !e.empty()) return e;
      auto v = parse_int(s);
      if (!v) return fmt::format("got '{}' but expected an integer", s);
      *out = *v;
    } else if constexpr (std::is_same_v<T, double>) {
      if (auto e = single_item(value, "a number", &s); !e.empty()) return e;
      auto v = parse_double(s);
      if (!v) return fmt::format("got '{}' but expected a number", s);
      *out = *v;
    } else {
      if (auto e = single_item(value, spec.choices.empty() ? "a string" : "one of the choices", &s); !e.empty()) {
        return e;
      }
      if (auto e = check_choice(spec, s); !e.empty()) return e;
      *out = s;
    }
    return "";
  }
}

template <class T>
std::string text_of(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v;
  } else {
    return fmt::format("{}", v);
  }
}

}  // namespace

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::optional<bool> parse_truthy(std::string_view s) {
  std::string v = lower(s);
  if (v == "yes" || v == "true" || v == "t" || v == "y" || v == "1") return true;
  if (v == "no" || v == "false" || v == "f" || v == "n" || v == "0") return false;
  return std::nullopt;
}

std::string truthy_error(std::string_view got) {
  return fmt::format(
      "Truthy value expected: got {} but expected one of yes/no, true/false, t/f, y/n, 1/0 (case insensitive).", got);
}

bool flag_is_bool(const FlagSpec& spec) { return std::holds_alternative<bool Args::*>(spec.field); }
bool flag_is_list(const FlagSpec& spec) { return std::holds_alternative<std::vector<std::string> Args::*>(spec.field); }

std::string apply_flag(const FlagSpec& spec, bool negated, const RawValue& value, Args& args) {
  if (spec.custom != nullptr) return spec.custom(spec, args, value);
  return std::visit(Overloaded{
                        [&](std::vector<std::string> Args::*p) -> std::string {
                          if (value.bare) return "missing value: expected one or more values";
                          if (value.null) {
                            (args.*p).clear();
                          } else {
                            args.*p = value.items;
                          }
                          return "";
                        },
                        [&]<class T>(std::optional<T> Args::*p) -> std::string {
                          if (value.null) {
                            (args.*p).reset();
                            return "";
                          }
                          T v{};
                          auto e = convert(spec, negated, value, &v);
                          if (e.empty()) args.*p = v;
                          return e;
                        },
                        [&]<class T>(T Args::*p) -> std::string {
                          if (value.null) return "null is not allowed here; give a value";
                          return convert(spec, negated, value, &(args.*p));
                        },
                    },
                    spec.field);
}

std::string flag_type_text(const FlagSpec& spec) {
  if (!spec.choices.empty()) {
    std::string out = "{";
    for (auto c : spec.choices) out += fmt::format("{}{}", out.size() > 1 ? "," : "", c);
    return out + "}";
  }
  return std::visit(Overloaded{
                        [](bool Args::*) -> std::string { return "[BOOL]"; },
                        [](int Args::*) -> std::string { return "INT"; },
                        [](std::optional<int> Args::*) -> std::string { return "INT"; },
                        [](double Args::*) -> std::string { return "FLOAT"; },
                        [](std::optional<double> Args::*) -> std::string { return "FLOAT"; },
                        [](std::vector<std::string> Args::*) -> std::string { return "VALUE [VALUE ...]"; },
                        [](auto) -> std::string { return "STR"; },
                    },
                    spec.field);
}

std::string flag_value_text(const FlagSpec& spec, const Args& args) {
  return std::visit(
      Overloaded{
          [&](std::vector<std::string> Args::*p) -> std::string {
            return fmt::format("[{}]", fmt::join(args.*p, ", "));
          },
          [&]<class T>(std::optional<T> Args::*p) -> std::string { return (args.*p) ? text_of(*(args.*p)) : "None"; },
          [&]<class T>(T Args::*p) -> std::string { return text_of(args.*p); },
      },
      spec.field);
}

std::string flag_default_text(const FlagSpec& spec) {
  if (!spec.default_text.empty()) return std::string(spec.default_text);
  return flag_value_text(spec, Args{});
}

bool flag_has_default_value(const FlagSpec& spec, const Args& args) {
  static const Args defaults;
  return std::visit([&](auto p) { return args.*p == defaults.*p; }, spec.field);
}

namespace detail {

std::string set_loss_scale(const FlagSpec& spec, Args& args, const RawValue& value) {
  if (value.null) {
    args.loss_scale.reset();
    return "";
  }
  std::string s;
  if (auto e = single_item(value, "default, all, last_round or a number", &s); !e.empty()) return e;
  if (auto number = parse_double(s)) {
    args.static_loss_scale = *number;  // Megatron-LM --loss-scale: static fp16 loss scale
    return "";
  }
  if (auto e = check_choice(spec, s); !e.empty()) return e + " or a number (static fp16 loss scale)";
  args.loss_scale = s;
  return "";
}

}  // namespace detail

}  // namespace mtrain::config

// The flag table: the single source of truth for every setting's canonical
// name, aliases (swift v3/v4, Megatron-LM, MindSpeed spellings), negations
// (--no_x), type, choices, default shown in help, help text, group and the
// Args field it sets. The command-line parser, YAML keys, args.json,
// did-you-mean, --help and docs/FLAGS.md are all generated from it.
//
// Names are stored with underscores; callers normalize '-' to '_' first.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/args.h"

namespace mtrain::config {

enum class FlagGroup {
  kModel,
  kParallel,
  kFusions,
  kTraining,
  kLora,
  kPrecision,
  kData,
  kLogging,
  kCheckpoint,
  kDebug,
  kProfile
};
const char* flag_group_name(FlagGroup g);
inline constexpr FlagGroup kAllFlagGroups[] = {FlagGroup::kModel,    FlagGroup::kParallel, FlagGroup::kFusions,
                                               FlagGroup::kTraining, FlagGroup::kLora,     FlagGroup::kPrecision,
                                               FlagGroup::kData,     FlagGroup::kLogging,  FlagGroup::kCheckpoint,
                                               FlagGroup::kDebug,    FlagGroup::kProfile};

// The Args member a flag sets. Its alternative gives the flag's type.
using FieldRef =
    std::variant<bool Args::*, int Args::*, double Args::*, std::string Args::*, std::vector<std::string> Args::*,
                 std::optional<int> Args::*, std::optional<double> Args::*, std::optional<std::string> Args::*>;

// A value as given by a source, before conversion: the command line gives
// strings (a bare boolean flag gives none), YAML gives scalars, sequences or null.
struct RawValue {
  std::vector<std::string> items;
  bool bare = false;  // `--flag` without a value
  bool null = false;  // YAML null / JSON null: reset an optional to None
};

struct FlagSpec;
// Optional special conversion (e.g. loss_scale's dual meaning). Returns an
// error description ("" on success), like apply_flag().
using CustomSetter = std::string (*)(const FlagSpec&, Args&, const RawValue&);

struct FlagSpec {
  std::string_view name;  // canonical, underscores
  FieldRef field;
  FlagGroup group;
  std::string_view help;
  std::vector<std::string_view> aliases = {};    // same meaning
  std::vector<std::string_view> negations = {};  // bool only: `--no_x` / `--no_x true` set false
  std::vector<std::string_view> choices = {};    // empty = any value of the type
  std::string_view default_text = {};            // shown instead of the Args{} value when set
  CustomSetter custom = nullptr;
  // A configs/ subdirectory ("models", "devices"): the help lists the names of its
  // YAML files as read at run time, so the list cannot drift from the files.
  std::string_view lists = {};
};

// All flags, in help order.
const std::vector<FlagSpec>& flag_table();

// What `mtrain <command> --help` and docs/FLAGS.md list first (model, data,
// batch, iterations, lr, save/load, tuner), in this order.
const std::vector<std::string_view>& common_flag_names();
struct FlagSection {
  std::string title;  // "Common flags", then flag_group_name()
  std::vector<const FlagSpec*> flags;
};
// The common flags, then each group of kAllFlagGroups without them: every
// flag in exactly one section.
std::vector<FlagSection> flag_sections();

// A name as typed (after '-'→'_' normalization) resolved to its flag.
struct FlagMatch {
  const FlagSpec* spec = nullptr;
  bool negated = false;  // matched a negation: the boolean value is inverted
};
std::optional<FlagMatch> find_flag(std::string_view name);

// Every accepted name (canonical, aliases, negations incl. the automatic
// `no_<name>` of booleans that default to true), for registration and did-you-mean.
std::vector<std::string> all_flag_names();
// Negations of a flag: explicit ones plus `no_<name>` for default-true booleans.
std::vector<std::string> negations_of(const FlagSpec& spec);

// Closest known name within a small edit distance, or "" (did-you-mean).
std::string suggest_name(std::string_view unknown, const std::vector<std::string>& candidates);
// s in ASCII lower case: names and values matched case-insensitively.
std::string lower(std::string_view s);

// "--x_y" -> "x_y"; "x-y" -> "x_y".
std::string normalize_flag_name(std::string_view name);
// "x_y" -> "--x-y" (Megatron-LM spelling).
std::string hyphen_spelling(std::string_view name);

// Converts `value` and stores it in `args` (negated inverts booleans).
// Returns "" on success, else what was wrong and what was expected, e.g.
// "got 'abc' but expected an integer".
std::string apply_flag(const FlagSpec& spec, bool negated, const RawValue& value, Args& args);

// Type shown in help ("INT", "FLOAT", "BOOL", "STR", "LIST", "{a,b}").
std::string flag_type_text(const FlagSpec& spec);
// Current value of the flag's field as text ("None" for an empty optional).
std::string flag_value_text(const FlagSpec& spec, const Args& args);
// Default shown in help.
std::string flag_default_text(const FlagSpec& spec);
bool flag_is_bool(const FlagSpec& spec);
bool flag_is_list(const FlagSpec& spec);
// True if the field holds the value of a default-constructed Args.
bool flag_has_default_value(const FlagSpec& spec, const Args& args);

// Truthy parser shared with YAML: yes/true/t/y/1, no/false/f/n/0 (case-insensitive).
std::optional<bool> parse_truthy(std::string_view s);
std::string truthy_error(std::string_view got);

}  // namespace mtrain::config

// args.json writing and reading (nlohmann-json), driven by the flag table.
#include "config/json.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "config/flags.h"

namespace mtrain::config {

namespace {

using Json = nlohmann::ordered_json;

Json field_json(const FlagSpec& spec, const Args& args) {
  return std::visit(
      [&](auto p) -> Json {
        const auto& v = args.*p;
        if constexpr (requires { v.has_value(); }) {
          return v ? Json(*v) : Json(nullptr);
        } else {
          return Json(v);
        }
      },
      spec.field);
}

std::string scalar_text(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

RawValue raw_from_json(const Json& v) {
  RawValue raw;
  if (v.is_null()) {
    raw.null = true;
  } else if (v.is_array()) {
    for (const auto& item : v) raw.items.push_back(scalar_text(item));
  } else {
    raw.items.push_back(scalar_text(v));
  }
  return raw;
}

int int_field(const Json& v, const char* key) {
  if (!v.is_number_integer()) throw ConfigError(fmt::format("args.json: '{}' must be an integer", key));
  return v.get<int>();
}

}  // namespace

std::string args_to_json(const Args& args) {
  Json j;
  j["command"] = args.command;
  j["config_file"] = args.config_file;
  for (const auto& spec : flag_table()) j[std::string(spec.name)] = field_json(spec, args);
  j["world_size"] = args.world_size;
  j["data_parallel_size"] = args.data_parallel_size;
  j["num_micro_batches"] = args.num_micro_batches;
  return j.dump(2) + "\n";
}

Args args_from_json(const std::string& json_text) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const Json::parse_error& e) {
    throw ConfigError(fmt::format("args.json: invalid JSON: {}", e.what()));
  }
  if (!j.is_object()) throw ConfigError("args.json: expected a JSON object");
  Args args;
  for (const auto& [key, value] : j.items()) {
    if (key == "command" || key == "config_file") {
      if (!value.is_string()) throw ConfigError(fmt::format("args.json: '{}' must be a string", key));
      (key == "command" ? args.command : args.config_file) = value.get<std::string>();
    } else if (key == "world_size") {
      args.world_size = int_field(value, "world_size");
    } else if (key == "data_parallel_size") {
      args.data_parallel_size = int_field(value, "data_parallel_size");
    } else if (key == "num_micro_batches") {
      args.num_micro_batches = int_field(value, "num_micro_batches");
    } else {
      auto match = find_flag(normalize_flag_name(key));
      if (!match) throw ConfigError(fmt::format("args.json: unknown key '{}'", key));
      if (auto e = apply_flag(*match->spec, match->negated, raw_from_json(value), args); !e.empty()) {
        throw ConfigError(fmt::format("args.json: key '{}': {}", key, e));
      }
    }
  }
  return args;
}

}  // namespace mtrain::config

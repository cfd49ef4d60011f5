#include "data/sft.h"

#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "data/jsonl.h"

namespace mtrain::data {
namespace {

using Json = nlohmann::json;

std::string keys_of(const Json& object) {
  std::string keys;
  for (const auto& [key, value] : object.items()) keys += (keys.empty() ? "" : ", ") + key;
  return "[" + keys + "]";
}

// A string field; absent or null gives `fallback` unless `required`.
std::string string_field(const Json& object, const char* key, bool required, const std::string& origin,
                         const std::string& where = "") {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    if (required) throw DataError(origin + ": " + where + "missing field '" + key + "'");
    return "";
  }
  if (!it->is_string()) {
    throw DataError(origin + ": " + where + "field '" + key + "' must be a string, got " + it->type_name());
  }
  return it->get<std::string>();
}

Conversation parse_alpaca(const Json& record, const std::string& origin) {
  Conversation c;
  c.origin = origin;
  const std::string system = string_field(record, "system", false, origin);
  std::string user = string_field(record, "instruction", true, origin);
  const std::string input = string_field(record, "input", false, origin);
  if (!input.empty()) user += "\n" + input;
  if (!system.empty()) c.messages.push_back({"system", system});
  c.messages.push_back({"user", std::move(user)});
  c.messages.push_back({"assistant", string_field(record, "output", true, origin)});
  return c;
}

Conversation parse_messages(const Json& record, const std::string& origin) {
  const Json& messages = record.at("messages");
  if (!messages.is_array() || messages.empty()) {
    throw DataError(origin + ": 'messages' must be a non-empty array of {\"role\", \"content\"} objects");
  }
  Conversation c;
  c.origin = origin;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]: ";
    if (!messages[i].is_object()) throw DataError(origin + ": " + where + "must be an object {\"role\", \"content\"}");
    Message m{string_field(messages[i], "role", true, origin, where),
              string_field(messages[i], "content", true, origin, where)};
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      throw DataError(origin + ": " + where + "role '" + m.role + "' is not one of system, user, assistant");
    }
    if (m.role == "system" && i != 0) throw DataError(origin + ": " + where + "a system message must come first");
    c.messages.push_back(std::move(m));
  }
  if (c.messages.back().role != "assistant") {
    throw DataError(origin + ": the last message must be the assistant's answer, got role '" + c.messages.back().role +
                    "'");
  }
  return c;
}

// ShareGPT: {"conversations": [{"from": "system"|"human"|"gpt", "value": ...}]};
// "user"/"assistant" are accepted as `from` too. Same rules as messages.
Conversation parse_sharegpt(const Json& record, const std::string& origin) {
  const Json& turns = record.at("conversations");
  if (!turns.is_array() || turns.empty()) {
    throw DataError(origin + ": 'conversations' must be a non-empty array of {\"from\", \"value\"} objects");
  }
  Json messages = Json::array();
  for (size_t i = 0; i < turns.size(); ++i) {
    const std::string where = "conversations[" + std::to_string(i) + "]: ";
    if (!turns[i].is_object()) throw DataError(origin + ": " + where + "must be an object {\"from\", \"value\"}");
    std::string role = string_field(turns[i], "from", true, origin, where);
    if (role == "human") role = "user";
    if (role == "gpt") role = "assistant";
    if (role != "system" && role != "user" && role != "assistant") {
      throw DataError(origin + ": " + where + "'from' is '" + role + "', not one of system, human, gpt");
    }
    messages.push_back({{"role", role}, {"content", string_field(turns[i], "value", true, origin, where)}});
  }
  return parse_messages(Json{{"messages", std::move(messages)}}, origin);
}

}  // namespace

Conversation parse_sft_record(const Json& record, const std::string& origin) {
  if (!record.is_object()) {
    throw DataError(origin + ": expected a JSON object, got " + std::string(record.type_name()));
  }
  if (record.contains("messages")) return parse_messages(record, origin);
  if (record.contains("conversations")) return parse_sharegpt(record, origin);
  if (record.contains("instruction") || record.contains("output")) return parse_alpaca(record, origin);
  throw DataError(origin + ": unknown sample format with keys " + keys_of(record),
                  "expected {\"messages\": [...]}, ShareGPT {\"conversations\": [...]} or alpaca "
                  "{\"instruction\", \"input\", \"output\"}");
}

std::vector<Conversation> read_sft_jsonl(const std::string& path) {
  std::vector<Conversation> conversations;
  read_jsonl(path, [&](const Json& record, const std::string& origin) {
    conversations.push_back(parse_sft_record(record, origin));
  });
  if (conversations.empty()) {
    throw DataError(path + ": the dataset has no samples (the file is empty)",
                    "a .jsonl dataset has one JSON object per line");
  }
  return conversations;
}

SftDataset build_sft_dataset(const std::vector<Conversation>& conversations, const Tokenizer& tokenizer,
                             const SftOptions& options, const std::string& source, ProgressSink* progress) {
  SftDataset dataset;
  dataset.num_records = static_cast<int64_t>(conversations.size());
  ProgressBar bar("Tokenize", dataset.num_records, progress);
  for (const Conversation& conversation : conversations) {
    bar.advance(1);  // before the `continue`s below: every record counts
    Sample sample;
    const std::string system =
        options.default_system.empty() ? default_system_prompt(options.chat_template) : options.default_system;
    if (!system.empty() && conversation.messages.front().role != "system") {
      Conversation with_system = conversation;
      with_system.messages.insert(with_system.messages.begin(), {"system", system});
      sample = tokenize_chat(tokenizer, with_system, options.chat_template, options.loss_scale);
    } else {
      sample = tokenize_chat(tokenizer, conversation, options.chat_template, options.loss_scale);
    }
    if (options.max_length > 0 && static_cast<int64_t>(sample.tokens.size()) > options.max_length) {
      ++dataset.num_too_long;
      if (!truncate_sample(sample, options.max_length, options.truncation)) continue;
    }
    if (count_loss_tokens(sample) == 0) {
      ++dataset.num_no_loss;
      continue;
    }
    dataset.num_tokens += static_cast<int64_t>(sample.tokens.size());
    dataset.samples.push_back(std::move(sample));
  }
  if (dataset.samples.empty()) {
    throw DataError(source + ": no usable samples: " + std::to_string(dataset.num_too_long) + " of " +
                        std::to_string(dataset.num_records) +
                        " are longer than max_length=" + std::to_string(options.max_length) + " (truncation_strategy " +
                        truncation_strategy_name(options.truncation) + "), " + std::to_string(dataset.num_no_loss) +
                        " have no token with loss",
                    "raise --max_length or use --truncation_strategy left");
  }
  return dataset;
}

SftDataset load_sft_dataset(const std::string& path, const Tokenizer& tokenizer, const SftOptions& options) {
  return build_sft_dataset(read_sft_jsonl(path), tokenizer, options, path);
}

}  // namespace mtrain::data

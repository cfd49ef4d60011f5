#include "data/chat_template.h"

#include <array>

#include "common/errors.h"

namespace mtrain::data {
namespace {

constexpr const char* kImStart = "<|im_start|>";
constexpr const char* kStartHeader = "<|start_header_id|>";
constexpr const char* kDefaultSystem = "You are a helpful assistant.";

// The pieces of one template; a turn is prefix + content + suffix. The
// answer of the last round ends with last_answer_suffix, or with the eos
// token when last_answer_eos.
struct TurnFormat {
  const char* begin;          // once, before everything
  const char* system_prefix;  // "{system}" is wrapped in prefix / suffix
  const char* system_suffix;
  const char* user_prefix;
  const char* user_suffix;
  const char* assistant_header;        // not trained (prompt side)
  const char* answer_suffix;           // trained with the answer
  const char* after_answer;            // not trained
  bool last_answer_eos;                // the last answer ends with eos instead of answer_suffix
  std::array<const char*, 4> special;  // tokens the tokenizer must have (nullptr: unused)
};

constexpr TurnFormat kChatmlFormat{"",
                                   "<|im_start|>system\n",
                                   "<|im_end|>\n",
                                   "<|im_start|>user\n",
                                   "<|im_end|>\n",
                                   "<|im_start|>assistant\n",
                                   "<|im_end|>",
                                   "\n",
                                   false,
                                   {"<|im_start|>", "<|im_end|>", nullptr, nullptr}};
constexpr TurnFormat kLlama3Format{"<|begin_of_text|>",
                                   "<|start_header_id|>system<|end_header_id|>\n\n",
                                   "<|eot_id|>",
                                   "<|start_header_id|>user<|end_header_id|>\n\n",
                                   "<|eot_id|>",
                                   "<|start_header_id|>assistant<|end_header_id|>\n\n",
                                   "<|eot_id|>",
                                   "",
                                   false,
                                   {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}};
constexpr TurnFormat kDefaultFormat{
    "", "", "\n\n", "### Human:\n", "\n\n", "### Assistant:\n", "\n\n", "", true, {nullptr, nullptr, nullptr, nullptr}};

const TurnFormat& format_of(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::kLlama3:
      return kLlama3Format;
    case ChatTemplate::kDefault:
      return kDefaultFormat;
    case ChatTemplate::kChatml:
    case ChatTemplate::kQwen:
      break;
  }
  return kChatmlFormat;
}

// Appends text to the last segment if it has the same trainability.
void append(std::vector<TemplateSegment>& segments, std::string_view text, bool trainable) {
  if (text.empty()) return;
  if (segments.empty() || segments.back().trainable != trainable || segments.back().eos)
    segments.push_back({"", trainable});
  segments.back().text += text;
}

void require_template_tokens(const Tokenizer& tokenizer, ChatTemplate t) {
  for (const char* token : format_of(t).special) {
    if (token == nullptr || tokenizer.find_token(token)) continue;
    throw DataError("tokenizer " + tokenizer.source() + " has no " + token + " token, which the " +
                        chat_template_name(t) + " template needs",
                    "pick the template of the tokenizer's model family with --template (chatml/qwen need "
                    "<|im_start|>, llama3 needs <|start_header_id|>; default needs only an eos token)");
  }
  if (format_of(t).last_answer_eos && tokenizer.special().eos < 0) {
    throw DataError("tokenizer " + tokenizer.source() + " has no eos token, which the " + chat_template_name(t) +
                        " template ends each answer with",
                    "set eos_token in tokenizer_config.json beside tokenizer.json");
  }
}

void render_turns(const std::vector<Message>& messages, const TurnFormat& f, size_t last_assistant,
                  LossScale loss_scale, std::vector<TemplateSegment>& segments) {
  const bool all = loss_scale == LossScale::kAll;
  append(segments, f.begin, all);
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    if (m.role == "system") {
      append(segments, std::string(f.system_prefix) + m.content + f.system_suffix, all);
    } else if (m.role != "assistant") {
      append(segments, std::string(f.user_prefix) + m.content + f.user_suffix, all);
    } else {
      const bool trained = all || loss_scale == LossScale::kDefault || i == last_assistant;
      const bool eos_end = f.last_answer_eos && i == last_assistant;
      append(segments, f.assistant_header, all);
      append(segments, m.content + (eos_end ? "" : f.answer_suffix), trained);
      if (eos_end) segments.push_back({"", trained, true});
      append(segments, f.after_answer, all);
    }
  }
}

}  // namespace

std::optional<ChatTemplate> chat_template_from_name(std::string_view name) {
  if (name == "chatml" || name.find(kImStart) != std::string_view::npos) return ChatTemplate::kChatml;
  if (name == "qwen") return ChatTemplate::kQwen;
  if (name == "llama3" || name.find(kStartHeader) != std::string_view::npos) return ChatTemplate::kLlama3;
  if (name == "default") return ChatTemplate::kDefault;
  return std::nullopt;
}

const char* chat_template_name(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::kQwen:
      return "qwen";
    case ChatTemplate::kLlama3:
      return "llama3";
    case ChatTemplate::kDefault:
      return "default";
    case ChatTemplate::kChatml:
      break;
  }
  return "chatml";
}

const char* default_system_prompt(ChatTemplate t) {
  return t == ChatTemplate::kQwen || t == ChatTemplate::kDefault ? kDefaultSystem : "";
}

std::vector<TemplateSegment> render_chat(const Conversation& conversation, ChatTemplate chat_template,
                                         LossScale loss_scale) {
  // The last round's answer is the final message (a prompt ends with a user turn: no last answer).
  const auto& messages = conversation.messages;
  const size_t last_assistant =
      !messages.empty() && messages.back().role == "assistant" ? messages.size() - 1 : messages.size();
  std::vector<TemplateSegment> segments;
  render_turns(conversation.messages, format_of(chat_template), last_assistant, loss_scale, segments);
  return segments;
}

std::string render_chat_text(const Conversation& conversation, ChatTemplate chat_template, std::string_view eos_text) {
  std::string text;
  for (const auto& s : render_chat(conversation, chat_template, LossScale::kDefault)) {
    if (s.eos) text += eos_text;
    text += s.text;
  }
  return text;
}

Sample tokenize_chat(const Tokenizer& tokenizer, const Conversation& conversation, ChatTemplate chat_template,
                     LossScale loss_scale) {
  require_template_tokens(tokenizer, chat_template);
  Sample sample;
  for (const auto& segment : render_chat(conversation, chat_template, loss_scale)) {
    if (segment.eos) sample.tokens.push_back(tokenizer.special().eos);
    tokenizer.encode_append(segment.text, sample.tokens);
    sample.loss_mask.resize(sample.tokens.size(), segment.trainable ? 1 : 0);
  }
  return sample;
}

std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view user, std::string_view system,
                                   const std::vector<Message>& history, ChatTemplate chat_template) {
  require_template_tokens(tokenizer, chat_template);
  Conversation conversation;
  if (!system.empty()) conversation.messages.push_back({"system", std::string(system)});
  conversation.messages.insert(conversation.messages.end(), history.begin(), history.end());
  conversation.messages.push_back({"user", std::string(user)});
  // Segment by segment, exactly as tokenize_chat does for training data; the
  // history's answers are earlier rounds, so none ends with eos.
  std::vector<int32_t> ids;
  for (const auto& segment : render_chat(conversation, chat_template, LossScale::kDefault)) {
    if (segment.eos) ids.push_back(tokenizer.special().eos);
    tokenizer.encode_append(segment.text, ids);
  }
  tokenizer.encode_append(format_of(chat_template).assistant_header, ids);
  return ids;
}

}  // namespace mtrain::data

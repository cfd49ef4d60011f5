#include "data/chat_template.h"

#include "common/errors.h"

namespace mtrain::data {
namespace {

constexpr const char* kImStart = "<|im_start|>";
constexpr const char* kImEnd = "<|im_end|>";

// Appends text to the last segment if it has the same trainability.
void append(std::vector<TemplateSegment>& segments, std::string_view text, bool trainable) {
  if (text.empty()) return;
  if (segments.empty() || segments.back().trainable != trainable) segments.push_back({"", trainable});
  segments.back().text += text;
}

void require_chatml_tokens(const Tokenizer& tokenizer) {
  for (const char* token : {kImStart, kImEnd}) {
    if (!tokenizer.find_token(token)) {
      throw DataError(
          "tokenizer " + tokenizer.source() + " has no " + token + " token, which the chatml template needs",
          "use a tokenizer with ChatML special tokens (Qwen family or configs/demo/tokenizer.json)");
    }
  }
}

void render_chatml(const std::vector<Message>& messages, size_t last_assistant, LossScale loss_scale,
                   std::vector<TemplateSegment>& segments) {
  const bool all = loss_scale == LossScale::kAll;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    if (m.role != "assistant") {
      append(segments, std::string(kImStart) + m.role + "\n" + m.content + kImEnd + "\n", all);
      continue;
    }
    const bool answer_trainable = all || loss_scale == LossScale::kDefault || i == last_assistant;
    append(segments, std::string(kImStart) + "assistant\n", all);
    append(segments, m.content + kImEnd, answer_trainable);
    append(segments, "\n", all);
  }
}

}  // namespace

std::optional<ChatTemplate> chat_template_from_name(std::string_view name) {
  if (name == "chatml" || name.find(kImStart) != std::string_view::npos) return ChatTemplate::kChatml;
  return std::nullopt;
}

std::vector<TemplateSegment> render_chat(const Conversation& conversation, ChatTemplate chat_template,
                                         LossScale loss_scale) {
  size_t last_assistant = conversation.messages.size();
  for (size_t i = 0; i < conversation.messages.size(); ++i) {
    if (conversation.messages[i].role == "assistant") last_assistant = i;
  }
  std::vector<TemplateSegment> segments;
  switch (chat_template) {
    case ChatTemplate::kChatml:
      render_chatml(conversation.messages, last_assistant, loss_scale, segments);
      break;
  }
  return segments;
}

std::string render_chat_text(const Conversation& conversation, ChatTemplate chat_template) {
  std::string text;
  for (const auto& s : render_chat(conversation, chat_template, LossScale::kDefault)) text += s.text;
  return text;
}

Sample tokenize_chat(const Tokenizer& tokenizer, const Conversation& conversation, ChatTemplate chat_template,
                     LossScale loss_scale) {
  if (chat_template == ChatTemplate::kChatml) require_chatml_tokens(tokenizer);
  Sample sample;
  for (const auto& segment : render_chat(conversation, chat_template, loss_scale)) {
    tokenizer.encode_append(segment.text, sample.tokens);
    sample.loss_mask.resize(sample.tokens.size(), segment.trainable ? 1 : 0);
  }
  return sample;
}

std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view user, std::string_view system,
                                   const std::vector<Message>& history, ChatTemplate chat_template) {
  Conversation conversation;
  if (!system.empty()) conversation.messages.push_back({"system", std::string(system)});
  conversation.messages.insert(conversation.messages.end(), history.begin(), history.end());
  conversation.messages.push_back({"user", std::string(user)});
  // Segment by segment, exactly as tokenize_chat does for training data.
  std::vector<int32_t> ids;
  for (const auto& segment : render_chat(conversation, chat_template, LossScale::kDefault)) {
    tokenizer.encode_append(segment.text, ids);
  }
  switch (chat_template) {
    case ChatTemplate::kChatml:
      require_chatml_tokens(tokenizer);
      tokenizer.encode_append(std::string(kImStart) + "assistant\n", ids);
      break;
  }
  return ids;
}

}  // namespace mtrain::data

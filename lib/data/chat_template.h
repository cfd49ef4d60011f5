// Conversations and how they are rendered into model input. Only ChatML
// (Qwen style) exists today:
//   <|im_start|>system\n{system}<|im_end|>\n          (only with a system prompt)
//   <|im_start|>user\n{query}<|im_end|>\n
//   <|im_start|>assistant\n{answer}<|im_end|>\n      (repeated per round)
// Rendering yields segments that are tokenized one by one, so a loss-mask
// boundary is always a token boundary. An assistant segment is its content
// plus the closing <|im_end|>; the "\n" after it carries no loss.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/sample.h"
#include "data/tokenizer.h"

namespace mtrain::data {

struct Message {
  std::string role;  // "system" (first message only), "user" or "assistant"
  std::string content;
};

struct Conversation {
  std::vector<Message> messages;
  std::string origin;  // "file:line" of the record, for error messages
};

enum class ChatTemplate { kChatml };
// "chatml", or a Jinja template text that uses <|im_start|> (Qwen's tokenizer_config.json).
std::optional<ChatTemplate> chat_template_from_name(std::string_view name);

struct TemplateSegment {
  std::string text;
  bool trainable = false;  // its tokens get loss_mask 1
};

std::vector<TemplateSegment> render_chat(const Conversation& conversation, ChatTemplate chat_template,
                                         LossScale loss_scale);
// The concatenated text of render_chat (what a human would see).
std::string render_chat_text(const Conversation& conversation, ChatTemplate chat_template);

// Tokens + loss mask of a whole conversation. Throws DataError if the
// tokenizer lacks the template's special tokens.
Sample tokenize_chat(const Tokenizer& tokenizer, const Conversation& conversation, ChatTemplate chat_template,
                     LossScale loss_scale);

// Tokens of a prompt for generation: the rendered history (optional system,
// earlier rounds) and a new user turn, ending with "<|im_start|>assistant\n".
// `history` holds complete rounds (user/assistant messages) and may be empty.
std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view user, std::string_view system = {},
                                   const std::vector<Message>& history = {},
                                   ChatTemplate chat_template = ChatTemplate::kChatml);

}  // namespace mtrain::data

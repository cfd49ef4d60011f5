// Conversations and how they are rendered into model input (swift's
// --template names). [..] marks the trained part of an assistant turn
// (loss_scale default); everything else carries loss only with `all`.
//   chatml  <|im_start|>system\n{system}<|im_end|>\n   (only with a system prompt)
//           <|im_start|>user\n{query}<|im_end|>\n
//           <|im_start|>assistant\n[{answer}<|im_end|>]\n        (per round)
//   qwen    chatml with the default system "You are a helpful assistant."
//   llama3  <|begin_of_text|>
//           <|start_header_id|>system<|end_header_id|>\n\n{system}<|eot_id|>   (optional)
//           <|start_header_id|>user<|end_header_id|>\n\n{query}<|eot_id|>
//           <|start_header_id|>assistant<|end_header_id|>\n\n[{answer}<|eot_id|>]
//   default {system}\n\n  (default system "You are a helpful assistant.")
//           ### Human:\n{query}\n\n### Assistant:\n[{answer}\n\n]   (earlier rounds)
//           ### Human:\n{query}\n\n### Assistant:\n[{answer}<eos>]   (last round:
//           the tokenizer's eos token)
// Rendering yields segments that are tokenized one by one, so a loss-mask
// boundary is always a token boundary.
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

enum class ChatTemplate { kChatml, kQwen, kLlama3, kDefault };
// "chatml", "qwen", "llama3", "default", or a Jinja template text from
// tokenizer_config.json: one using <|im_start|> is chatml, one using
// <|start_header_id|> is llama3.
std::optional<ChatTemplate> chat_template_from_name(std::string_view name);
const char* chat_template_name(ChatTemplate chat_template);
// The system prompt used when a conversation has none ("" = no system turn).
const char* default_system_prompt(ChatTemplate chat_template);

struct TemplateSegment {
  std::string text;
  bool trainable = false;  // its tokens get loss_mask 1
  bool eos = false;        // stands for the tokenizer's eos token (text is empty)
};

std::vector<TemplateSegment> render_chat(const Conversation& conversation, ChatTemplate chat_template,
                                         LossScale loss_scale);
// The concatenated text of render_chat (what a human would see); an eos
// segment is written as `eos_text`.
std::string render_chat_text(const Conversation& conversation, ChatTemplate chat_template,
                             std::string_view eos_text = "<eos>");

// Tokens + loss mask of a whole conversation. Throws DataError if the
// tokenizer lacks the template's special tokens.
Sample tokenize_chat(const Tokenizer& tokenizer, const Conversation& conversation, ChatTemplate chat_template,
                     LossScale loss_scale);

// Tokens of a prompt for generation: the rendered history (optional system,
// earlier rounds) and a new user turn, ending with the assistant header
// ("<|im_start|>assistant\n" for chatml).
// `history` holds complete rounds (user/assistant messages) and may be empty.
std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view user, std::string_view system = {},
                                   const std::vector<Message>& history = {},
                                   ChatTemplate chat_template = ChatTemplate::kChatml);

}  // namespace mtrain::data

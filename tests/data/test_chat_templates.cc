// Chat templates other than plain chatml (covered by test_sft.cc): the exact
// text of qwen, llama3 and default, written out by hand from the public
// template definitions (Qwen's ChatML, Meta's Llama 3 prompt format, swift's
// `default`), their loss masks under each loss_scale, template selection by
// name / Jinja text, generation prompts, and the missing-token errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "data/chat_template.h"
#include "data/sft.h"
#include "data_test_util.h"

namespace mtrain::data {
namespace {

using testing::data_error_message;

Conversation two_rounds() {
  Conversation c;
  c.messages = {
      {"system", "Be terse."}, {"user", "Hi?"}, {"assistant", "Hello."}, {"user", "2+2?"}, {"assistant", "4"}};
  return c;
}

// The text of the segments with the given trainability, eos as "<eos>".
std::string trained_text(const std::vector<TemplateSegment>& segments, bool trainable) {
  std::string out;
  for (const auto& s : segments)
    if (s.trainable == trainable) out += (s.eos ? "<eos>" : "") + s.text;
  return out;
}

TEST(ChatTemplateNames, NamesAndJinjaTexts) {
  EXPECT_EQ(chat_template_from_name("chatml"), ChatTemplate::kChatml);
  EXPECT_EQ(chat_template_from_name("qwen"), ChatTemplate::kQwen);
  EXPECT_EQ(chat_template_from_name("llama3"), ChatTemplate::kLlama3);
  EXPECT_EQ(chat_template_from_name("default"), ChatTemplate::kDefault);
  EXPECT_EQ(chat_template_from_name("{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"),
            ChatTemplate::kChatml);
  EXPECT_EQ(chat_template_from_name("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"),
            ChatTemplate::kLlama3);
  EXPECT_EQ(chat_template_from_name("{{ bos_token }}[INST] {{ m }} [/INST]"), std::nullopt);
  for (auto t : {ChatTemplate::kChatml, ChatTemplate::kQwen, ChatTemplate::kLlama3, ChatTemplate::kDefault})
    EXPECT_EQ(chat_template_from_name(chat_template_name(t)), t);
  EXPECT_STREQ(default_system_prompt(ChatTemplate::kQwen), "You are a helpful assistant.");
  EXPECT_STREQ(default_system_prompt(ChatTemplate::kDefault), "You are a helpful assistant.");
  EXPECT_STREQ(default_system_prompt(ChatTemplate::kChatml), "");
  EXPECT_STREQ(default_system_prompt(ChatTemplate::kLlama3), "");
}

TEST(ChatTemplateText, QwenRendersLikeChatml) {
  EXPECT_EQ(render_chat_text(two_rounds(), ChatTemplate::kQwen), render_chat_text(two_rounds(), ChatTemplate::kChatml));
}

TEST(ChatTemplateText, Llama3Exact) {
  EXPECT_EQ(render_chat_text(two_rounds(), ChatTemplate::kLlama3),
            "<|begin_of_text|>"
            "<|start_header_id|>system<|end_header_id|>\n\nBe terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>");
  const auto segments = render_chat(two_rounds(), ChatTemplate::kLlama3, LossScale::kDefault);
  EXPECT_EQ(trained_text(segments, true), "Hello.<|eot_id|>4<|eot_id|>");
  EXPECT_EQ(trained_text(render_chat(two_rounds(), ChatTemplate::kLlama3, LossScale::kLastRound), true), "4<|eot_id|>");
}

TEST(ChatTemplateText, DefaultExact) {
  EXPECT_EQ(render_chat_text(two_rounds(), ChatTemplate::kDefault),
            "Be terse.\n\n"
            "### Human:\nHi?\n\n### Assistant:\nHello.\n\n"
            "### Human:\n2+2?\n\n### Assistant:\n4<eos>");
  Conversation one;
  one.messages = {{"user", "Q"}, {"assistant", "A"}};
  EXPECT_EQ(render_chat_text(one, ChatTemplate::kDefault, "</s>"), "### Human:\nQ\n\n### Assistant:\nA</s>");
  const auto segments = render_chat(two_rounds(), ChatTemplate::kDefault, LossScale::kDefault);
  EXPECT_EQ(trained_text(segments, true), "Hello.\n\n4<eos>");
  EXPECT_EQ(trained_text(segments, false),
            "Be terse.\n\n### Human:\nHi?\n\n### Assistant:\n### Human:\n2+2?\n\n### Assistant:\n");
  const auto all = render_chat(two_rounds(), ChatTemplate::kDefault, LossScale::kAll);
  EXPECT_TRUE(std::all_of(all.begin(), all.end(), [](const TemplateSegment& s) { return s.trainable; }));
}

// A byte-level BPE tokenizer with Llama 3's special tokens.
Tokenizer llama3_tokenizer() {
  Tokenizer t = train_bpe({"hello world 2+2? 4 Be terse. Hi? Hello. user assistant system"}, 300,
                          {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"});
  t.set_special_tokens("<|eot_id|>", "<|eot_id|>", "<|begin_of_text|>");
  return t;
}

TEST(ChatTemplateTokens, Llama3MaskCoversAnswersAndEot) {
  const Tokenizer tok = llama3_tokenizer();
  const Sample s = tokenize_chat(tok, two_rounds(), ChatTemplate::kLlama3, LossScale::kDefault);
  ASSERT_EQ(s.tokens.size(), s.loss_mask.size());
  EXPECT_EQ(tok.decode(s.tokens), render_chat_text(two_rounds(), ChatTemplate::kLlama3));
  EXPECT_EQ(s.tokens.front(), tok.token_id("<|begin_of_text|>"));
  EXPECT_EQ(s.tokens.back(), tok.token_id("<|eot_id|>"));
  EXPECT_EQ(s.loss_mask.back(), 1);
  std::vector<int32_t> trained;
  for (size_t i = 0; i < s.tokens.size(); ++i)
    if (s.loss_mask[i]) trained.push_back(s.tokens[i]);
  EXPECT_EQ(tok.decode(trained), "Hello.<|eot_id|>4<|eot_id|>");
}

TEST(ChatTemplateTokens, DefaultEndsTheLastAnswerWithEos) {
  const Tokenizer tok = llama3_tokenizer();  // eos = <|eot_id|>
  const Sample s = tokenize_chat(tok, two_rounds(), ChatTemplate::kDefault, LossScale::kLastRound);
  EXPECT_EQ(tok.decode(s.tokens), render_chat_text(two_rounds(), ChatTemplate::kDefault, "<|eot_id|>"));
  EXPECT_EQ(s.tokens.back(), tok.special().eos);
  std::vector<int32_t> trained;
  for (size_t i = 0; i < s.tokens.size(); ++i)
    if (s.loss_mask[i]) trained.push_back(s.tokens[i]);
  EXPECT_EQ(tok.decode(trained), "4<|eot_id|>");
}

TEST(ChatTemplateTokens, PromptsEndWithTheAssistantHeader) {
  const Tokenizer tok = llama3_tokenizer();
  EXPECT_EQ(tok.decode(encode_prompt(tok, "Hi?", "", {}, ChatTemplate::kLlama3)),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // History answers are earlier rounds: "\n\n", never eos.
  EXPECT_EQ(tok.decode(encode_prompt(tok, "2+2?", "Be terse.", {{"user", "Hi?"}, {"assistant", "Hello."}},
                                     ChatTemplate::kDefault)),
            "Be terse.\n\n### Human:\nHi?\n\n### Assistant:\nHello.\n\n### Human:\n2+2?\n\n### Assistant:\n");
}

TEST(ChatTemplateTokens, QwenAddsItsDefaultSystemWhenARecordHasNone) {
  const Tokenizer tok = Tokenizer::load(testing::source_path("configs/demo/tokenizer.json"));
  SftOptions o;
  o.chat_template = ChatTemplate::kQwen;
  const SftDataset d = build_sft_dataset({Conversation{{{"user", "Hi"}, {"assistant", "Hello"}}, "x:1"}}, tok, o, "x");
  EXPECT_EQ(tok.decode(d.samples.at(0).tokens),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello<|im_end|>\n");
}

TEST(ChatTemplateTokens, MissingSpecialTokensNameTheTemplate) {
  const Tokenizer chatml = Tokenizer::load(testing::source_path("configs/demo/tokenizer.json"));
  const std::string m =
      data_error_message([&] { tokenize_chat(chatml, two_rounds(), ChatTemplate::kLlama3, LossScale::kDefault); });
  EXPECT_NE(m.find("has no <|begin_of_text|> token, which the llama3 template needs"), std::string::npos) << m;
  const Tokenizer no_eos = train_bpe({"plain text"}, 260, {});
  const std::string e =
      data_error_message([&] { tokenize_chat(no_eos, two_rounds(), ChatTemplate::kDefault, LossScale::kDefault); });
  EXPECT_NE(e.find("has no eos token, which the default template ends each answer with"), std::string::npos) << e;
}

}  // namespace
}  // namespace mtrain::data

// SFT data: record parsing (alpaca / messages), error messages with file:line,
// exact ChatML rendering, exact loss masks per loss_scale, truncation,
// generation prompts, and the shipped demo dataset.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "data/chat_template.h"
#include "data/sft.h"
#include "data_test_util.h"

namespace mtrain::data {
namespace {

using testing::data_error_message;
using testing::source_path;
using testing::write_temp_file;
using Ids = std::vector<int32_t>;

Tokenizer demo_tokenizer() { return Tokenizer::load(source_path("configs/demo/tokenizer.json")); }

Conversation parse(const std::string& line) { return parse_sft_record(nlohmann::json::parse(line), "f.jsonl:7"); }

TEST(SftParseTest, Alpaca) {
  const Conversation c = parse(R"({"instruction": "Reverse the word.", "input": "cat", "output": "tac"})");
  ASSERT_EQ(c.messages.size(), 2u);
  EXPECT_EQ(c.messages[0].role, "user");
  EXPECT_EQ(c.messages[0].content, "Reverse the word.\ncat");
  EXPECT_EQ(c.messages[1].role, "assistant");
  EXPECT_EQ(c.messages[1].content, "tac");
  EXPECT_EQ(c.origin, "f.jsonl:7");

  const Conversation s = parse(R"({"system": "Be brief.", "instruction": "Hi?", "input": "", "output": "Hi."})");
  ASSERT_EQ(s.messages.size(), 3u);
  EXPECT_EQ(s.messages[0].role, "system");
  EXPECT_EQ(s.messages[0].content, "Be brief.");
  EXPECT_EQ(s.messages[1].content, "Hi?");  // empty input adds nothing
}

TEST(SftParseTest, Messages) {
  const Conversation c = parse(R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q1"},
      {"role": "assistant", "content": "A1"}, {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2"}]})");
  ASSERT_EQ(c.messages.size(), 5u);
  EXPECT_EQ(c.messages[3].role, "user");
  EXPECT_EQ(c.messages[4].content, "A2");
}

TEST(SftParseTest, RecordErrorsNameFileLineAndProblem) {
  const auto error = [](const std::string& line) { return data_error_message([&] { parse(line); }); };
  EXPECT_EQ(error(R"({"instruction": "x"})"), "f.jsonl:7: missing field 'output'");
  EXPECT_EQ(error(R"({"instruction": 3, "output": "y"})"),
            "f.jsonl:7: field 'instruction' must be a string, got number");
  EXPECT_EQ(error(R"({"prompt": "x", "completion": "y"})"),
            "f.jsonl:7: unknown sample format with keys [completion, prompt]");
  EXPECT_EQ(error(R"([1, 2])"), "f.jsonl:7: expected a JSON object, got array");
  EXPECT_EQ(error(R"({"messages": []})"),
            "f.jsonl:7: 'messages' must be a non-empty array of {\"role\", \"content\"} objects");
  EXPECT_EQ(error(R"({"messages": [{"role": "bot", "content": "x"}]})"),
            "f.jsonl:7: messages[0]: role 'bot' is not one of system, user, assistant");
  EXPECT_EQ(error(R"({"messages": [{"role": "user"}]})"), "f.jsonl:7: messages[0]: missing field 'content'");
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": "q"}]})"),
            "f.jsonl:7: the last message must be the assistant's answer, got role 'user'");
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": "q"}, {"role": "system", "content": "s"},
      {"role": "assistant", "content": "a"}]})"),
            "f.jsonl:7: messages[1]: a system message must come first");
}

TEST(SftReadTest, MalformedLineErrorHasFileAndLine) {
  const std::string path = write_temp_file("bad.jsonl",
                                           "{\"instruction\": \"a\", \"output\": \"b\"}\n"
                                           "\n"
                                           "{\"instruction\": \"a\", \"output\": }\n");
  const std::string message = data_error_message([&] { read_sft_jsonl(path); });
  // Column 32 is the "}" where a value was expected.
  EXPECT_EQ(message.rfind(path + ":3:32: invalid JSON: ", 0), 0u) << message;
}

TEST(SftReadTest, MissingFieldOnLineTwo) {
  const std::string path =
      write_temp_file("d.jsonl", "{\"instruction\": \"a\", \"output\": \"b\"}\n{\"instruction\": \"a\"}\n");
  EXPECT_EQ(data_error_message([&] { read_sft_jsonl(path); }), path + ":2: missing field 'output'");
}

TEST(SftReadTest, MissingFileNamesPath) {
  try {
    read_sft_jsonl("/no/such/dir/train.jsonl");
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot open dataset file '/no/such/dir/train.jsonl': No such file or directory");
    EXPECT_NE(e.hint().find("--dataset"), std::string::npos);
  }
}

TEST(SftReadTest, EmptyFileIsAnError) {
  const std::string path = write_temp_file("empty.jsonl", "\n  \n");
  EXPECT_EQ(data_error_message([&] { read_sft_jsonl(path); }),
            path + ": the dataset has no samples (the file is empty)");
}

TEST(ChatTemplateTest, ChatmlRenderingExact) {
  Conversation c;
  c.messages = {
      {"system", "You are terse."}, {"user", "Hi?"}, {"assistant", "Hello."}, {"user", "2+2?"}, {"assistant", "4"}};
  EXPECT_EQ(render_chat_text(c, ChatTemplate::kChatml),
            "<|im_start|>system\nYou are terse.<|im_end|>\n"
            "<|im_start|>user\nHi?<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n4<|im_end|>\n");
  Conversation no_system;
  no_system.messages = {{"user", "Q"}, {"assistant", "A"}};
  EXPECT_EQ(render_chat_text(no_system, ChatTemplate::kChatml),
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n");
}

// Decodes the tokens whose mask is `want`.
std::string decode_masked(const Tokenizer& tok, const Sample& s, uint8_t want) {
  Ids ids;
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    if (s.loss_mask[i] == want) ids.push_back(s.tokens[i]);
  }
  return tok.decode(ids);
}

TEST(ChatTemplateTest, LossMaskCoversExactlyTheAnswers) {
  const Tokenizer tok = demo_tokenizer();
  Conversation c;
  c.messages = {{"user", "What is 2 plus 3?"},
                {"assistant", "2 plus 3 is 5."},
                {"user", "What is 1 plus 1?"},
                {"assistant", "1 plus 1 is 2."}};
  const Sample def = tokenize_chat(tok, c, ChatTemplate::kChatml, LossScale::kDefault);
  ASSERT_EQ(def.tokens.size(), def.loss_mask.size());
  EXPECT_EQ(tok.decode(def.tokens), render_chat_text(c, ChatTemplate::kChatml));
  EXPECT_EQ(decode_masked(tok, def, 1), "2 plus 3 is 5.<|im_end|>1 plus 1 is 2.<|im_end|>");
  // Position by position: the answer starts right after "<|im_start|>assistant\n" and ends at <|im_end|>;
  // the "\n" that follows is not trained.
  const int32_t im_end = tok.special().im_end;
  const size_t n = def.tokens.size();
  EXPECT_EQ(def.tokens[n - 2], im_end);
  EXPECT_EQ(def.loss_mask[n - 2], 1);
  EXPECT_EQ(def.loss_mask[n - 1], 0);
  const Ids last_answer = tok.encode("1 plus 1 is 2.");
  const size_t answer_start = n - 2 - last_answer.size();
  EXPECT_EQ(Ids(def.tokens.begin() + answer_start, def.tokens.end() - 2), last_answer);
  EXPECT_EQ(def.loss_mask[answer_start - 1], 0);  // the "\n" after "assistant"
  EXPECT_EQ(def.loss_mask[answer_start], 1);

  const Sample last = tokenize_chat(tok, c, ChatTemplate::kChatml, LossScale::kLastRound);
  EXPECT_EQ(last.tokens, def.tokens);
  EXPECT_EQ(decode_masked(tok, last, 1), "1 plus 1 is 2.<|im_end|>");

  const Sample all = tokenize_chat(tok, c, ChatTemplate::kChatml, LossScale::kAll);
  EXPECT_EQ(all.tokens, def.tokens);
  EXPECT_EQ(std::count(all.loss_mask.begin(), all.loss_mask.end(), 1), static_cast<long>(all.tokens.size()));
}

TEST(ChatTemplateTest, TinyTokenizerMaskHandComputed) {
  // With the tiny fixture (a b c Ġ ! Ċ + merges) only a..c/space/!/newline are
  // encodable, so use an "assistant" answer of those and check ids and mask
  // of the answer part exactly: "abc" -> [abc=10], then <|im_end|>=15, "\n" -> [Ċ=6].
  const Tokenizer tok = Tokenizer::load(source_path("tests/data/fixtures/tiny/tokenizer.json"));
  const std::vector<TemplateSegment> segments =
      render_chat(Conversation{{{"user", "ab"}, {"assistant", "abc"}}, ""}, ChatTemplate::kChatml, LossScale::kDefault);
  ASSERT_EQ(segments.size(), 3u);
  EXPECT_EQ(segments[0].text, "<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(segments[0].trainable);
  EXPECT_EQ(segments[1].text, "abc<|im_end|>");
  EXPECT_TRUE(segments[1].trainable);
  EXPECT_EQ(tok.encode(segments[1].text), (Ids{10, 15}));
  EXPECT_EQ(segments[2].text, "\n");
  EXPECT_FALSE(segments[2].trainable);
  EXPECT_EQ(tok.encode(segments[2].text), (Ids{6}));
}

TEST(ChatTemplateTest, EncodePromptEndsWithAssistantHeader) {
  const Tokenizer tok = demo_tokenizer();
  const Ids prompt = encode_prompt(tok, "What is the capital of France?");
  EXPECT_EQ(tok.decode(prompt), "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(prompt.front(), tok.special().im_start);
  // The prompt is a prefix of the training sample for the same question.
  Conversation c{{{"user", "What is the capital of France?"}, {"assistant", "The capital of France is Paris."}}, ""};
  const Sample s = tokenize_chat(tok, c, ChatTemplate::kChatml, LossScale::kDefault);
  ASSERT_LT(prompt.size(), s.tokens.size());
  EXPECT_EQ(Ids(s.tokens.begin(), s.tokens.begin() + prompt.size()), prompt);
  EXPECT_EQ(s.loss_mask[prompt.size() - 1], 0);
  EXPECT_EQ(s.loss_mask[prompt.size()], 1);

  const Ids with_history = encode_prompt(tok, "And 2 plus 2?", "Be brief.", {{"user", "1+1?"}, {"assistant", "2"}});
  EXPECT_EQ(tok.decode(with_history),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n"
            "2<|im_end|>\n<|im_start|>user\nAnd 2 plus 2?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, TokenizerWithoutChatmlTokensIsAnError) {
  const Tokenizer tok = train_bpe({"plain text"}, 260, {"<|endoftext|>"});
  Conversation c{{{"user", "q"}, {"assistant", "a"}}, ""};
  const std::string m = data_error_message([&] { tokenize_chat(tok, c, ChatTemplate::kChatml, LossScale::kDefault); });
  EXPECT_NE(m.find("has no <|im_start|> token"), std::string::npos) << m;
}

std::vector<Conversation> three_conversations() {
  return {Conversation{{{"user", "short"}, {"assistant", "ok"}}, "x:1"},
          Conversation{{{"user", std::string(200, 'q')}, {"assistant", "long answer here"}}, "x:2"},
          Conversation{{{"user", "mid question"}, {"assistant", "mid"}}, "x:3"}};
}

TEST(SftDatasetTest, TruncationStrategies) {
  const Tokenizer tok = demo_tokenizer();
  const std::vector<Conversation> convs = three_conversations();
  SftOptions options;
  const SftDataset unlimited = build_sft_dataset(convs, tok, options, "x");
  ASSERT_EQ(unlimited.samples.size(), 3u);
  const int64_t long_len = static_cast<int64_t>(unlimited.samples[1].tokens.size());
  const int64_t short_len = static_cast<int64_t>(unlimited.samples[0].tokens.size());
  EXPECT_GT(long_len, 40);
  EXPECT_LT(short_len, 20);

  options.max_length = 30;
  const SftDataset deleted = build_sft_dataset(convs, tok, options, "x");
  EXPECT_EQ(deleted.samples.size(), 2u);
  EXPECT_EQ(deleted.num_too_long, 1);
  EXPECT_EQ(deleted.samples[0].tokens, unlimited.samples[0].tokens);
  EXPECT_EQ(deleted.samples[1].tokens, unlimited.samples[2].tokens);

  options.truncation = TruncationStrategy::kLeft;  // keeps the answer at the end
  const SftDataset left = build_sft_dataset(convs, tok, options, "x");
  ASSERT_EQ(left.samples.size(), 3u);
  EXPECT_EQ(left.samples[1].tokens.size(), 30u);
  EXPECT_EQ(Ids(left.samples[1].tokens.begin(), left.samples[1].tokens.end()),
            Ids(unlimited.samples[1].tokens.end() - 30, unlimited.samples[1].tokens.end()));

  options.truncation = TruncationStrategy::kRight;  // cuts the answer away: no loss left, dropped
  const SftDataset right = build_sft_dataset(convs, tok, options, "x");
  EXPECT_EQ(right.samples.size(), 2u);
  EXPECT_EQ(right.num_too_long, 1);
  EXPECT_EQ(right.num_no_loss, 1);

  options.max_length = 5;
  options.truncation = TruncationStrategy::kDelete;
  const std::string m = data_error_message([&] { build_sft_dataset(convs, tok, options, "data.jsonl"); });
  EXPECT_EQ(m.rfind("data.jsonl: no usable samples: 3 of 3 are longer than max_length=5", 0), 0u) << m;
}

TEST(SftDatasetTest, DefaultSystemIsAddedWhenMissing) {
  const Tokenizer tok = demo_tokenizer();
  SftOptions options;
  options.default_system = "You are a helpful assistant.";
  const std::vector<Conversation> convs = {Conversation{{{"user", "q"}, {"assistant", "a"}}, ""}};
  const SftDataset d = build_sft_dataset(convs, tok, options, "x");
  EXPECT_EQ(tok.decode(d.samples[0].tokens),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nq<|im_end|>\n"
            "<|im_start|>assistant\na<|im_end|>\n");
}

TEST(SftDatasetTest, ShippedDemoDatasetLoadsWhole) {
  const Tokenizer tok = demo_tokenizer();
  SftOptions options;
  options.max_length = 128;
  const SftDataset d = load_sft_dataset(source_path("configs/demo/sft.jsonl"), tok, options);
  EXPECT_GE(d.num_records, 400);
  EXPECT_EQ(static_cast<int64_t>(d.samples.size()), d.num_records);  // nothing dropped at max_length 128
  EXPECT_EQ(d.num_too_long, 0);
  for (const Sample& s : d.samples) {
    EXPECT_GT(count_loss_tokens(s), 0);
    EXPECT_EQ(s.tokens.back(), tok.encode("\n")[0]);
  }
}

}  // namespace
}  // namespace mtrain::data

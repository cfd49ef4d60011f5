// `mtrain tokenizer` at the binary's edge: encode/decode output on the GPT-2
// family fixture (ids derived in tests/data/family_tokenizer_fixture.h),
// --help, and exit codes: 4 naming the path for a tokenizer that cannot be
// loaded or an id outside the vocabulary, 2 for bad arguments.
#include "../data/family_tokenizer_fixture.h"
#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

using data::testing::Family;
using data::testing::family_tokenizer_json;

class TokenizerCommand : public MtrainTest {
 protected:
  // <tmp>/model/tokenizer.json (+ tokenizer_config.json): a Hugging Face model directory's tokenizer files.
  fs::path write_model_dir() {
    const fs::path dir = tmp_ / "model";
    fs::create_directories(dir);
    write_text(dir / "tokenizer.json", family_tokenizer_json(Family::kQwen2).dump());
    write_text(dir / "tokenizer_config.json", R"({"eos_token": "<|endoftext|>", "chat_template": "chatml"})");
    return dir;
  }
};

TEST_F(TokenizerCommand, EncodesAndDecodes) {
  const fs::path dir = write_model_dir();
  // Qwen2 regex: "hello" | " " | "1" | "2" -> [259], [32], [49], [50]; "<|im_start|>" is special (268).
  RunResult r =
      run({"tokenizer", "--tokenizer", (dir / "tokenizer.json").string(), "--encode", "<|im_start|>hello 12"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "268,259,32,49,50\n");
  r = run({"tokenizer", "--model", dir.string(), "--encode", "你", "--show_tokens"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "264\n264\t\xC3\xA4\xC2\xBD\xC5\x82\t\"你\"\n");  // ä ½ -> ä½ (r7), ä½ ł -> 264 (r8)
  r = run({"tokenizer", "--model", dir.string(), "--decode", "268,259,32,49,50"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "<|im_start|>hello 12\n");
  r = run({"tokenizer", "--model", dir.string(), "--info"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "chat_template: chatml")) << r.out;
}

// A value is passed as typed, even one that looks like a flag: "---" is not
// "--", "--foo-bar" is not "--foo_bar". The "=" spelling was always verbatim,
// and decoding gives the text back.
TEST_F(TokenizerCommand, ValuesThatLookLikeFlagsAreEncodedAsTyped) {
  const fs::path dir = write_model_dir();
  for (const std::string text : {"---", "--foo-bar"}) {
    const RunResult spaced = run({"tokenizer", "--model", dir.string(), "--encode", text}, "spaced");
    const RunResult joined = run({"tokenizer", "--model", dir.string(), "--encode=" + text}, "joined");
    ASSERT_EQ(spaced.exit_code, 0) << spaced.describe();
    ASSERT_EQ(joined.exit_code, 0) << joined.describe();
    EXPECT_EQ(spaced.out, joined.out) << text;
    const std::string ids = spaced.out.substr(0, spaced.out.find('\n'));
    const RunResult back = run({"tokenizer", "--model", dir.string(), "--decode", ids}, "decode");
    ASSERT_EQ(back.exit_code, 0) << back.describe();
    EXPECT_EQ(back.out, text + "\n");
  }
}

TEST_F(TokenizerCommand, Help) {
  const RunResult r = run({"tokenizer", "--help"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "usage: mtrain tokenizer")) << r.out;
  EXPECT_TRUE(contains(r.out, "--show_tokens")) << r.out;
}

TEST_F(TokenizerCommand, ErrorsExitWithCodeAndPath) {
  const fs::path missing = tmp_ / "nowhere" / "tokenizer.json";
  RunResult r = run({"tokenizer", "--tokenizer", missing.string(), "--encode", "x"});
  EXPECT_EQ(r.exit_code, 4) << r.describe();
  EXPECT_TRUE(contains(r.err, missing.string())) << r.err;
  const fs::path broken = tmp_ / "broken.model";
  write_text(broken, "not a model");
  r = run({"tokenizer", "--tokenizer", broken.string(), "--encode", "x"});
  EXPECT_EQ(r.exit_code, 4) << r.describe();
  EXPECT_TRUE(contains(r.err, broken.string() + ": not a SentencePiece model")) << r.err;
  const fs::path dir = write_model_dir();
  r = run({"tokenizer", "--model", dir.string(), "--decode", "9999"});
  EXPECT_EQ(r.exit_code, 4) << r.describe();
  EXPECT_TRUE(contains(r.err, "token id 9999 is not in tokenizer")) << r.err;
  r = run({"tokenizer", "--model", dir.string(), "--decode", "1,x"});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  r = run({"tokenizer", "--model", dir.string(), "--frobnicate"});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_TRUE(contains(r.err, "unknown argument '--frobnicate'")) << r.err;
}

}  // namespace
}  // namespace mtrain::functional

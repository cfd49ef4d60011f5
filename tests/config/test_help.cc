// `mtrain <command> --help`: the common flags first and LoRA in a section of
// its own, wrapped to the width it is given (nothing lost), and the preset and
// device-profile lists read from configs/ at run time (so they cannot drift).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "config/cli.h"
#include "config/flags.h"
#include "config_test_util.h"

namespace mtrain::config {
namespace {

namespace fs = std::filesystem;

const std::string kConfigs = std::string(MTRAIN_SOURCE_DIR) + "/configs";
constexpr int kNoWrap = 100000;

std::string sft_help(int width, const std::string& config_dir = kConfigs) {
  return help_text("sft", default_commands(), {width, config_dir});
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// All runs of spaces and newlines as one space: the text without its layout.
std::string collapsed(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool space = c == ' ' || c == '\n';
    if (space && (out.empty() || out.back() == ' ')) continue;
    out += space ? ' ' : c;
  }
  return out;
}

// The sorted names of <dir>/*.yaml, listed here independently of lib/config.
std::string listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

TEST(Help, CommonFlagsComeFirstThenTheGroupsWithLoraInItsOwnSection) {
  const std::vector<FlagSection> sections = flag_sections();
  std::vector<std::string> titles;
  for (const auto& s : sections) titles.push_back(s.title);
  EXPECT_EQ(titles,
            (std::vector<std::string>{"Common flags", "Model", "Parallelism and recomputation", "Fusions and kernels",
                                      "Training and optimizer", "LoRA (--train_type lora)", "Mixed precision", "Data",
                                      "Logging, evaluation, output and device", "Checkpointing", "Precision debugging",
                                      "Profiling"}));
  std::vector<std::string> common;
  for (const FlagSpec* f : sections.front().flags) common.emplace_back(f->name);
  EXPECT_EQ(common, (std::vector<std::string>{"model_preset", "model", "tokenizer", "dataset", "data_path",
                                              "micro_batch_size", "global_batch_size", "train_iters",
                                              "num_train_epochs", "lr", "output_dir", "load", "train_type"}));
  // Every flag in exactly one section.
  std::vector<std::string> seen;
  for (const auto& s : sections)
    for (const FlagSpec* f : s.flags) seen.emplace_back(f->name);
  std::vector<std::string> all;
  for (const auto& f : flag_table()) all.emplace_back(f.name);
  std::sort(seen.begin(), seen.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(seen, all);
  const auto lora = std::find_if(sections.begin(), sections.end(),
                                 [](const FlagSection& s) { return s.title == "LoRA (--train_type lora)"; });
  ASSERT_NE(lora, sections.end());
  std::vector<std::string> lora_names;
  for (const FlagSpec* f : lora->flags) lora_names.emplace_back(f->name);
  for (const char* want : {"lora_rank", "lora_alpha", "target_modules", "adapter_load", "merge_lora"})
    EXPECT_NE(std::find(lora_names.begin(), lora_names.end(), want), lora_names.end()) << want;

  // The printed help follows the sections: the job file, the common flags, then Model... LoRA after training.
  const std::string help = sft_help(80);
  const std::vector<std::string> in_order = {"\nCommon flags:\n",
                                             "CONFIG.yaml (first argument)",
                                             "  --model_preset / --model-preset",
                                             "  --train_type / --train-type",
                                             "\nModel:\n",
                                             "  --num_layers / --num-layers",
                                             "\nTraining and optimizer:\n",
                                             "\nLoRA (--train_type lora):\n",
                                             "  --lora_rank / --lora-rank",
                                             "\nMixed precision:\n",
                                             "\nProfiling:\n"};
  size_t at = 0;
  for (const auto& want : in_order) {
    const size_t found = help.find(want, at);
    ASSERT_NE(found, std::string::npos) << "'" << want << "' not found after offset " << at;
    at = found + want.size();
  }
  // A common flag is not listed a second time in its group.
  EXPECT_EQ(help.find("  --train_iters / --train-iters"), help.rfind("  --train_iters / --train-iters"));
}

TEST(Help, WrapsToTheGivenWidthWithoutLosingAWord) {
  const std::string unwrapped = sft_help(kNoWrap);
  for (int width : {60, 80, 120}) {
    const std::string help = sft_help(width);
    EXPECT_EQ(collapsed(help), collapsed(unwrapped)) << "width " << width;
    size_t longest = 0;
    for (const std::string& line : lines_of(help)) {
      longest = std::max(longest, line.size());
      if (line.size() <= static_cast<size_t>(width)) continue;
      // Only what cannot be broken may stick out: a flag's names and type, its default, one alias or one word.
      const bool flag_head = line.rfind("  --", 0) == 0 && line.find("(default:") == std::string::npos;
      const bool one_word = line.find(' ', line.find_first_not_of(' ')) == std::string::npos;
      const bool alias_line = line.rfind("      also: ", 0) == 0 || line.rfind("            --", 0) == 0;
      const bool one_alias = alias_line && line.find(", ") == std::string::npos;
      const bool a_default = line.rfind("      (default: ", 0) == 0;  // kept whole, to be found
      EXPECT_TRUE(flag_head || one_word || one_alias || a_default) << "width " << width << ": " << line;
    }
    EXPECT_GT(longest, static_cast<size_t>(width) / 2);
  }
  EXPECT_NE(sft_help(60), sft_help(120));
  // --model_preset at width 60: its names, type and default on one line, the help on indented lines.
  const std::vector<std::string> lines = lines_of(sft_help(60));
  const auto head = std::find(lines.begin(), lines.end(), "  --model_preset / --model-preset STR  (default: none)");
  ASSERT_NE(head, lines.end());
  ASSERT_GT(lines.end() - head, 3);
  EXPECT_EQ(*(head + 1), "      Model shape preset: configs/models/<name>.yaml or a");
  for (auto l = head + 1; l != head + 4; ++l) {
    EXPECT_EQ(l->rfind("      ", 0), 0u) << *l;
    EXPECT_LE(l->size(), 60u) << *l;
  }
}

TEST(Help, TopLevelHelpWrapsTheCommandDescriptions) {
  const std::string help = help_text("", default_commands(), {50, kConfigs});
  for (const std::string& line : lines_of(help)) EXPECT_LE(line.size(), 50u) << line;
  EXPECT_NE(help.find("\n  sft              supervised fine-tuning"), std::string::npos) << help;
  EXPECT_NE(help.find("\n                   "), std::string::npos) << help;  // a continuation under the description
}

TEST(Help, PresetAndDeviceListsAreTheConfigsDirectories) {
  const std::string help = collapsed(sft_help(kNoWrap));
  EXPECT_NE(help.find("Available: " + listing(fs::path(kConfigs) / "models") + "."), std::string::npos)
      << "the --model_preset help must list configs/models/:\n"
      << listing(fs::path(kConfigs) / "models");
  EXPECT_NE(help.find("Available: " + listing(fs::path(kConfigs) / "devices") + "."), std::string::npos)
      << "the --device_profile help must list configs/devices/";
  const std::string md = flags_markdown(kConfigs);
  EXPECT_NE(md.find("Available: " + listing(fs::path(kConfigs) / "models") + "."), std::string::npos);
}

TEST(Help, PresetListFollowsTheFilesOfAnotherConfigDir) {
  testing::TempDir dir;
  dir.write("models/zeta-1b.yaml", "num_layers: 2\n");
  dir.write("models/alpha.yaml", "num_layers: 2\n");
  dir.write("models/notes.txt", "not a preset\n");
  dir.write("devices/MyNPU.yaml", "name: MyNPU\n");
  const std::string help = collapsed(sft_help(kNoWrap, dir.path()));
  EXPECT_NE(help.find("or a path. Precedence: --model's config.json < preset < YAML config < command line. "
                      "Available: alpha, zeta-1b."),
            std::string::npos)
      << help;
  EXPECT_NE(help.find("configs/devices/<name>.yaml or a path. Available: MyNPU."), std::string::npos);
  EXPECT_EQ(help.find("qwen2.5-7b"), std::string::npos);
  // The same through the command line parser, which reads them from ParseOptions::config_dir.
  ParseOptions options;
  options.config_dir = dir.path();
  options.help_width = kNoWrap;
  EXPECT_NE(collapsed(testing::parse({"sft", "--help"}, options).text).find("Available: alpha, zeta-1b."),
            std::string::npos);

  testing::TempDir empty;
  EXPECT_NE(collapsed(sft_help(kNoWrap, empty.path())).find("None found in configs/models/ (set MTRAIN_CONFIG_DIR)."),
            std::string::npos);
}

TEST(Help, WidthIsTheTerminalsOnlyOnATerminal) {
  EXPECT_EQ(help_width(false, "132", 200), 80);  // redirected: the same everywhere
  EXPECT_EQ(help_width(false, nullptr, 0), 80);
  EXPECT_EQ(help_width(true, "132", 200), 132);  // $COLUMNS first
  EXPECT_EQ(help_width(true, nullptr, 101), 101);
  EXPECT_EQ(help_width(true, "", 101), 101);
  EXPECT_EQ(help_width(true, "wide", 101), 101);
  EXPECT_EQ(help_width(true, nullptr, 0), 80);
  EXPECT_EQ(help_width(true, "12", 0), 40);  // never narrower than 40
}

}  // namespace
}  // namespace mtrain::config

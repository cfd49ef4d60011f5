// docs/FLAGS.md and --help are generated from the flag table and cannot drift.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "config/cli.h"
#include "config/flags.h"

namespace mtrain::config {
namespace {

const std::string kFlagsMd = std::string(MTRAIN_SOURCE_DIR) + "/docs/FLAGS.md";

TEST(FlagsDoc, DocsFlagsMdMatchesTheTable) {
  const std::string generated = flags_markdown(std::string(MTRAIN_SOURCE_DIR) + "/configs");
  if (std::getenv("MTRAIN_UPDATE_FLAGS_MD") != nullptr) {
    std::ofstream(kFlagsMd) << generated;
  }
  std::ifstream in(kFlagsMd);
  ASSERT_TRUE(in.good()) << kFlagsMd << " is missing; run with MTRAIN_UPDATE_FLAGS_MD=1";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), generated) << kFlagsMd << " is stale: rerun this test with MTRAIN_UPDATE_FLAGS_MD=1";
  for (const auto& name : all_flag_names()) {
    EXPECT_NE(ss.str().find("`--" + name + "`"), std::string::npos) << name;
  }
}

TEST(FlagsDoc, HelpListsEveryNameInBothSpellingsWithDefaults) {
  const std::string help = help_text("sft");
  for (const auto& spec : flag_table()) {
    EXPECT_NE(help.find("--" + std::string(spec.name)), std::string::npos) << spec.name;
    EXPECT_NE(help.find(hyphen_spelling(spec.name)), std::string::npos) << spec.name;
    EXPECT_NE(help.find("(default: " + flag_default_text(spec) + ")"), std::string::npos) << spec.name;
  }
  for (const auto& name : all_flag_names()) {
    EXPECT_NE(help.find("--" + name), std::string::npos) << name;
  }
  EXPECT_NE(help.find("--bias_swiglu_fusion / --bias-swiglu-fusion [BOOL]  (default: true)"), std::string::npos);
  EXPECT_NE(help.find("--normalization {LayerNorm,RMSNorm}  (default: RMSNorm)"), std::string::npos);
  EXPECT_NE(help.find("--no_bias_swiglu_fusion / --no-bias-swiglu-fusion (sets false)"), std::string::npos);
}

TEST(FlagsDoc, NamesAreUniqueAndNormalized) {
  std::set<std::string> seen;
  for (const auto& name : all_flag_names()) {
    EXPECT_TRUE(seen.insert(name).second) << "duplicate flag name " << name;
    EXPECT_EQ(name, normalize_flag_name(name)) << name;
  }
  for (const auto& spec : flag_table()) {
    EXPECT_FALSE(spec.help.empty()) << spec.name;
    if (!spec.negations.empty()) {
      EXPECT_TRUE(flag_is_bool(spec)) << spec.name;
    }
  }
}

}  // namespace
}  // namespace mtrain::config

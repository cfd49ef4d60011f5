// The calibrated profile: the base file with new cost constants reads back with the loader, and a dry
// run with --device_profile <that file> prices its step with exactly those constants.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "calibrate/profile_writer.h"
#include "common/errors.h"
#include "config/cli.h"
#include "config/profiles.h"
#include "plan/dry_run.h"
#include "plan/step_time.h"

namespace mtrain::calibrate {
namespace {

namespace fs = std::filesystem;

const std::string kDevices = std::string(MTRAIN_SOURCE_DIR) + "/configs/devices/";

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Writes the calibrated version of configs/devices/<base>.yaml with `values`; returns its path.
std::string write_profile(const std::string& base, const std::vector<CostValue>& values, const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("mtrain_calibrated_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p) << calibrated_profile_yaml(read(kDevices + base + ".yaml"), base + "-calibrated", values,
                                              {"a test profile", "", "second line"});
  return p.string();
}

config::Args args_for(const std::string& device_profile) {
  const std::vector<std::string> words = {
      "mtrain", "pt",     "--model_preset", "gpt2-124m", "--seq_length",     "1024",        "--global_batch_size",
      "2",      "--bf16", "--train_iters",  "1",         "--device_profile", device_profile};
  std::vector<const char*> argv;
  for (const auto& w : words) argv.push_back(w.c_str());
  return config::parse_command_line(static_cast<int>(argv.size()), argv.data()).args;
}

TEST(CalibratedProfile, ReadsBackWithTheNewConstantsAndEverythingElseKept) {
  const std::string file = write_profile("A100-SXM-80GB", {{"compute_efficiency", 0.5, "calibrated"}}, "a");
  const device::DeviceProfile base = config::load_device_profile("A100-SXM-80GB");
  const device::DeviceProfile cal = config::load_device_profile(file);
  EXPECT_EQ(cal.name, "A100-SXM-80GB-calibrated");
  EXPECT_EQ(cal.cost.compute_efficiency, 0.5);
  EXPECT_EQ(cal.cost.memory_efficiency, base.cost.memory_efficiency);
  EXPECT_EQ(cal.cost.flash_forward_efficiency, base.cost.flash_forward_efficiency);
  EXPECT_EQ(cal.cost.launch_overhead_s, base.cost.launch_overhead_s);
  EXPECT_EQ(cal.peak_tflops_16bit, base.peak_tflops_16bit);
  EXPECT_EQ(cal.compute_units, base.compute_units);
  EXPECT_EQ(cal.hbm_bytes, base.hbm_bytes);
  const std::string text = read(file);
  EXPECT_EQ(text.rfind("# a test profile\n#\n# second line\n", 0), 0u) << text.substr(0, 80);
  // The constant's line keeps the base's source comment behind the note.
  EXPECT_NE(text.find("compute_efficiency: 0.5  # calibrated; the base profile's: measured max matmul"),
            std::string::npos);
  fs::remove(file);
}

TEST(CalibratedProfile, AKeyTheBaseLacksIsAddedToItsCostSection) {
  const std::string file = write_profile("tiny_test", {{"inter_link_efficiency", 0.25, ""}}, "b");
  EXPECT_EQ(config::load_device_profile(file).cost.inter_link_efficiency, 0.25);
  fs::remove(file);
}

TEST(CalibratedProfile, ADryRunHonoursTheFileExactly) {
  // Base and calibrated both without fixed costs (launch overhead, collective latencies, the host's
  // dispatch), the calibrated
  // one with every efficiency halved: every kernel and transfer time is work / (rate x efficiency),
  // so the whole step takes exactly twice as long.
  const device::DeviceProfile base = config::load_device_profile("A100-SXM-80GB");
  std::vector<CostValue> no_fixed;
  for (const char* key : {"launch_overhead_us", "comm_latency_us", "intra_step_latency_us", "inter_step_latency_us",
                          "ll_latency_us", "ll_intra_step_latency_us", "ll_inter_step_latency_us", "host_dispatch_us"})
    no_fixed.push_back({key, 0, ""});
  std::vector<CostValue> halved = no_fixed;
  for (const auto& [key, v] :
       std::vector<std::pair<std::string, double>>{{"compute_efficiency", base.cost.compute_efficiency},
                                                   {"flash_forward_efficiency", base.cost.flash_forward_efficiency},
                                                   {"flash_backward_efficiency", base.cost.flash_backward_efficiency},
                                                   {"memory_efficiency", base.cost.memory_efficiency},
                                                   {"intra_link_efficiency", base.cost.intra_link_efficiency},
                                                   {"inter_link_efficiency", base.cost.inter_link_efficiency}})
    halved.push_back({key, v / 2, ""});
  const std::string plain = write_profile("A100-SXM-80GB", no_fixed, "plain");
  const std::string slow = write_profile("A100-SXM-80GB", halved, "slow");
  plan::DryRun p = plan::dry_run(args_for(plain));
  const plan::DryRun s = plan::dry_run(args_for(slow));
  const double tp = plan::step_time(p).step_s, ts = plan::step_time(s).step_s;
  EXPECT_EQ(s.profile.name, "A100-SXM-80GB-calibrated");
  EXPECT_NEAR(ts / tp, 2.0, 1e-12);
  // And the file's constants are all the step saw: the plain dry run re-priced with them gives the same.
  p.profile.cost = s.profile.cost;
  EXPECT_EQ(plan::step_time(p).step_s, ts);
  fs::remove(plain);
  fs::remove(slow);
}

TEST(CalibratedProfile, AMissingProfileFileIsNamed) {
  try {
    config::load_device_profile("./no_such_calibrated.yaml");
    FAIL() << "no such file";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("device profile file './no_such_calibrated.yaml' does not exist"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mtrain::calibrate

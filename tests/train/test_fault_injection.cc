// The fault-injection test seam (train/fault_injection.h): MTRAIN_FAULT and
// MTRAIN_FAULT_RANK values are parsed strictly; unset means no fault.
#include <gtest/gtest.h>

#include "common/errors.h"
#include "train/fault_injection.h"

namespace mtrain::train {
namespace {

TEST(FaultInjection, UnsetOrEmptyMeansNoFault) {
  EXPECT_FALSE(parse_injected_fault(nullptr, nullptr));
  EXPECT_FALSE(parse_injected_fault("1", nullptr));
  EXPECT_FALSE(parse_injected_fault("1", ""));
}

TEST(FaultInjection, ParsesKindIterationAndRank) {
  const auto hang = parse_injected_fault("1", "hang@3");
  ASSERT_TRUE(hang);
  EXPECT_EQ(hang->kind, InjectedFault::Kind::kHang);
  EXPECT_EQ(hang->iteration, 3);
  EXPECT_EQ(hang->rank, 1);
  const auto exit = parse_injected_fault(nullptr, "exit@12");
  ASSERT_TRUE(exit);
  EXPECT_EQ(exit->kind, InjectedFault::Kind::kExit);
  EXPECT_EQ(exit->iteration, 12);
  EXPECT_EQ(exit->rank, 0) << "MTRAIN_FAULT_RANK defaults to 0";
}

TEST(FaultInjection, MalformedValuesAreUsageErrors) {
  for (const char* bad : {"hang", "hang@", "hang@x", "hang@0", "hang@-1", "crash@3", "exit@3x", "@3"}) {
    try {
      parse_injected_fault("0", bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("MTRAIN_FAULT=") + bad), std::string::npos) << e.what();
    }
  }
  for (const char* bad : {"-1", "x", "1.5", " 1"}) {
    EXPECT_THROW(parse_injected_fault(bad, "exit@1"), UsageError) << bad;
  }
}

}  // namespace
}  // namespace mtrain::train

// kvspec::fuzz::CompareKernelSets: what a Highway run and a reference run
// of one program may and may not differ in.
#include "kvspec/fuzz/differential.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kvspec::fuzz {
namespace {

RunnerOutcome Outcome(const std::vector<int>& failed,
                      const std::string& out = "state r r0 0123456789abcdef\n") {
  RunnerOutcome run;
  run.file = "t.trace";
  run.out = out;
  for (int line : failed) {
    run.err += "t.trace:" + std::to_string(line) +
               ": expected equal b got layer r row 0: recurrent state differs\n";
    run.failed_lines.push_back(line);
  }
  run.exit_status = failed.empty() ? 0 : 1;
  return run;
}

TEST(CompareKernelSets, AFailureOnlyOneKernelSetHasIsADifference) {
  EXPECT_EQ(CompareKernelSets(Outcome({21}), Outcome({})), "exit status: Highway 1, reference 0");
  EXPECT_EQ(CompareKernelSets(Outcome({9, 21}), Outcome({9})), "standard error");
  // Another line is undecided: line 21 still counts.
  EXPECT_EQ(CompareKernelSets(Outcome({9, 21}), Outcome({9}), {13}), "standard error");
}

TEST(CompareKernelSets, UndecidedLinesMayFailInEitherSet) {
  EXPECT_EQ(CompareKernelSets(Outcome({21}), Outcome({}), {21}), "");
  EXPECT_EQ(CompareKernelSets(Outcome({}), Outcome({21}), {21}), "");
  EXPECT_EQ(CompareKernelSets(Outcome({9, 21}), Outcome({9}), {21}), "");
  // The decided failures must still agree.
  EXPECT_EQ(CompareKernelSets(Outcome({9, 21}), Outcome({}), {21}), "exit status: Highway 1, reference 0");
  EXPECT_EQ(CompareKernelSets(Outcome({9, 21}), Outcome({13}), {21}), "standard error");
}

TEST(CompareKernelSets, StateHashesMayDifferTheRestOfALineMayNot) {
  EXPECT_EQ(CompareKernelSets(Outcome({}, "state r r0 0123456789abcdef\n"),
                              Outcome({}, "state r r0 fedcba9876543210\n")),
            "");
  EXPECT_EQ(CompareKernelSets(Outcome({}, "state r r0 0123456789abcdef\n"),
                              Outcome({}, "state r r1 0123456789abcdef\n")),
            "state lines (output line 1)");
}

TEST(CompareKernelSets, OtherExitStatusesAreComparedAsTheyAre) {
  RunnerOutcome refused = Outcome({21});
  refused.exit_status = 2;
  EXPECT_EQ(CompareKernelSets(refused, Outcome({21}), {21}), "exit status: Highway 2, reference 1");
}

}  // namespace
}  // namespace kvspec::fuzz

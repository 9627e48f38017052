// Running a test once per Highway target compiled in and supported by this
// CPU, with the target's name in the test name (".../AVX2").
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hwy/targets.h"

namespace kvspec::testing {

inline std::vector<int64_t> AllTargets() { return hwy::SupportedAndGeneratedTargets(); }

// While alive, dynamic dispatch picks `target`.
class TargetScope {
 public:
  explicit TargetScope(int64_t target) { hwy::SetSupportedTargetsForTest(target); }
  ~TargetScope() { hwy::SetSupportedTargetsForTest(0); }
  TargetScope(const TargetScope&) = delete;
  TargetScope& operator=(const TargetScope&) = delete;
};

struct TargetName {
  std::string operator()(const ::testing::TestParamInfo<int64_t>& info) const {
    return hwy::TargetName(info.param);
  }
};

}  // namespace kvspec::testing

// Instantiates the value-parameterised suite `suite` once per target.
#define KVSPEC_FOR_EACH_TARGET(suite)                                       \
  INSTANTIATE_TEST_SUITE_P(Targets, suite,                                 \
                           ::testing::ValuesIn(::kvspec::testing::AllTargets()), \
                           ::kvspec::testing::TargetName())

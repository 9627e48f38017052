// gtest glue for testing/target_scope.h: a value-parameterised suite runs
// once per Highway target, with the target's name in the test name
// (".../AVX2"), so one --gtest_filter reruns one target.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "kvspec/testing/target_scope.h"

namespace kvspec::testing {

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

// Running code on one Highway target at a time: the one target scope that
// tests, properties, fuzz targets and benchmarks share (no test framework
// here; testing/target_params.h adds the gtest glue).
#pragma once

#include <cstdint>
#include <vector>

#include "hwy/targets.h"

namespace kvspec::testing {

// Every target compiled in (HWY_COMPILE_ALL_ATTAINABLE) that this CPU runs.
inline std::vector<int64_t> AllTargets() {
  hwy::SetSupportedTargetsForTest(0);
  return hwy::SupportedAndGeneratedTargets();
}

// While alive, dynamic dispatch picks `target`. In Highway 1.0.3
// SetSupportedTargetsForTest also resets the dispatch table, so the next
// HWY_DYNAMIC_DISPATCH chooses again; the destructor restores the best.
class TargetScope {
 public:
  explicit TargetScope(int64_t target) { hwy::SetSupportedTargetsForTest(target); }
  ~TargetScope() { hwy::SetSupportedTargetsForTest(0); }
  TargetScope(const TargetScope&) = delete;
  TargetScope& operator=(const TargetScope&) = delete;
};

}  // namespace kvspec::testing

// Restricting Highway to one target for a benchmark (header-only, shared by
// the benchmark binaries).
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

#include "hwy/targets.h"

namespace kvspec {
namespace bench {

// Restricts Highway to `target` while alive. In Highway 1.0.3
// SetSupportedTargetsForTest also resets the dispatch table
// (GetChosenTarget().DeInit()), so the next HWY_DYNAMIC_DISPATCH chooses
// again. `dispatched_name` is the benchmarked kernel's own report of the
// target it dispatches to (e.g. AttentionTargetName), called once here;
// `kernel` names that kernel in the skip message.
class TargetScope {
 public:
  TargetScope(int64_t target, const char* (*dispatched_name)(), const char* kernel)
      : requested_(hwy::TargetName(target)), kernel_(kernel) {
    hwy::SetSupportedTargetsForTest(target);
    dispatched_ = dispatched_name();
  }
  ~TargetScope() { hwy::SetSupportedTargetsForTest(0); }
  TargetScope(const TargetScope&) = delete;
  TargetScope& operator=(const TargetScope&) = delete;

  const std::string& dispatched() const { return dispatched_; }

  // Labels the run with the dispatched target; false, and the run skipped
  // with an error, when the kernel did not dispatch to the requested one.
  bool Check(benchmark::State& state) const {
    state.SetLabel(dispatched_);
    if (dispatched_ == requested_) return true;
    const std::string message = kernel_ + " dispatched to " + dispatched_ + ", not " + requested_;
    state.SkipWithError(message.c_str());
    return false;
  }

 private:
  std::string requested_;
  std::string kernel_;
  std::string dispatched_;
};

}  // namespace bench
}  // namespace kvspec

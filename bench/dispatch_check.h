// A benchmark on one Highway target, checked to dispatch there (shared by
// the benchmark binaries).
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

#include "hwy/targets.h"
#include "kvspec/testing/target_scope.h"

namespace kvspec {
namespace bench {

// Runs a benchmark on `target` (testing::TargetScope) and checks that the
// benchmarked kernel really dispatches there. `dispatched_name` is the
// kernel's own report of its target (e.g. AttentionTargetName), called once
// here; `kernel` names that kernel in the skip message.
class DispatchCheck {
 public:
  DispatchCheck(int64_t target, const char* (*dispatched_name)(), const char* kernel)
      : scope_(target), requested_(hwy::TargetName(target)), kernel_(kernel),
        dispatched_(dispatched_name()) {}

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
  testing::TargetScope scope_;
  std::string requested_;
  std::string kernel_;
  std::string dispatched_;
};

}  // namespace bench
}  // namespace kvspec

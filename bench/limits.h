// Physical limits the benchmarks are reported against (bench/limits.cc).
#pragma once

#include <cstddef>

namespace kvspec {
namespace bench {

// Runs `iterations` rounds of 12 independent vector multiply-adds on the
// Highway target chosen now and returns a value that depends on all of
// them (pass it to benchmark::DoNotOptimize).
double FmaLoop(size_t iterations, float seed);
// Floating-point operations (2 per lane per multiply-add) of FmaLoop.
double FmaLoopFlops(size_t iterations);
// The target FmaLoop dispatches to now.
const char* LimitsTargetName();

}  // namespace bench
}  // namespace kvspec

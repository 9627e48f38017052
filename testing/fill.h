// Deterministic test inputs: a linear congruential stream of floats in
// [lo, hi), shared by the tests and properties that build forward inputs
// from a seed (core/allocation_failure_test.cc, properties/refusal_props.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvspec {
namespace testing {

// Resizes *v to count and fills it from *seed, which it advances.
inline void FillUniform(std::vector<float>* v, size_t count, float lo, float hi,
                        uint32_t* seed) {
  v->resize(count);
  for (float& f : *v) {
    *seed = *seed * 1664525u + 1013904223u;
    f = lo + (hi - lo) * static_cast<float>(*seed >> 8) / 16777216.0f;
  }
}

}  // namespace testing
}  // namespace kvspec

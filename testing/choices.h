// The source of choices the trace-program generators draw from: a few
// primitive draws, supplied by fuzz bytes (testing/fdp_choices.h) or by
// RapidCheck (testing/rc_choices.h), so that one generator serves the fuzz
// targets, the properties and the benchmarks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvspec::testing {

class Choices {
 public:
  virtual ~Choices() = default;

  // An integer in [lo, hi] (lo <= hi).
  virtual int64_t Range(int64_t lo, int64_t hi) = 0;
  // A coin.
  virtual bool Bool() = 0;
  // One of `values` (not empty).
  virtual int64_t OneOf(const std::vector<int64_t>& values) = 0;
  // Whether the source has nothing more to give (fuzz bytes used up); a
  // generator stops writing statements then. A RapidCheck source never is.
  virtual bool Exhausted() const = 0;

  // True with the given probability in percent (a draw in [0, 99]).
  bool Chance(int percent) { return Range(0, 99) < percent; }
  // An index into `n` things (n >= 1).
  size_t Index(size_t n) { return static_cast<size_t>(Range(0, static_cast<int64_t>(n) - 1)); }
};

}  // namespace kvspec::testing

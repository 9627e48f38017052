// Random trace programs whose sizes sit at or near TRACE.md's limits, for
// the near-the-limits fuzz target (fuzz_limits): rows up to 64, heads up to
// 64, dim/dk/dv up to 512, L up to 4096, windows and capacities up to
// 65536, conv up to 64, ids up to 2^31 - 1, rows filled towards 1,000,000
// tokens, mixed with small values so that the limits meet each other one
// at a time. Nothing steers towards valid operations: the runner's budgets
// must stop whatever would take too long or allocate too much.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvspec/base/kv_type.h"
#include "kvspec/testing/choices.h"

namespace kvspec::testing {

class LimitsGenerator {
 public:
  explicit LimitsGenerator(Choices* choices) : c_(*choices) {}

  // The trace text: the header, then up to 24 statements (fewer when the
  // choices run out or the text reaches 1 MiB).
  std::string Generate();

 private:
  static constexpr size_t kMaxStatements = 24;
  static constexpr size_t kMaxText = size_t{1} << 20;

  bool Chance(int percent) { return c_.Chance(percent); }
  int64_t Range(int64_t lo, int64_t hi) { return c_.Range(lo, hi); }
  int64_t Near(int64_t lo, int64_t hi);
  void Line(const std::string& s);
  std::string RowList(int64_t lo, int64_t hi);
  void Layer(int l);
  void Forward();
  void Statement();

  Choices& c_;
  std::string text_;
  int64_t rows_ = 1;
  int64_t forks_ = 0;
};

}  // namespace kvspec::testing

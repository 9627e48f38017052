// Choices from libFuzzer's FuzzedDataProvider: each draw is one
// ConsumeIntegralInRange (an integer, one of N) or ConsumeBool, so a stored
// input decodes to the same choices for as long as the generators ask the
// same questions. Header only: FuzzedDataProvider.h comes with clang, and
// only the fuzz targets include this.
#pragma once

#include <cstdint>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "kvspec/testing/choices.h"

namespace kvspec::testing {

class FdpChoices final : public Choices {
 public:
  explicit FdpChoices(FuzzedDataProvider* fdp) : fdp_(*fdp) {}

  // The bytes a draw takes depend only on hi - lo (below 2^32: as for any
  // narrower integer type), so int64_t serves every range.
  int64_t Range(int64_t lo, int64_t hi) override {
    return fdp_.ConsumeIntegralInRange<int64_t>(lo, hi);
  }
  bool Bool() override { return fdp_.ConsumeBool(); }
  int64_t OneOf(const std::vector<int64_t>& values) override {
    return values[fdp_.ConsumeIntegralInRange<size_t>(0, values.size() - 1)];
  }
  bool Exhausted() const override { return fdp_.remaining_bytes() == 0; }

 private:
  FuzzedDataProvider& fdp_;
};

}  // namespace kvspec::testing

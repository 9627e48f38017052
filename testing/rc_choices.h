// Choices from RapidCheck, inside a property or rc::gen::exec: each draw is
// one generator (rc::gen::inRange, arbitrary<bool>, elementOf), so a
// failing case shrinks as the draws do (integers towards lo, coins towards
// false). Header only.
#pragma once

#include <cstdint>
#include <vector>

#include <rapidcheck.h>

#include "kvspec/testing/choices.h"

namespace kvspec::testing {

class RcChoices final : public Choices {
 public:
  // kSized: integer ranges scale with RapidCheck's size, as inRange alone
  // does (small cases first); kUniform: every range whole at any size.
  enum class Scale { kSized, kUniform };
  explicit RcChoices(Scale scale = Scale::kSized) : scale_(scale) {}

  int64_t Range(int64_t lo, int64_t hi) override {
    const rc::Gen<int64_t> gen = rc::gen::inRange<int64_t>(lo, hi + 1);
    return scale_ == Scale::kUniform ? *rc::gen::resize(100, gen) : *gen;
  }
  bool Bool() override { return *rc::gen::arbitrary<bool>(); }
  int64_t OneOf(const std::vector<int64_t>& values) override {
    return *rc::gen::elementOf(values);
  }
  bool Exhausted() const override { return false; }

 private:
  Scale scale_;
};

}  // namespace kvspec::testing

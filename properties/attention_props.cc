// The Highway attention kernel against its scalar reference, on every
// Highway target compiled in and supported here (test names end in the
// target: AttentionTargets/Targets.*/AVX2).
//
// Shapes cover dims 1..160 (partial vectors), GQA groups, rows with masks of
// every kind (empty, one slot, sliding ranges, holes), and slots the mask
// does not admit hold NaN and infinities: they must contribute nothing.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/attention.h"
#include "core/kv_cache.h"
#include "core/mask.h"
#include "core/values.h"
#include "properties/targets.h"

namespace kvspec {
namespace {

class AttentionTargets : public ::testing::TestWithParam<int64_t> {};

TEST_P(AttentionTargets, DispatchesToTheRequestedTarget) {
  testing::TargetScope scope(GetParam());
  EXPECT_STREQ(AttentionTargetName(), hwy::TargetName(GetParam()));
}

TEST_P(AttentionTargets, MatchesScalarReference) {
  testing::TargetScope scope(GetParam());
  const std::string target = hwy::TargetName(GetParam());
  const bool ok = rc::check("attention " + target + " vs scalar reference", [&] {
    const int rows = *rc::gen::inRange(1, 4);
    const int kv_heads = *rc::gen::inRange(1, 4);
    const int group = *rc::gen::inRange(1, 5);
    const int q_heads = kv_heads * group;
    const int dim = *rc::gen::oneOf(rc::gen::inRange(1, 34), rc::gen::element(64, 128, 160));
    const int32_t slots = *rc::gen::inRange<int32_t>(0, 70);
    const int32_t queries = *rc::gen::inRange<int32_t>(1, 5);
    const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
    RC_TAG(dim % 16 == 0 ? "whole vectors" : "partial vectors");

    // Storage [rows][kv_heads][slots][dim]; slot positions with holes.
    const size_t cap = static_cast<size_t>(slots) + 1;
    std::vector<float> k(rows * kv_heads * cap * dim), v(k.size());
    ValueStream stream(seed);
    stream.Fill(k.data(), k.size());
    stream.Fill(v.data(), v.size());
    std::vector<int32_t> pos(rows * cap, -1);
    for (int r = 0; r < rows; ++r) {
      int32_t next = 0;
      for (int32_t s = 0; s < slots; ++s) {
        pos[r * cap + s] = *rc::gen::inRange(0, 5) == 0 ? -1 : next++;
      }
    }
    Mask mask;
    mask.rows = rows;
    mask.queries = queries;
    mask.slot_pos = pos.data();
    mask.slot_stride = cap;
    mask.slots = slots;
    for (int r = 0; r < rows; ++r) {
      for (int32_t q = 0; q < queries; ++q) {
        const int32_t hi = *rc::gen::inRange<int32_t>(-1, slots + 1);
        const int32_t lo = *rc::gen::inRange<int32_t>(0, std::max(hi, 0) + 2);
        mask.query_pos.push_back(hi);
        mask.lo.push_back(lo);
        mask.hi.push_back(hi);
      }
    }
    // Poison every slot no query of its row admits.
    const float poison[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(), -3e38f};
    for (int r = 0; r < rows; ++r) {
      for (int32_t s = 0; s < slots; ++s) {
        bool admitted = false;
        for (int32_t q = 0; q < queries; ++q) admitted = admitted || mask.Admits(r, q, s);
        if (admitted) continue;
        for (int h = 0; h < kv_heads; ++h) {
          for (int i = 0; i < dim; ++i) {
            const size_t at = ((r * kv_heads + h) * cap + s) * dim + i;
            k[at] = poison[(s + i) % 3];
            v[at] = poison[(s + i + 1) % 3];
          }
        }
      }
    }
    KvView view;
    view.k = k.data();
    view.v = v.data();
    view.head_stride = cap * dim;
    view.row_stride = view.head_stride * kv_heads;
    view.rows = rows;
    view.kv_heads = kv_heads;
    view.dim = dim;
    view.slot_pos = pos.data();
    view.slot_stride = cap;
    view.slots = slots;

    std::vector<float> q(static_cast<size_t>(rows) * queries * q_heads * dim);
    stream.Fill(q.data(), q.size());
    std::vector<float> got(q.size(), -1.0f), want(q.size(), -2.0f);
    Attend(q.data(), q_heads, view, mask, got.data());
    AttendReference(q.data(), q_heads, view, mask, want.data());
    for (size_t i = 0; i < got.size(); ++i) {
      if (!(std::fabs(got[i] - want[i]) <= kAttentionTolerance * (1.0f + std::fabs(want[i])))) {
        RC_FAIL("target " + target + " lane " + std::to_string(i) + " (dim " +
                std::to_string(dim) + "): expected " + std::to_string(want[i]) + " got " +
                std::to_string(got[i]));
      }
    }
  });
  EXPECT_TRUE(ok);
}

KVSPEC_FOR_EACH_TARGET(AttentionTargets);

}  // namespace
}  // namespace kvspec

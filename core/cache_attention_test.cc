// Attention over the storage of the caches: a slot the mask hides
// contributes nothing even when it holds NaN, and grouped-query attention
// with 8 or more query heads per KV head matches the scalar reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kvspec/core/kv_cache.h"
#include "kvspec/core/mask_builder.h"
#include "kvspec/kernels/attention.h"
#include "kvspec/kernels/kv_view.h"
#include "kvspec/kernels/mask.h"

namespace kvspec {
namespace {

TEST(Attention, MaskedSlotsHoldingNaNContributeNothing) {
  KvCache c(1, 4);
  std::vector<float> k(3 * 4, 0.25f), v(3 * 4, 1.0f);
  for (int i = 4; i < 8; ++i) k[i] = v[i] = std::numeric_limits<float>::quiet_NaN();
  ForwardColumns cols = ForwardColumns::Dense(1, 3);
  ASSERT_TRUE(c.Append(cols, k.data(), v.data()).ok());
  const KvView view = c.View();
  Mask m = BuildMask(cols, c.positions(), kNoWindow, view.slot_pos, view.slot_stride, view.slots);
  // Hide slot 1 from every query by hand.
  const_cast<int32_t*>(view.slot_pos)[1] = -1;
  std::vector<float> q(3 * 4, 0.5f), out(3 * 4), ref(3 * 4);
  Attend(q.data(), 1, view, m, out.data());
  AttendReference(q.data(), 1, view, m, ref.data());
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_FALSE(std::isnan(out[i])) << i;
    EXPECT_FLOAT_EQ(out[i], 1.0f) << i;
    EXPECT_FLOAT_EQ(ref[i], 1.0f) << i;
  }
}

// Grouped-query attention with 8 or more query heads per KV head (the
// kernel serves a group 4 heads at a time, then one at a time): every query
// head's output matches the scalar reference, on 1 and 2 KV heads, dims
// below, at and above a vector, for a decode and a window of 3 queries.
TEST(AttentionGroups, EightOrMoreQueryHeadsPerKvHeadMatchTheReference) {
  for (const int group : {8, 9, 12}) {
    for (const int kv_heads : {1, 2}) {
      for (const int dim : {3, 8, 17}) {
        for (const int32_t queries : {1, 3}) {
          const int32_t slots = 10;
          const int q_heads = kv_heads * group;
          std::vector<float> k(static_cast<size_t>(kv_heads) * slots * dim);
          std::vector<float> v(k.size());
          for (size_t i = 0; i < k.size(); ++i) {
            k[i] = std::sin(0.37f * static_cast<float>(i));
            v[i] = std::cos(0.23f * static_cast<float>(i));
          }
          std::vector<int32_t> pos(static_cast<size_t>(slots));
          for (int32_t s = 0; s < slots; ++s) pos[s] = s;
          const KvView view = KvView::Dense(k.data(), v.data(), pos.data(), 1, kv_heads, dim,
                                            slots, 0);
          Mask mask;
          mask.rows = 1;
          mask.queries = queries;
          mask.slot_pos = pos.data();
          mask.slot_stride = static_cast<size_t>(slots);
          mask.slots = slots;
          for (int32_t t = 0; t < queries; ++t) {
            const int32_t p = slots - queries + t;
            mask.query_pos.push_back(p);
            mask.lo.push_back(0);
            mask.hi.push_back(p);
          }
          std::vector<float> q(static_cast<size_t>(queries) * q_heads * dim);
          for (size_t i = 0; i < q.size(); ++i) {
            q[i] = std::sin(1.3f * static_cast<float>(i) + 0.5f);
          }
          std::vector<float> got(q.size(), 777.0f), want(q.size(), -777.0f);
          Attend(q.data(), q_heads, view, mask, got.data());
          AttendReference(q.data(), q_heads, view, mask, want.data());
          for (size_t i = 0; i < q.size(); ++i) {
            ASSERT_LE(std::fabs(got[i] - want[i]), kAttentionTolerance * (1 + std::fabs(want[i])))
                << "group " << group << ", " << kv_heads << " KV heads, dim " << dim << ", "
                << queries << " queries: query " << i / dim / q_heads << " head "
                << i / dim % q_heads << " lane " << i % dim << ": " << got[i] << " vs "
                << want[i];
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvspec

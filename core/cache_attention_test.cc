// Attention over the storage of a cache: a slot the mask hides contributes
// nothing even when it holds NaN.
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

}  // namespace
}  // namespace kvspec

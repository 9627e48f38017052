// Unit tests of what every cache shares (core/cache.h): the kind
// predicates and the RoPE offset of rows at the same or different positions.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kvspec/core/cache.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout_test_util.h"

namespace kvspec {
namespace {

using layout_test::AppendTo;

TEST(KindsEdges, AttentionAndBatchedKindPredicates) {
  for (const char* kind : {"kv", "batched_kv", "rotating", "batched_rotating"}) {
    EXPECT_TRUE(IsAttentionCache(kind)) << kind;
  }
  for (const char* kind : {"ssm", "batched_ssm", "", "kvx", "attention"}) {
    EXPECT_FALSE(IsAttentionCache(kind)) << kind;
  }
  for (const char* kind : {"batched_kv", "batched_rotating", "batched_ssm"}) {
    EXPECT_TRUE(IsBatchedCache(kind)) << kind;
  }
  for (const char* kind : {"kv", "rotating", "ssm", "", "batched_", "batched_gru"}) {
    EXPECT_FALSE(IsBatchedCache(kind)) << kind;
  }
}

// The RoPE offset reads no row that is not there: a cache of no rows (one
// CheckInvariants refuses, but constructible) has the static offset 0.
TEST(KindsEdges, TheRopeOffsetOfACacheWithoutRowsIsStaticZero) {
  BatchedKvCache none(0, 1, 2);
  const RopeOffset r = none.ropeOffset();
  EXPECT_TRUE(r.per_row.empty());
  EXPECT_TRUE(r.is_static);
  EXPECT_EQ(r.value, 0);
  BatchedKvCache one(1, 1, 2);
  ASSERT_TRUE(AppendTo(one, ForwardColumns::Dense(1, 3)).ok());
  const RopeOffset three = one.ropeOffset();
  EXPECT_TRUE(three.is_static);
  EXPECT_EQ(three.value, 3);
}

// Rows at different positions have no static offset: `value` is then 0, not
// some row's position (core/cache.h), and per_row holds each row's.
TEST(KindsEdges, TheRopeOffsetOfRowsAtDifferentPositionsIsPerRowWithValueZero) {
  BatchedKvCache two(2, 1, 2);
  ForwardColumns cols = ForwardColumns::Dense(2, 3);
  cols.left = {0, 1};  // row 1 gets one token fewer
  ASSERT_TRUE(AppendTo(two, cols).ok());
  const RopeOffset r = two.ropeOffset();
  EXPECT_FALSE(r.is_static);
  EXPECT_EQ(r.value, 0);
  EXPECT_EQ(r.per_row, (std::vector<int32_t>{3, 2}));
}

}  // namespace
}  // namespace kvspec

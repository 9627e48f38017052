// Unit tests of the recurrent caches (core/ssm_cache.h): the reserved
// forward and the rollback refuse bad arguments and change nothing, and
// every lane's gate counts.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kvspec/core/layout_test_util.h"
#include "kvspec/core/ssm_cache.h"

namespace kvspec {
namespace {

using layout_test::ExpectError;
using layout_test::SsmInputs;

uint64_t HashOf(const Cache& c) {
  Hasher h;
  c.HashState(&h);
  return h.value();
}

TEST(RecurrentEdges, ForwardReservedRefusesBadColumnsAndSpaceOfAnotherRound) {
  const SsmShape shape;
  BatchedSsmCache c(2, shape);
  SsmInputs in(shape, 2, 2);
  ASSERT_TRUE(c.Forward(ForwardColumns::Dense(2, 1), in.io).ok());
  uint64_t before = HashOf(c);

  SsmCacheBase::ForwardSpace space;
  ForwardColumns bad = ForwardColumns::Dense(2, 2);
  bad.right[0] = 3;
  c.ReserveForward(bad, &space);
  ExpectError(c.ForwardReserved(bad, in.io, &space), {"row 0: left 0 + right 3 exceeds 2"});
  EXPECT_EQ(HashOf(c), before);

  // Space reserved while no round was armed, used for the verify forward.
  SsmCacheBase::ForwardSpace unarmed;
  c.ReserveForward(ForwardColumns::Dense(2, 2), &unarmed);
  ASSERT_TRUE(c.ArmRound().ok());
  before = HashOf(c);
  ExpectError(c.ForwardReserved(ForwardColumns::Dense(2, 2), in.io, &unarmed),
              {"internal: forward space reserved for another round"});
  EXPECT_EQ(HashOf(c), before);
  EXPECT_FALSE(c.verified());
}

TEST(RecurrentEdges, RollbackRefusesANegativeKeepCount) {
  const SsmShape shape;
  BatchedSsmCache c(2, shape);
  ASSERT_TRUE(c.ArmRound().ok());
  SsmInputs in(shape, 2, 2);
  ASSERT_TRUE(c.Forward(ForwardColumns::Dense(2, 2), in.io).ok());
  const uint64_t before = HashOf(c);
  ExpectError(c.Rollback({1, -1}), {"rollback: row 1 keeps -1 of a round of 2 tokens"});
  EXPECT_EQ(HashOf(c), before);
  EXPECT_TRUE(c.armed());
  EXPECT_TRUE(c.Rollback({2, 0}).ok());  // everything, and nothing
  EXPECT_EQ(c.positions(), (std::vector<int32_t>{2, 0}));
}

// Runs two tokens through a one-head ssm cache (dk = dv = 4) with the given
// gates ([2][Hv] or [2][Hv][dk]) and returns the state hash.
uint64_t StateAfterTwoTokens(bool per_lane, const std::vector<float>& gate) {
  SsmShape shape;
  shape.dk = 4;
  shape.dv = 4;
  shape.conv = 2;
  shape.gate_per_lane = per_lane;
  SsmCache c(shape);
  const size_t C = shape.Channels();
  std::vector<float> w(2 * C), x(2 * C), beta(2, 0.5f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f + 0.01f * static_cast<float>(i % 7);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.3f - 0.05f * static_cast<float>(i % 5);
  SsmIO io;
  io.conv_weights = w.data();
  io.x = x.data();
  io.gate = gate.data();
  io.beta = beta.data();
  EXPECT_TRUE(c.Forward(ForwardColumns::Dense(1, 2), io).ok());
  return HashOf(c);
}

// Per-lane gates decay each key lane of the state by its own gate: changing
// the gate of any lane, not only the first, changes the state.
TEST(SsmGates, EveryLaneGateCounts) {
  const std::vector<float> equal = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  const uint64_t base = StateAfterTwoTokens(true, equal);
  EXPECT_EQ(base, StateAfterTwoTokens(true, equal));
  for (size_t lane = 1; lane < 4; ++lane) {
    std::vector<float> g = equal;
    g[4 + lane] = 0.9f;  // the second token's gate of one lane
    EXPECT_NE(StateAfterTwoTokens(true, g), base) << "lane " << lane;
  }
  // Per head, the one gate of the head counts the same way.
  EXPECT_NE(StateAfterTwoTokens(false, {0.5f, 0.5f}), StateAfterTwoTokens(false, {0.5f, 0.9f}));
}

}  // namespace
}  // namespace kvspec

// The recurrent caches' invariants (core/ssm_cache.h, checked in
// core/ssm_cache.cc): each condition broken alone, in an otherwise valid
// cache, fails naming its invariant.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kvspec/core/invariants_test_access.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/layout_test_util.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/kernels/conv1d.h"

namespace kvspec {
namespace {

using Access = InvariantsTestAccess;
using layout_test::ExpectBroken;
using layout_test::ExpectError;
using layout_test::Layer;
using layout_test::RunForward;

std::unique_ptr<Layout> Create(int rows, const std::vector<LayerConfig>& layers) {
  std::unique_ptr<Layout> layout;
  const Status s = Layout::Create(rows, layers, &layout);
  EXPECT_TRUE(s.ok()) << s.message();
  return layout;
}

// kv, two rings sharing a mask (window 3, capacity 4) and a recurrent layer,
// after a window of 3 columns.
std::unique_ptr<Layout> HybridAfterAWindow(int rows) {
  std::unique_ptr<Layout> layout =
      Create(rows, {Layer("a", CacheKind::kKv), Layer("r", CacheKind::kRotating, 3, 4),
                    Layer("s", CacheKind::kRotating, 3, 4), Layer("g", CacheKind::kSsm)});
  if (!layout) return layout;
  ForwardColumns cols = ForwardColumns::Dense(rows, 3);
  if (rows > 1) cols.left[0] = 1;
  EXPECT_TRUE(RunForward(*layout, cols).ok());
  EXPECT_TRUE(layout->CheckInvariants().ok()) << layout->CheckInvariants().message();
  return layout;
}

// Invariant 1, the shape: each count below 1 alone, and key heads that do
// not divide the value heads, break it.
TEST(RecurrentEdges, EachShapeFieldOutOfRangeBreaksInvariant1) {
  SsmShape shape;
  shape.value_heads = 4;
  shape.key_heads = 2;  // divides
  BatchedSsmCache valid(2, shape);
  ASSERT_TRUE(valid.CheckInvariants().ok()) << valid.CheckInvariants().message();
  struct Case {
    const char* what;
    void (*corrupt)(SsmCacheBase&);
  };
  const Case cases[] = {
      {"rows 0", [](SsmCacheBase& c) { Access::Rows(c) = 0; }},
      {"value heads 0", [](SsmCacheBase& c) { Access::Shape(c).value_heads = 0; }},
      {"key heads 0", [](SsmCacheBase& c) { Access::Shape(c).key_heads = 0; }},
      {"dk 0", [](SsmCacheBase& c) { Access::Shape(c).dk = 0; }},
      {"dv 0", [](SsmCacheBase& c) { Access::Shape(c).dv = 0; }},
  };
  for (const Case& k : cases) {
    BatchedSsmCache c = valid;
    k.corrupt(c);
    const Status s = c.CheckInvariants();
    ExpectError(s, {"bad recurrent shape", "SsmCacheBase invariant 1"});
  }
  BatchedSsmCache odd = valid;
  Access::Shape(odd).value_heads = 3;  // not a multiple of 2 key heads
  ExpectError(odd.CheckInvariants(),
              {"key heads do not divide value heads", "SsmCacheBase invariant 1"});
}

TEST(RecurrentEdges, PerRowListsOfTheWrongLengthAndANegativeColumnCountFail) {
  BatchedSsmCache valid(2, SsmShape{});
  ASSERT_TRUE(valid.CheckInvariants().ok());
  BatchedSsmCache active = valid;
  Access::Active(active).push_back(0);
  ExpectError(active.CheckInvariants(),
              {"active buffers holds 3 values, 2 expected", "SsmCacheBase invariant 2"});
  BatchedSsmCache next = valid;
  Access::Next(next).pop_back();
  ExpectError(next.CheckInvariants(),
              {"next positions holds 1 values, 2 expected", "SsmCacheBase invariant 2"});
  BatchedSsmCache columns = valid;
  Access::Columns(columns) = -1;
  ExpectError(columns.CheckInvariants(), {"negative column count", "SsmCacheBase invariant 3"});
}

// Recurrent invariants 3 to 5, each condition alone, named by the whole
// message: a 2-row recurrent layer after a window (row 0 left-padded: next
// positions 2 and 3 of 3 columns), then armed (not verified: no round
// tokens yet), then after a ragged verify window (2 and 1 real tokens:
// each row's active buffer is the other one than its snapshot, also for a
// round of one token).
TEST(RecurrentEdges, EachPositionAndRoundConditionAloneBreaksItsInvariant) {
  std::unique_ptr<Layout> layout = HybridAfterAWindow(2);
  ASSERT_NE(layout, nullptr);
  ASSERT_EQ(layout->config(3).kind, CacheKind::kSsm);
  const auto ssm = [&]() -> const SsmCacheBase& { return *layout->recurrent(3); };
  // Runs `corrupt` on a copy of the layer and returns its invariants.
  const auto broken = [&](const std::function<void(SsmCacheBase&)>& corrupt) {
    std::unique_ptr<Cache> copy = ssm().Copy();
    SsmCacheBase& c = const_cast<SsmCacheBase&>(*copy->AsRecurrent());
    EXPECT_TRUE(c.CheckInvariants().ok()) << c.CheckInvariants().message();
    corrupt(c);
    return c.CheckInvariants().message();
  };
  const std::string kBuffer = ": bad buffer index or position (SsmCacheBase invariant 3)";
  ASSERT_EQ(ssm().columns(), 3);
  ASSERT_EQ(ssm().positions(), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(broken([](SsmCacheBase& c) { Access::Active(c)[1] = 2; }), "row 1" + kBuffer);
  EXPECT_EQ(broken([](SsmCacheBase& c) { Access::Next(c)[1] = -1; }), "row 1" + kBuffer);
  EXPECT_EQ(broken([](SsmCacheBase& c) { Access::Next(c)[0] = 4; }), "row 0" + kBuffer);
  EXPECT_EQ(broken([](SsmCacheBase& c) { Access::Next(c)[0] = 3; }), "");  // = columns
  EXPECT_EQ(broken([](SsmCacheBase& c) { Access::Verified(c) = true; }),
            "verified without a round (SsmCacheBase invariant 4)");

  const std::string kRound = ": bad round state (SsmCacheBase invariant 5)";
  ASSERT_TRUE(layout->Arm().ok());
  EXPECT_EQ(broken([](SsmCacheBase& c) { Access::RoundReal(c)[1] = 1; }), "row 1" + kRound);
  EXPECT_EQ(broken([](SsmCacheBase& c) { Access::Snapshots(c)[0] = 2; }), "row 0" + kRound);
  ForwardColumns verify = ForwardColumns::Dense(2, 2);
  verify.right = {0, 1};
  ASSERT_TRUE(RunForward(*layout, verify).ok());
  ASSERT_TRUE(layout->CheckInvariants().ok()) << layout->CheckInvariants().message();
  ASSERT_TRUE(ssm().CheckInvariants().ok()) << ssm().CheckInvariants().message();
  ASSERT_EQ(ssm().positions(), (std::vector<int32_t>{4, 4}));
  EXPECT_EQ(broken([](SsmCacheBase& c) { Access::RoundReal(c)[1] = -1; }), "row 1" + kRound);
  EXPECT_EQ(broken([](SsmCacheBase& c) { Access::RoundReal(c)[0] = 5; }), "row 0" + kRound);
  EXPECT_EQ(broken([](SsmCacheBase& c) { Access::Snapshots(c)[1] = 2; }), "row 1" + kRound);
  for (int row = 0; row < 2; ++row) {
    EXPECT_EQ(broken([row](SsmCacheBase& c) {
                Access::Active(c)[row] = static_cast<uint8_t>(1 - Access::Active(c)[row]);
              }),
              "row " + std::to_string(row) + ": round buffers disagree (SsmCacheBase invariant 5)");
  }
  const size_t record = Access::Records(const_cast<SsmCacheBase&>(ssm()))[1].size();
  ASSERT_GT(record, 0u);
  EXPECT_EQ(broken([](SsmCacheBase& c) { Access::Records(c)[1].push_back(0.0f); }),
            "row 1's round record holds " + std::to_string(record + 1) + " values, " +
                std::to_string(record) + " expected (SsmCacheBase invariant 5)");
}

TEST(Invariants, CorruptedRecurrentCachesFail) {
  SsmCache c(SsmShape{});
  ASSERT_TRUE(c.CheckInvariants().ok());
  SsmCache active = c;
  Access::Active(active)[0] = 2;  // two buffers: 0 and 1
  ExpectBroken(active.CheckInvariants(), "SsmCacheBase invariant 3");
  SsmCache verified = c;
  Access::Verified(verified) = true;  // a verify forward without a round
  ExpectBroken(verified.CheckInvariants(), "SsmCacheBase invariant 4");
  // Invariant 1, the shape: a conv kernel of 1 to kMaxConvKernel taps.
  for (int conv : {0, -1, static_cast<int>(kMaxConvKernel) + 1}) {
    SsmCache shape = c;
    Access::Shape(shape).conv = conv;
    const Status s = shape.CheckInvariants();
    ExpectBroken(s, "SsmCacheBase invariant 1");
    EXPECT_NE(s.message().find("bad recurrent shape"), std::string::npos) << "conv " << conv;
  }

  // An armed round keeps one snapshot, one round size and one record per
  // row: each list of the wrong length breaks invariant 4 (the round's
  // shape), named as such, before any row's round (invariant 5) is read.
  BatchedSsmCache armed(2, SsmShape{});
  ASSERT_TRUE(armed.ArmRound().ok());
  ASSERT_TRUE(armed.CheckInvariants().ok()) << armed.CheckInvariants().message();
  BatchedSsmCache snapshots = armed;
  Access::Snapshots(snapshots).pop_back();
  ExpectBroken(snapshots.CheckInvariants(), "SsmCacheBase invariant 4");
  BatchedSsmCache sizes = armed;
  Access::RoundReal(sizes).push_back(0);
  ExpectBroken(sizes.CheckInvariants(), "SsmCacheBase invariant 4");
  BatchedSsmCache records = armed;
  Access::Records(records).pop_back();
  ExpectBroken(records.CheckInvariants(), "SsmCacheBase invariant 4");
}

}  // namespace
}  // namespace kvspec

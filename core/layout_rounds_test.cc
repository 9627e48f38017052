// A layout's rounds (core/layout.h): Accept refuses each condition alone
// and changes nothing, and takes one count or one per row; a bypass trim is
// valid only right after a window, so a decode and every change of the
// rows leave no bypass bound.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvspec/core/codec/codec.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/layout_test_util.h"

namespace kvspec {
namespace {

using layout_test::Layer;
using layout_test::RunForward;

// n floats counting up from `start` in steps of 1.
std::vector<float> Counting(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// Two rows, a kv layer (which drops rejected tips) and a recurrent one
// (which rolls back): Accept runs both kinds of layer check.
std::unique_ptr<Layout> KvAndSsm() {
  std::unique_ptr<Layout> layout;
  EXPECT_TRUE(
      Layout::Create(2, {Layer("a", CacheKind::kKv), Layer("g", CacheKind::kSsm)}, &layout).ok());
  return layout;
}

// Accept(keep) is refused with a message holding `reason`, and the layout
// is bit-identical afterwards.
void ExpectAcceptRefused(Layout& layout, const std::vector<int32_t>& keep,
                         const std::string& reason) {
  const uint64_t before = layout.StateHash();
  const std::vector<int32_t> positions = layout.positions();
  const Status s = layout.Accept(keep);
  EXPECT_FALSE(s.ok()) << "accepted " << keep.size() << " counts";
  EXPECT_NE(s.message().find(reason), std::string::npos)
      << "got '" << s.message() << "', want '" << reason << "'";
  EXPECT_EQ(layout.StateHash(), before) << "after the refusal '" << s.message() << "'";
  EXPECT_EQ(layout.positions(), positions);
}

// An armed layout after a verify forward of 3 columns in which row 0 has 2
// real tokens (one right pad) and row 1 has 3.
std::unique_ptr<Layout> Verified() {
  std::unique_ptr<Layout> layout = KvAndSsm();
  if (!layout) return layout;
  EXPECT_TRUE(RunForward(*layout, ForwardColumns::Dense(2, 2)).ok());
  EXPECT_TRUE(layout->Arm().ok());
  ForwardColumns verify = ForwardColumns::Dense(2, 3);
  verify.right = {1, 0};
  EXPECT_TRUE(RunForward(*layout, verify).ok());
  EXPECT_EQ(layout->positions(), (std::vector<int32_t>{4, 5}));
  return layout;
}

// Each of Accept's conditions refuses on its own, naming its reason and
// changing nothing: no armed round; a round whose verify forward has not
// run; a list that is neither one count nor one per row; a count below 0;
// a count above the row's real tokens in the verify forward (in one row of
// a ragged list, the other row's count valid).
TEST(AcceptRefusals, EachConditionAloneRefusesAndChangesNothing) {
  {
    std::unique_ptr<Layout> layout = KvAndSsm();
    ASSERT_NE(layout, nullptr);
    ASSERT_TRUE(RunForward(*layout, ForwardColumns::Dense(2, 2)).ok());
    ExpectAcceptRefused(*layout, {0}, "accept without an armed round");
    ExpectAcceptRefused(*layout, {0, 0}, "accept without an armed round");
    ASSERT_TRUE(layout->Arm().ok());
    ExpectAcceptRefused(*layout, {0}, "accept before the round's verify forward");
    ExpectAcceptRefused(*layout, {0, 0}, "accept before the round's verify forward");
  }
  std::unique_ptr<Layout> layout = Verified();
  ASSERT_NE(layout, nullptr);
  ExpectAcceptRefused(*layout, {1, 1, 1}, "accept takes one count or one per row (2), got 3");
  ExpectAcceptRefused(*layout, {}, "accept takes one count or one per row (2), got 0");
  ExpectAcceptRefused(*layout, {-1}, "accept -1: row 0 has 2 real tokens in the verify forward");
  ExpectAcceptRefused(*layout, {2, -1},
                      "accept -1: row 1 has 3 real tokens in the verify forward");
  ExpectAcceptRefused(*layout, {3}, "accept 3: row 0 has 2 real tokens in the verify forward");
  ExpectAcceptRefused(*layout, {0, 4},
                      "accept 4: row 1 has 3 real tokens in the verify forward");
  ExpectAcceptRefused(*layout, {3, 3},
                      "accept 3: row 0 has 2 real tokens in the verify forward");
  // The round is still there to end: each row keeps exactly its count.
  ASSERT_TRUE(layout->Accept({2, 3}).ok());
  EXPECT_EQ(layout->positions(), (std::vector<int32_t>{4, 5}));
  ExpectAcceptRefused(*layout, {0}, "accept without an armed round");
}

// Both forms of the list are accepted on a layout of 2 rows: one count for
// every row, and one count per row; every count from 0 to the row's real
// tokens (the bounds included).
TEST(AcceptRefusals, OneCountOrOneCountPerRowIsAccepted) {
  {
    std::unique_ptr<Layout> layout = Verified();
    ASSERT_NE(layout, nullptr);
    const Status s = layout->Accept({1});
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(layout->positions(), (std::vector<int32_t>{3, 3}));
  }
  {
    std::unique_ptr<Layout> layout = Verified();
    ASSERT_NE(layout, nullptr);
    const Status s = layout->Accept({0, 3});
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(layout->positions(), (std::vector<int32_t>{2, 5}));
  }
  {
    std::unique_ptr<Layout> layout = Verified();
    ASSERT_NE(layout, nullptr);
    const Status s = layout->Accept({2, 0});
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(layout->positions(), (std::vector<int32_t>{4, 2}));
  }
}

// An accept count below 0 is refused by the layout, naming the count, before
// any layer is asked to drop or roll back anything.
TEST(LayoutRounds, NegativeAcceptIsRefusedByTheLayout) {
  LayerConfig kv;
  kv.name = "a";
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(1, {kv}, &layout).ok());
  const auto x = Counting(3 * 4, 0.5f);
  const AttentionIO io(x.data(), x.data(), x.data(), nullptr);
  ASSERT_TRUE(layout->Arm().ok());
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(1, 3), {io}).ok());
  const uint64_t before = layout->StateHash();
  const Status s = layout->Accept({-1});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("accept -1: row 0 has 3 real tokens"), std::string::npos)
      << s.message();
  EXPECT_EQ(layout->StateHash(), before);
  EXPECT_TRUE(layout->Accept({3}).ok());
}

// A bypass trim is valid only right after a window (TRACE.md, precise rule
// 3): after a decode the layout holds no bypass bound at all. Its persisted
// state is the same as after forgetting the bound (what a trace's reload
// does), and a bypass trim, of any count, is refused by the layout itself,
// before any layer is asked (the message names no layer), changing
// nothing. A window after the decode makes it valid again.
TEST(LayoutTrims, BypassTrimRightAfterADecodeIsRefusedByTheLayout) {
  LayerConfig kv, ring;
  kv.name = "a";
  ring.name = "r";
  ring.kind = CacheKind::kRotating;
  ring.window = 2;
  ring.capacity = 4;
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(2, {kv, ring}, &layout).ok());
  const auto x = Counting(2 * 3 * 4, 0.5f);
  const AttentionIO io(x.data(), x.data(), x.data(), nullptr);
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(2, 3), {io, io}).ok());
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(2, 1, /*decode=*/true), {io, io}).ok());
  std::string encoded, forgotten;
  ASSERT_TRUE(EncodeLayout(*layout, &encoded).ok());
  std::unique_ptr<Layout> reloaded = layout->Copy();
  reloaded->ForgetBypassBound();
  ASSERT_TRUE(EncodeLayout(*reloaded, &forgotten).ok());
  EXPECT_TRUE(encoded == forgotten) << "a decode left a bypass bound in the encoded layout";
  const uint64_t before = layout->StateHash();
  for (int32_t n : {0, 1}) {
    const Status s = layout->Trim(n, /*bypass=*/true);
    EXPECT_FALSE(s.ok()) << "trim " << n << " bypass after a decode";
    EXPECT_EQ(s.message(), "trim bypass is only valid right after a window");
    EXPECT_EQ(layout->StateHash(), before);
  }
  EXPECT_EQ(layout->positions(), (std::vector<int32_t>{4, 4}));
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(2, 2), {io, io}).ok());
  EXPECT_TRUE(layout->Trim(1, /*bypass=*/true).ok());
  EXPECT_EQ(layout->positions(), (std::vector<int32_t>{5, 5}));
}

// A filter, a join and an extract change the rows, and what a bypass trim
// may take is a bound per row of the last window: each leaves no bypass
// bound (its encoding equals the one with the bound forgotten), and the
// layout itself refuses a bypass trim after it, with its own message,
// changing nothing (the caches would refuse it too, with another message).
TEST(LayoutTrims, RowChangesLeaveNoBypassBound) {
  LayerConfig kv;
  kv.name = "a";
  const auto x = Counting(2 * 3 * 4, 0.5f);
  const AttentionIO io(x.data(), x.data(), x.data(), nullptr);
  const auto windowed = [&]() {
    std::unique_ptr<Layout> layout;
    EXPECT_TRUE(Layout::Create(2, {kv}, &layout).ok());
    EXPECT_TRUE(layout->Forward(ForwardColumns::Dense(2, 3), {io}).ok());
    return layout;
  };
  const auto check = [](Layout& layout, const char* after) {
    std::string encoded, forgotten;
    ASSERT_TRUE(EncodeLayout(layout, &encoded).ok()) << after;
    std::unique_ptr<Layout> copy = layout.Copy();
    copy->ForgetBypassBound();
    ASSERT_TRUE(EncodeLayout(*copy, &forgotten).ok()) << after;
    EXPECT_TRUE(encoded == forgotten) << after << " left a bypass bound";
    const uint64_t before = layout.StateHash();
    const Status s = layout.Trim(1, /*bypass=*/true);
    EXPECT_FALSE(s.ok()) << "trim 1 bypass after " << after;
    EXPECT_EQ(s.message(), "trim bypass is only valid right after a window") << after;
    EXPECT_EQ(layout.StateHash(), before) << after;
  };
  {
    std::unique_ptr<Layout> layout = windowed();
    ASSERT_TRUE(layout->Filter({1}).ok());
    check(*layout, "a filter");
  }
  {
    std::unique_ptr<Layout> layout = windowed(), other = windowed();
    ASSERT_TRUE(layout->Join(*other).ok());
    check(*layout, "a join");
  }
  {
    std::unique_ptr<Layout> layout = windowed(), row;
    ASSERT_TRUE(layout->Extract(0, &row).ok());
    check(*row, "an extract");
  }
  // Right after a window the bound is there, and the same trim is taken.
  std::unique_ptr<Layout> layout = windowed();
  EXPECT_TRUE(layout->Trim(1, /*bypass=*/true).ok());
  EXPECT_EQ(layout->positions(), (std::vector<int32_t>{2, 2}));
}

}  // namespace
}  // namespace kvspec

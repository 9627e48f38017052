// Outcomes the rest of the suite never produced (issue 20): each invariant
// of the column store, the recurrent caches and the layout broken alone,
// in an otherwise valid object, fails naming that invariant; each refusal
// of the caches' own operations and of the batch lifecycle, hit with an
// argument that breaks exactly one condition, refuses naming the problem
// and changes nothing; the boundary values just inside are accepted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvspec/core/batch.h"
#include "kvspec/core/cache.h"
#include "kvspec/core/invariants.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/tests/layout_test_util.h"
#include "kvspec/core/ssm_cache.h"

namespace kvspec {

// Test-only access to the state the tests corrupt (a friend of the classes;
// this binary's own definition, like core/tests/invariants_test.cc's).
struct InvariantsTestAccess {
  static int& Rows(ColumnStore& c) { return c.rows_; }
  static int& KvHeads(ColumnStore& c) { return c.kv_heads_; }
  static int& Dim(ColumnStore& c) { return c.dim_; }
  static int32_t& Window(ColumnStore& c) { return c.window_; }
  static int32_t& RingCapacity(ColumnStore& c) { return c.ring_capacity_; }
  static size_t& Slots(ColumnStore& c) { return c.slots_; }
  static size_t& First(ColumnStore& c) { return c.first_; }
  static int64_t& Held(ColumnStore& c) { return c.held_; }
  static std::vector<int32_t>& Next(ColumnStore& c) { return c.next_; }
  static std::vector<int64_t>& HeldPads(ColumnStore& c) { return c.held_pads_; }
  static int64_t& Columns(ColumnStore& c) { return c.columns_; }
  static std::vector<int32_t>& SlotPositions(ColumnStore& c) { return c.slot_pos_; }
  static int64_t& Peak(ColumnStore& c) { return c.peak_; }
  static int64_t& PeakBeforeWrite(ColumnStore& c) { return c.peak_before_write_; }
  static std::vector<int32_t>& LastWriteReal(ColumnStore& c) { return c.last_write_real_; }
  static bool& LastWriteWasDecode(ColumnStore& c) { return c.last_write_was_decode_; }

  static int& Rows(SsmCacheBase& c) { return c.rows_; }
  static SsmShape& Shape(SsmCacheBase& c) { return c.shape_; }
  static std::vector<uint8_t>& Active(SsmCacheBase& c) { return c.active_; }
  static std::vector<int32_t>& Next(SsmCacheBase& c) { return c.next_; }
  static int64_t& Columns(SsmCacheBase& c) { return c.columns_; }
  static bool& Verified(SsmCacheBase& c) { return c.verified_; }
  static std::vector<uint8_t>& Snapshots(SsmCacheBase& c) { return c.snapshot_; }
  static std::vector<int32_t>& RoundReal(SsmCacheBase& c) { return c.round_real_; }
  static std::vector<std::vector<float>>& Records(SsmCacheBase& c) { return c.record_; }

  static int& Rows(Layout& l) { return l.rows_; }
  static std::vector<std::unique_ptr<Cache>>& Layers(Layout& l) { return l.layers_; }
  static std::vector<LayerConfig>& Configs(Layout& l) { return l.configs_; }
  static std::vector<Mask>& Masks(Layout& l) { return l.masks_; }
  static std::vector<int32_t>& MaskCapacity(Layout& l) { return l.mask_capacity_; }
  static std::vector<int>& MaskOfLayer(Layout& l) { return l.mask_of_layer_; }
};

namespace {

using Access = InvariantsTestAccess;
using layout_test::Filled;
using layout_test::Layer;
using layout_test::RunForward;
using layout_test::SsmInputs;

uint64_t Hash(const Cache& c) {
  Hasher h;
  c.HashState(&h);
  return h.value();
}

ColumnStore& Store(Layout& l, size_t layer) {
  return const_cast<ColumnStore&>(*Access::Layers(l)[layer]->AsColumnStore());
}

// `s` is an error whose message holds every one of `parts`.
void ExpectError(const Status& s, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(s.ok()) << "expected an error naming " << *parts.begin();
  for (const std::string& p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
  }
}

// Appends `cols` to a store of `heads` x `dim` with made-up contents.
Status AppendTo(AttentionCache& c, const ForwardColumns& cols) {
  const size_t n = static_cast<size_t>(c.rows()) * static_cast<size_t>(cols.columns) *
                   static_cast<size_t>(c.kvHeads()) * static_cast<size_t>(c.headDim());
  const std::vector<float> k = Filled(n, 0.5f);
  return c.Append(cols, k.data(), k.data());
}

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

// ------------------------------------------------------------ column store
// Invariant 1, the shape: each field out of range alone breaks it; the
// smallest valid values (one row, head, lane; window 0 for a plain cache,
// 1 <= window = capacity for a ring) hold it.
TEST(ColumnStoreEdges, EachShapeFieldOutOfRangeBreaksInvariant1) {
  KvCache plain(1, 1);
  ASSERT_TRUE(AppendTo(plain, ForwardColumns::Dense(1, 2)).ok());
  ASSERT_TRUE(plain.CheckInvariants().ok()) << plain.CheckInvariants().message();
  struct Case {
    const char* what;
    void (*corrupt)(ColumnStore&);
  };
  const Case plain_cases[] = {
      {"rows 0", [](ColumnStore& c) { Access::Rows(c) = 0; }},
      {"kv heads 0", [](ColumnStore& c) { Access::KvHeads(c) = 0; }},
      {"dim 0", [](ColumnStore& c) { Access::Dim(c) = 0; }},
      {"window -1", [](ColumnStore& c) { Access::Window(c) = -1; }},
      {"ring capacity -1", [](ColumnStore& c) { Access::RingCapacity(c) = -1; }},
  };
  for (const Case& k : plain_cases) {
    KvCache c = plain;
    k.corrupt(c);
    ExpectError(c.CheckInvariants(), {"bad shape", "ColumnStore invariant 1"});
  }

  for (int32_t window : {1, 2}) {  // window 1, and window = capacity
    RotatingCache ring(1, 1, window, 2);
    ASSERT_TRUE(AppendTo(ring, ForwardColumns::Dense(1, 3)).ok());
    ASSERT_TRUE(ring.CheckInvariants().ok()) << ring.CheckInvariants().message();
  }
  RotatingCache ring(1, 1, 2, 2);
  ASSERT_TRUE(AppendTo(ring, ForwardColumns::Dense(1, 1)).ok());
  const Case ring_cases[] = {
      {"ring window 0", [](ColumnStore& c) { Access::Window(c) = 0; }},
      {"ring window past the capacity", [](ColumnStore& c) { Access::Window(c) = 3; }},
  };
  for (const Case& k : ring_cases) {
    RotatingCache c = ring;
    k.corrupt(c);
    const Status s = c.CheckInvariants();
    ExpectError(s, {"bad shape", "ColumnStore invariant 1"});
  }
}

// Invariant 4 for a ring that has not wrapped: it still holds every column
// it was given (the oldest slots are dropped only once the ring wraps). A
// ring of capacity 4 after 3 columns, with one column fewer held, breaks
// exactly that invariant (held <= slots keeps invariant 3 whole).
TEST(ColumnStoreEdges, ARingThatHasNotWrappedHoldsEveryColumn) {
  RotatingCache ring(1, 1, 2, 4);
  ASSERT_TRUE(AppendTo(ring, ForwardColumns::Dense(1, 3)).ok());
  ASSERT_TRUE(ring.CheckInvariants().ok()) << ring.CheckInvariants().message();
  RotatingCache c = ring;
  Access::Held(c) -= 1;
  ExpectError(c.CheckInvariants(),
              {"a cache that has not wrapped holds every column", "ColumnStore invariant 4"});
}

// Invariants 2, 3, 4 (a plain cache) and 9, each condition alone, named by
// the whole message. A ring (window 2, capacity 4) after writes of 2 and 1
// columns: held = columns = peak = 3, peak before the last write 2, first
// slot 0; a plain cache after 2 columns; and caches with no write yet.
TEST(ColumnStoreEdges, EachCounterAndGeometryConditionAloneBreaksItsInvariant) {
  RotatingCache ring(1, 1, 2, 4);
  ASSERT_TRUE(AppendTo(ring, ForwardColumns::Dense(1, 2)).ok());
  ASSERT_TRUE(AppendTo(ring, ForwardColumns::Dense(1, 1)).ok());
  ASSERT_TRUE(ring.CheckInvariants().ok()) << ring.CheckInvariants().message();
  ASSERT_EQ(Access::Held(ring), 3);
  ASSERT_EQ(Access::Columns(ring), 3);
  ASSERT_EQ(Access::Peak(ring), 3);
  ASSERT_EQ(Access::PeakBeforeWrite(ring), 2);
  ASSERT_EQ(Access::First(ring), 0u);
  const size_t slots = Access::Slots(ring);
  ASSERT_GE(slots, 3u);
  struct Case {
    void (*corrupt)(ColumnStore&);
    std::string message;
  };
  const auto counters = [](int held, int columns, int peak, int before) {
    return "counters out of order (held " + std::to_string(held) + ", columns " +
           std::to_string(columns) + ", peak " + std::to_string(peak) +
           ", peak before the last write " + std::to_string(before) + ") (ColumnStore invariant 2)";
  };
  const auto geometry = [](size_t n, size_t first, int held) {
    return "inconsistent ring geometry (slots " + std::to_string(n) + ", first " +
           std::to_string(first) + ", held " + std::to_string(held) + ") (ColumnStore invariant 3)";
  };
  const std::vector<Case> ring_cases = {
      {[](ColumnStore& c) { Access::Held(c) = -1; }, counters(-1, 3, 3, 2)},
      {[](ColumnStore& c) { Access::Held(c) = 4; }, counters(4, 3, 3, 2)},
      {[](ColumnStore& c) { Access::Columns(c) = 4; }, counters(3, 4, 3, 2)},
      {[](ColumnStore& c) { Access::PeakBeforeWrite(c) = -1; }, counters(3, 3, 3, -1)},
      {[](ColumnStore& c) { Access::PeakBeforeWrite(c) = 4; }, counters(3, 3, 3, 4)},
      {[](ColumnStore& c) { Access::Slots(c) = 2; }, geometry(2, 0, 3)},
      {[](ColumnStore& c) { Access::First(c) = Access::Slots(c); }, geometry(slots, slots, 3)},
      {[](ColumnStore& c) { Access::LastWriteReal(c)[0] = -1; },
       "row 0: last write larger than what is held (ColumnStore invariant 9)"},
      {[](ColumnStore& c) { Access::LastWriteReal(c)[0] = 4; },
       "row 0: last write larger than what is held (ColumnStore invariant 9)"},
  };
  for (const Case& k : ring_cases) {
    RotatingCache c = ring;
    k.corrupt(c);
    EXPECT_EQ(c.CheckInvariants().message(), k.message);
  }
  // The bounds themselves hold: peak before = peak, last write = held.
  for (auto fix : {+[](ColumnStore& c) { Access::PeakBeforeWrite(c) = 3; },
                   +[](ColumnStore& c) { Access::LastWriteReal(c)[0] = 3; }}) {
    RotatingCache c = ring;
    fix(c);
    EXPECT_TRUE(c.CheckInvariants().ok()) << c.CheckInvariants().message();
  }

  KvCache plain(1, 1);
  ASSERT_TRUE(AppendTo(plain, ForwardColumns::Dense(1, 2)).ok());
  ASSERT_TRUE(plain.CheckInvariants().ok()) << plain.CheckInvariants().message();
  ASSERT_GT(Access::Slots(plain), 2u);
  const std::string kPlain = "a plain cache holds every column from slot 0 (ColumnStore invariant 4)";
  for (auto corrupt : {+[](ColumnStore& c) { Access::First(c) = 1; },
                       +[](ColumnStore& c) { Access::Held(c) = 1; }}) {
    KvCache c = plain;
    corrupt(c);
    EXPECT_EQ(c.CheckInvariants().message(), kPlain);
  }

  // Invariant 8, each condition alone: a plain cache missing its oldest
  // token (1 of the 2 it needs, the newest in place), and a wrapped ring
  // (window 2, capacity 2, after 4 decodes: it needs the newest token only)
  // missing its newest token while holding as many as it needs.
  KvCache oldest = plain;
  std::vector<int32_t>& plain_pos = Access::SlotPositions(oldest);
  ASSERT_EQ(plain_pos[0], 0);
  plain_pos[0] = -1;
  EXPECT_EQ(oldest.CheckInvariants().message(),
            "row 0 holds 1 of the tokens it needs (ColumnStore invariant 8)");
  RotatingCache wrapped(1, 1, 2, 2);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(AppendTo(wrapped, ForwardColumns::Dense(1, 1)).ok());
  ASSERT_TRUE(wrapped.CheckInvariants().ok()) << wrapped.CheckInvariants().message();
  std::vector<int32_t>& ring_pos = Access::SlotPositions(wrapped);
  const auto newest = std::find(ring_pos.begin(), ring_pos.end(), 3);
  ASSERT_NE(newest, ring_pos.end());
  ASSERT_NE(std::find(ring_pos.begin(), ring_pos.end(), 2), ring_pos.end());
  *newest = -1;
  Access::HeldPads(wrapped)[0] += 1;
  const auto real = std::count_if(ring_pos.begin(), ring_pos.end(), [](int32_t p) { return p >= 0; });
  ASSERT_GE(real, 1);  // as many as it needs, or more
  EXPECT_EQ(wrapped.CheckInvariants().message(),
            "row 0 holds " + std::to_string(real) + " of the tokens it needs (ColumnStore invariant 8)");

  // No write yet: no slots, so the first slot is 0, and no decode.
  RotatingCache fresh(1, 1, 2, 4);
  ASSERT_TRUE(fresh.CheckInvariants().ok()) << fresh.CheckInvariants().message();
  ASSERT_EQ(Access::Slots(fresh), 0u);
  RotatingCache first = fresh;
  Access::First(first) = 1;
  EXPECT_EQ(first.CheckInvariants().message(), geometry(0, 1, 0));
  RotatingCache decode = fresh;
  Access::LastWriteWasDecode(decode) = true;
  EXPECT_EQ(decode.CheckInvariants().message(),
            "the last write is a decode, but there is no last write (ColumnStore invariant 9)");
}

// Dropping rejected tips moves the columns after them down, whole: a pad
// column that followed the dropped tip lands in the tip's slot with its own
// keys AND values (written here with values unlike the keys, as a real
// engine's are). One row, one head of 2 lanes, a window of 3 columns with
// one right pad [real, real, pad], then one tip dropped.
TEST(ColumnStoreEdges, DroppingTipsMovesEachLaterColumnWithItsKeysAndValues) {
  KvCache c(1, 2);
  ForwardColumns cols = ForwardColumns::Dense(1, 3);
  cols.right = {1};
  const std::vector<float> k = {1, 2, 3, 4, 5, 6};
  const std::vector<float> v = {-1, -2, -3, -4, -5, -6};
  ASSERT_TRUE(c.Append(cols, k.data(), v.data()).ok());
  const KvView before = c.View();
  const std::vector<float> pad_k(before.Key(0, 0, 2), before.Key(0, 0, 2) + 2);
  const std::vector<float> pad_v(before.Value(0, 0, 2), before.Value(0, 0, 2) + 2);
  ASSERT_NE(pad_k, pad_v);
  ASSERT_TRUE(c.DropTips({1}).ok());
  ASSERT_EQ(c.positions(), std::vector<int32_t>{1});
  const KvView after = c.View();
  EXPECT_EQ(std::vector<float>(after.Key(0, 0, 1), after.Key(0, 0, 1) + 2), pad_k);
  EXPECT_EQ(std::vector<float>(after.Value(0, 0, 1), after.Value(0, 0, 1) + 2), pad_v);
  EXPECT_EQ(std::vector<float>(after.Key(0, 0, 0), after.Key(0, 0, 0) + 2),
            (std::vector<float>{1, 2}));
  EXPECT_EQ(std::vector<float>(after.Value(0, 0, 0), after.Value(0, 0, 0) + 2),
            (std::vector<float>{-1, -2}));
}

// Invariant 5 compares buffer sizes with a product of the shape that could
// overflow: a slot count so large that keys * values would wrap around to
// exactly the floats held must still be a mismatch, and named as the keys'.
TEST(ColumnStoreEdges, AnOverflowingBufferSizeNeverMatches) {
  KvCache c(1, 2);  // one head of 2 lanes
  ASSERT_TRUE(AppendTo(c, ForwardColumns::Dense(1, 1)).ok());
  const size_t slots = c.physicalSlots();
  ASSERT_GT(slots, 0u);
  // rows * heads * slots' * dim = 2 * (2^63 + slots) wraps to 2 * slots.
  Access::Slots(c) = (size_t{1} << 63) + slots;
  const Status s = c.CheckInvariants();
  ExpectError(s, {"ColumnStore invariant 5",
                  "keys holds " + std::to_string(2 * slots) + " values, " +
                      std::to_string(std::numeric_limits<size_t>::max()) + " expected"});
}

TEST(ColumnStoreEdges, ANextPositionListOfTheWrongLengthBreaksInvariant5) {
  BatchedKvCache c(2, 1, 2);
  ASSERT_TRUE(AppendTo(c, ForwardColumns::Dense(2, 2)).ok());
  Access::Next(c).push_back(2);
  ExpectError(c.CheckInvariants(),
              {"next positions holds 3 values, 2 expected", "ColumnStore invariant 5"});
}

// ------------------------------------------------------------ recurrent
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

// ------------------------------------------------------------ layout
// A layer whose own invariants fail breaks the layout's invariant 2, naming
// the layer and the cache's own broken invariant.
TEST(LayoutEdges, ALayerBreakingItsOwnInvariantsBreaksInvariant2) {
  std::unique_ptr<Layout> layout = HybridAfterAWindow(2);
  ASSERT_NE(layout, nullptr);
  Access::HeldPads(Store(*layout, 2))[0] += 1;
  ExpectError(layout->CheckInvariants(),
              {"layer 2: ", "ColumnStore invariant 10", "Layout invariant 2"});
}

// A single-row kind holding as many rows as a batched layout is still the
// wrong kind for it (invariant 2).
TEST(LayoutEdges, ASingleRowKindInABatchedLayoutBreaksInvariant2) {
  std::unique_ptr<Layout> layout = Create(2, {Layer("a", CacheKind::kKv)});
  ASSERT_NE(layout, nullptr);
  const LayerConfig c = layout->config(0);
  auto single = std::make_unique<KvCache>(c.heads, c.dim);
  Access::Rows(*single) = 2;
  Access::Next(*single).assign(2, 0);
  Access::HeldPads(*single).assign(2, 0);
  ASSERT_TRUE(single->CheckInvariants().ok()) << single->CheckInvariants().message();
  Access::Layers(*layout)[0] = std::move(single);
  ExpectError(layout->CheckInvariants(),
              {"layer 0: cache of kind kv with 2 rows in a layout of 2", "Layout invariant 2"});
}

// Invariant 5: a mask index below -1; a recurrent layer given a mask.
TEST(LayoutEdges, AMaskIndexBelowNoneOrOnARecurrentLayerBreaksInvariant5) {
  std::unique_ptr<Layout> below = HybridAfterAWindow(1);
  ASSERT_NE(below, nullptr);
  const int masks = static_cast<int>(Access::Masks(*below).size());
  ASSERT_GE(masks, 2);
  Access::MaskOfLayer(*below)[1] = -2;
  ExpectError(below->CheckInvariants(),
              {"layer 1 reads mask -2 of " + std::to_string(masks), "Layout invariant 5"});

  std::unique_ptr<Layout> ssm = HybridAfterAWindow(1);
  ASSERT_NE(ssm, nullptr);
  std::vector<int>& of = Access::MaskOfLayer(*ssm);
  ASSERT_EQ(of[3], -1);
  of[3] = of[1];  // the rings' mask, a valid index
  ExpectError(ssm->CheckInvariants(),
              {"layer 3 reads the mask of another window", "Layout invariant 5"});
}

// Invariant 5: the layers of a window must hold exactly the slots their
// mask was built over: its row count, slot count, oldest slot and the
// slot positions of its first or of its last row, each differing alone,
// break it.
TEST(LayoutEdges, AMaskOutOfLockstepWithItsLayersBreaksInvariant5) {
  std::unique_ptr<Layout> base = HybridAfterAWindow(2);
  ASSERT_NE(base, nullptr);
  const int m = Access::MaskOfLayer(*base)[1];
  ASSERT_GE(m, 0);
  const Mask& mask = Access::Masks(*base)[static_cast<size_t>(m)];
  ASSERT_EQ(mask.rows, 2);
  ASSERT_GT(mask.slots, 1);
  const size_t stride = mask.slot_stride;
  std::vector<int32_t> last_row(mask.slot_pos, mask.slot_pos + 2 * stride);
  last_row[stride + static_cast<size_t>(mask.slots) - 1] += 1;  // row 1's last slot
  std::vector<int32_t> first_row(mask.slot_pos, mask.slot_pos + 2 * stride);
  first_row[0] += 1;  // row 0's first slot

  for (int field = 0; field < 5; ++field) {
    std::unique_ptr<Layout> layout = HybridAfterAWindow(2);
    ASSERT_NE(layout, nullptr);
    Mask& corrupt = Access::Masks(*layout)[static_cast<size_t>(m)];
    if (field == 0) corrupt.rows = 1;
    if (field == 1) corrupt.slots -= 1;
    if (field == 2) corrupt.first_slot += 1;
    if (field == 3) corrupt.slot_pos = last_row.data();
    if (field == 4) corrupt.slot_pos = first_row.data();
    ExpectError(layout->CheckInvariants(),
                {"layer 1 is out of lockstep with its mask", "Layout invariant 5"});
  }
}

// Every change checks the cheap invariants first (CheckBeforeChange): each
// broken alone is a refusal naming the operation and the invariant, and
// nothing changes.
TEST(LayoutEdges, EveryChangeRefusesALayoutBrokenInOneCheapInvariant) {
  struct Case {
    const char* invariant;
    void (*corrupt)(Layout&);
  };
  const Case cases[] = {
      {"Layout invariant 1", [](Layout& l) { Access::Rows(l) = 0; }},
      {"Layout invariant 1",
       [](Layout& l) {
         Access::Layers(l).clear();
         Access::Configs(l).clear();
         Access::MaskOfLayer(l).clear();
       }},
      {"Layout invariant 1", [](Layout& l) { Access::Configs(l).pop_back(); }},
      {"Layout invariant 5", [](Layout& l) { Access::MaskCapacity(l).push_back(4); }},
      {"Layout invariant 5", [](Layout& l) { Access::MaskOfLayer(l).push_back(-1); }},
  };
  for (const Case& k : cases) {
    std::unique_ptr<Layout> layout = HybridAfterAWindow(1);
    ASSERT_NE(layout, nullptr);
    k.corrupt(*layout);
    const uint64_t before = layout->StateHash();
    const Status trim = layout->Trim(1, /*bypass=*/false);
    ExpectError(trim, {"Layout::Trim refused", k.invariant});
    const Status arm = layout->Arm();
    ExpectError(arm, {"Layout::Arm refused", k.invariant});
    EXPECT_EQ(layout->StateHash(), before);
    EXPECT_FALSE(layout->armed());
    ExpectError(layout->CheckInvariants(), {k.invariant});
  }
}

// Invariant 3 checked before a change: a layer 0 with more rows than the
// layout (its positions then agree with its own), and a layer at the same
// column count as layer 0 but at other positions.
TEST(LayoutEdges, EveryChangeRefusesLayersOutOfStep) {
  std::unique_ptr<Layout> rows = Create(1, {Layer("a", CacheKind::kKv)});
  ASSERT_NE(rows, nullptr);
  const LayerConfig c = rows->config(0);
  Access::Layers(*rows)[0] = std::make_unique<BatchedKvCache>(2, c.heads, c.dim);
  uint64_t before = rows->StateHash();
  ExpectError(rows->Arm(),
              {"Layout::Arm refused", "layer 0 is out of step with layer 0", "Layout invariant 3"});
  EXPECT_EQ(rows->StateHash(), before);

  std::unique_ptr<Layout> positions =
      Create(1, {Layer("a", CacheKind::kKv), Layer("b", CacheKind::kKv)});
  ASSERT_NE(positions, nullptr);
  ASSERT_TRUE(RunForward(*positions, ForwardColumns::Dense(1, 3)).ok());
  auto padded = std::make_unique<KvCache>(c.heads, c.dim);
  ForwardColumns cols = ForwardColumns::Dense(1, 3);
  cols.right = {1};  // 3 columns, 2 tokens
  ASSERT_TRUE(AppendTo(*padded, cols).ok());
  ASSERT_EQ(padded->columns(), positions->cache(0).columns());
  Access::Layers(*positions)[1] = std::move(padded);
  before = positions->StateHash();
  ExpectError(positions->Trim(1, /*bypass=*/false),
              {"Layout::Trim refused", "layer 1 is out of step with layer 0", "Layout invariant 3"});
  EXPECT_EQ(positions->StateHash(), before);
}

// Invariant 4: rings sharing a mask must be at the same phase. Each pair
// below differs in one field only, both rings valid on their own: the
// oldest slot (a ring of pad columns only, whose slot positions are then
// all alike), the held columns (a wrapped ring of pad columns), the slot
// positions (the same tokens behind left or right padding).
TEST(LayoutEdges, RingsSharingAMaskAtAnotherPhaseBreakInvariant4) {
  for (int field = 0; field < 3; ++field) {
    std::unique_ptr<Layout> layout = Create(1, {Layer("r", CacheKind::kRotating, 2, 4),
                                                Layer("s", CacheKind::kRotating, 2, 4)});
    ASSERT_NE(layout, nullptr);
    ForwardColumns cols = ForwardColumns::Dense(1, field == 1 ? 5 : 4);
    cols.left = {field == 2 ? 1 : cols.columns};  // pads only, or one pad and 3 tokens
    ASSERT_TRUE(RunForward(*layout, cols).ok()) << "field " << field;
    ASSERT_TRUE(layout->CheckInvariants().ok()) << layout->CheckInvariants().message();
    std::unique_ptr<Cache> other = layout->cache(0).Copy();
    ColumnStore& o = const_cast<ColumnStore&>(*other->AsColumnStore());
    if (field == 0) {
      ASSERT_EQ(o.physicalSlots(), 4u);
      Access::First(o) = 1;
    } else if (field == 1) {
      ASSERT_TRUE(o.wrapped());
      Access::Held(o) -= 1;
      Access::HeldPads(o)[0] -= 1;
    } else {
      // The same 3 tokens of a window of 4, behind right padding.
      auto right = std::make_unique<RotatingCache>(o.kvHeads(), o.headDim(), 2, 4);
      ForwardColumns r = ForwardColumns::Dense(1, 4);
      r.right = {1};
      ASSERT_TRUE(AppendTo(*right, r).ok());
      other = std::move(right);
    }
    ASSERT_TRUE(other->CheckInvariants().ok()) << "field " << field << ": "
                                               << other->CheckInvariants().message();
    ASSERT_EQ(other->positions(), layout->positions());
    ASSERT_EQ(other->columns(), layout->cache(0).columns());
    Access::Layers(*layout)[1] = std::move(other);
    ExpectError(layout->CheckInvariants(),
                {"layer 1 is out of lockstep with layer 0", "Layout invariant 4"});
  }
}

// The fatal path of an operation that fails to allocate while it changes
// the state: the process aborts, naming the operation and the failure.
TEST(FatalEdgesDeathTest, AnAllocationFailureWhileChangingTheStateAborts) {
  EXPECT_DEATH((void)FatalOnAllocationFailure("Test::Change",
                                              []() -> Status { throw std::bad_alloc(); }),
               "kvspec: fatal in Test::Change: out of memory while changing the state");
  EXPECT_DEATH(
      (void)FatalOnAllocationFailure(
          "Test::Grow", []() -> Status { throw std::length_error("vector::reserve"); }),
      "kvspec: fatal in Test::Grow: an allocation larger than the largest one while changing "
      "the state");
}

// ------------------------------------------------------------ appends
// CheckForwardColumns, one condition at a time, with the boundary value
// just inside accepted.
TEST(AppendEdges, ForwardColumnsBreakingOneRuleAreRefused) {
  const std::vector<int32_t> two_rows = {0, 0};
  EXPECT_TRUE(CheckForwardColumns(ForwardColumns::Dense(2, 1), two_rows, 0).ok());
  for (int32_t columns : {0, -1}) {
    ExpectError(CheckForwardColumns(ForwardColumns::Dense(2, columns), two_rows, 0),
                {"a forward needs at least one column, got " + std::to_string(columns)});
  }
  // Columns per row: up to 2^31 - 1.
  EXPECT_TRUE(CheckForwardColumns(ForwardColumns::Dense(2, 1), two_rows, kMaxPosition - 1).ok());
  ExpectError(CheckForwardColumns(ForwardColumns::Dense(2, 2), two_rows, kMaxPosition - 1),
              {"a forward of 2 columns after 2147483646 would pass the largest position"});
  // Padding lists: one value per row each.
  ForwardColumns right = ForwardColumns::Dense(2, 2);
  right.right.push_back(0);
  ExpectError(CheckForwardColumns(right, two_rows, 0),
              {"padding lists have 2 and 3 values for 2 rows"});
  ForwardColumns left = ForwardColumns::Dense(2, 2);
  left.left.push_back(0);
  ExpectError(CheckForwardColumns(left, two_rows, 0),
              {"padding lists have 3 and 2 values for 2 rows"});
  // Per row: no negative padding, left + right <= L (L itself is fine).
  ForwardColumns all_pad = ForwardColumns::Dense(2, 3);
  all_pad.left[1] = 1;
  all_pad.right[1] = 2;
  EXPECT_TRUE(CheckForwardColumns(all_pad, two_rows, 0).ok());
  ForwardColumns left_negative = ForwardColumns::Dense(2, 3);
  left_negative.left[1] = -1;
  ExpectError(CheckForwardColumns(left_negative, two_rows, 0),
              {"row 1: left -1 + right 0 exceeds 3 columns"});
  ForwardColumns right_negative = ForwardColumns::Dense(2, 3);
  right_negative.right[1] = -1;
  ExpectError(CheckForwardColumns(right_negative, two_rows, 0),
              {"row 1: left 0 + right -1 exceeds 3 columns"});
  ForwardColumns too_much = ForwardColumns::Dense(2, 3);
  too_much.left[1] = 2;
  too_much.right[1] = 2;
  ExpectError(CheckForwardColumns(too_much, two_rows, 0),
              {"row 1: left 2 + right 2 exceeds 3 columns"});
  // Positions: a row's next position plus its real tokens up to 2^31 - 1.
  const std::vector<int32_t> late = {0, static_cast<int32_t>(kMaxPosition - 1)};
  EXPECT_TRUE(CheckForwardColumns(ForwardColumns::Dense(2, 1), late, 0).ok());
  ExpectError(CheckForwardColumns(ForwardColumns::Dense(2, 2), late, 0),
              {"row 1 at position 2147483646 would pass the largest position"});
}

// A cache's own Append refuses what CheckForwardColumns refuses, and
// changes nothing.
TEST(AppendEdges, ACacheRefusesAnEmptyForwardAndKeepsItsState) {
  BatchedRotatingCache c(2, 1, 2, 2, 3);
  ASSERT_TRUE(AppendTo(c, ForwardColumns::Dense(2, 2)).ok());
  const uint64_t before = Hash(c);
  ExpectError(AppendTo(c, ForwardColumns::Dense(2, 0)), {"at least one column, got 0"});
  EXPECT_EQ(Hash(c), before);
}

// AppendReserved re-checks its columns and refuses storage reserved for
// other columns or rows, changing nothing.
TEST(AppendEdges, AppendReservedRefusesBadColumnsAndForeignSpace) {
  BatchedKvCache c(2, 1, 2);
  ASSERT_TRUE(AppendTo(c, ForwardColumns::Dense(2, 1)).ok());
  const uint64_t before = Hash(c);
  const std::vector<float> k = Filled(2 * 40 * 2, 0.25f);

  // Columns CheckAppend refuses, with space reserved for that many columns.
  AppendSpace space;
  c.ReserveAppend(ForwardColumns::Dense(2, 2), &space);
  ForwardColumns bad = ForwardColumns::Dense(2, 2);
  bad.left[1] = 3;
  ExpectError(c.AppendReserved(bad, k.data(), k.data(), &space),
              {"row 1: left 3 + right 0 exceeds 2 columns"});
  EXPECT_EQ(Hash(c), before);

  // Space reserved for 1 column (16 slots), used for 30 (more slots).
  AppendSpace small;
  c.ReserveAppend(ForwardColumns::Dense(2, 1), &small);
  ExpectError(c.AppendReserved(ForwardColumns::Dense(2, 30), k.data(), k.data(), &small),
              {"internal: append space reserved for other columns"});
  EXPECT_EQ(Hash(c), before);

  // Space of the right slots, but a last-write list for one row.
  AppendSpace rows;
  c.ReserveAppend(ForwardColumns::Dense(2, 1), &rows);
  rows.last_write.pop_back();
  ExpectError(c.AppendReserved(ForwardColumns::Dense(2, 1), k.data(), k.data(), &rows),
              {"internal: append space reserved for other columns"});
  EXPECT_EQ(Hash(c), before);

  AppendSpace good;
  c.ReserveAppend(ForwardColumns::Dense(2, 1), &good);
  EXPECT_TRUE(c.AppendReserved(ForwardColumns::Dense(2, 1), k.data(), k.data(), &good).ok());
}

// ------------------------------------------------------------ trims, drops
TEST(TrimEdges, AWrappedRingRefusesATrimAndKeepsItsState) {
  RotatingCache c(1, 2, 2, 2);
  ASSERT_TRUE(AppendTo(c, ForwardColumns::Dense(1, 2)).ok());
  ASSERT_TRUE(c.isTrimmable());  // held 2 = capacity: not wrapped yet
  ASSERT_TRUE(AppendTo(c, ForwardColumns::Dense(1, 1, /*decode=*/true)).ok());
  ASSERT_FALSE(c.isTrimmable());
  const uint64_t before = Hash(c);
  ExpectError(c.trim(1), {"the ring has wrapped (3 columns ever held, capacity 2)",
                          "not trimmable"});
  EXPECT_EQ(Hash(c), before);
}

TEST(TrimEdges, DropTipsRefusesWithoutALastWriteAndNegativeCounts) {
  BatchedKvCache c(2, 1, 2);
  ASSERT_TRUE(AppendTo(c, ForwardColumns::Dense(2, 3)).ok());
  uint64_t before = Hash(c);
  ExpectError(c.DropTips({0, -1}), {"row 1: cannot drop -1 of the 3 tokens of the last write"});
  EXPECT_EQ(Hash(c), before);
  BatchedKvCache whole = c;
  EXPECT_TRUE(whole.DropTips({3, 0}).ok());  // all of the last write, and none

  ASSERT_TRUE(c.trim(1).ok());  // a trim is not a write
  before = Hash(c);
  ExpectError(c.DropTips({0, 0}), {"rejected tips can only be dropped right after a write"});
  EXPECT_EQ(Hash(c), before);
}

// ------------------------------------------------------------ recurrent forward

TEST(RecurrentEdges, ForwardReservedRefusesBadColumnsAndSpaceOfAnotherRound) {
  const SsmShape shape;
  BatchedSsmCache c(2, shape);
  SsmInputs in(shape, 2, 2);
  ASSERT_TRUE(c.Forward(ForwardColumns::Dense(2, 1), in.io).ok());
  uint64_t before = Hash(c);

  SsmCacheBase::ForwardSpace space;
  ForwardColumns bad = ForwardColumns::Dense(2, 2);
  bad.right[0] = 3;
  c.ReserveForward(bad, &space);
  ExpectError(c.ForwardReserved(bad, in.io, &space), {"row 0: left 0 + right 3 exceeds 2"});
  EXPECT_EQ(Hash(c), before);

  // Space reserved while no round was armed, used for the verify forward.
  SsmCacheBase::ForwardSpace unarmed;
  c.ReserveForward(ForwardColumns::Dense(2, 2), &unarmed);
  ASSERT_TRUE(c.ArmRound().ok());
  before = Hash(c);
  ExpectError(c.ForwardReserved(ForwardColumns::Dense(2, 2), in.io, &unarmed),
              {"internal: forward space reserved for another round"});
  EXPECT_EQ(Hash(c), before);
  EXPECT_FALSE(c.verified());
}

TEST(RecurrentEdges, RollbackRefusesANegativeKeepCount) {
  const SsmShape shape;
  BatchedSsmCache c(2, shape);
  ASSERT_TRUE(c.ArmRound().ok());
  SsmInputs in(shape, 2, 2);
  ASSERT_TRUE(c.Forward(ForwardColumns::Dense(2, 2), in.io).ok());
  const uint64_t before = Hash(c);
  ExpectError(c.Rollback({1, -1}), {"rollback: row 1 keeps -1 of a round of 2 tokens"});
  EXPECT_EQ(Hash(c), before);
  EXPECT_TRUE(c.armed());
  EXPECT_TRUE(c.Rollback({2, 0}).ok());  // everything, and nothing
  EXPECT_EQ(c.positions(), (std::vector<int32_t>{2, 0}));
}

// ------------------------------------------------------------ batch lifecycle
void ExpectMergeRefused(const Cache& a, const Cache& b, const std::string& why) {
  std::unique_ptr<Cache> out;
  ExpectError(MergeRows({&a, &b}, &out), {why});
  EXPECT_EQ(out, nullptr);
}

// Caches of one kind but another shape are not joined: each field of the
// shape differing alone is refused; the same shape is joined.
TEST(BatchEdges, JoiningCachesThatDifferInOneShapeFieldIsRefused) {
  const std::string different = "cannot join caches of different shapes";
  RotatingCache ring(1, 2, 2, 4);
  std::unique_ptr<Cache> out;
  EXPECT_TRUE(MergeRows({&ring, &ring}, &out).ok());
  ExpectMergeRefused(ring, RotatingCache(2, 2, 2, 4), different);  // kv heads
  ExpectMergeRefused(ring, RotatingCache(1, 4, 2, 4), different);  // dim
  ExpectMergeRefused(ring, RotatingCache(1, 2, 3, 4), different);  // window
  ExpectMergeRefused(ring, RotatingCache(1, 2, 2, 5), different);  // ring capacity
  ExpectMergeRefused(KvCache(1, 2), KvCache(1, 2, /*window=*/3), different);

  const SsmShape s;
  SsmCache ssm(s);
  EXPECT_TRUE(MergeRows({&ssm, &ssm}, &out).ok());
  for (int field = 0; field < 6; ++field) {
    SsmShape o = s;
    if (field == 0) o.value_heads = 2;
    if (field == 1) {
      o.value_heads = 2;
      o.key_heads = 2;
      SsmShape base = s;
      base.value_heads = 2;  // value heads alike: only the key heads differ
      ExpectMergeRefused(SsmCache(base), SsmCache(o), different);
      continue;
    }
    if (field == 2) o.dk = 8;
    if (field == 3) o.dv = 8;
    if (field == 4) o.conv = 2;
    if (field == 5) o.gate_per_lane = true;
    ExpectMergeRefused(ssm, SsmCache(o), different);
  }
}

TEST(BatchEdges, MixedKindsNoCachesAndNegativeRowsAreRefused) {
  KvCache kv(1, 2);
  SsmCache ssm{SsmShape{}};
  RotatingCache ring(1, 2, 2, 4);
  ExpectMergeRefused(kv, ssm, "cannot join a ssm cache with a kv cache");
  ExpectMergeRefused(kv, ring, "cannot join a rotating cache with a kv cache");
  std::unique_ptr<Cache> out;
  ExpectError(MergeRows({}, &out), {"merge needs at least one cache"});
  EXPECT_EQ(out, nullptr);

  BatchedKvCache batch(2, 1, 2);
  ASSERT_TRUE(AppendTo(batch, ForwardColumns::Dense(2, 1)).ok());
  ExpectError(FilterRows(batch, {-1, 1}, &out), {"filter: no row -1 (the batch has 2)"});
  EXPECT_EQ(out, nullptr);
  EXPECT_TRUE(FilterRows(batch, {0, 1}, &out).ok());  // the first and the last row
}

// ------------------------------------------------------------ kinds
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

// A ring gathered from no sources holds the columns asked for; a plain
// cache always holds every column.
TEST(KindsEdges, GatheredSlotsOfNoSourcesAreTheColumns) {
  EXPECT_EQ(ColumnStore::GatheredSlots({}, 5), 5);
  KvCache plain(1, 2);
  ASSERT_TRUE(AppendTo(plain, ForwardColumns::Dense(1, 2)).ok());
  EXPECT_EQ(ColumnStore::GatheredSlots({{&plain, 0}}, 7), 7);
  RotatingCache ring(1, 2, 2, 4);
  ASSERT_TRUE(AppendTo(ring, ForwardColumns::Dense(1, 2)).ok());
  EXPECT_EQ(ColumnStore::GatheredSlots({{&ring, 0}}, 7), 2);
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

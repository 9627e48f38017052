// The column store's invariants (core/kv_cache.h, checked in
// core/kv_cache.cc): each condition broken alone, in an otherwise valid
// store, fails naming its invariant, and the boundary values just inside
// hold.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "kvspec/core/invariants_test_access.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout_test_util.h"

namespace kvspec {
namespace {

using Access = InvariantsTestAccess;
using layout_test::AppendTo;
using layout_test::ExpectBroken;
using layout_test::ExpectError;
using layout_test::Filled;

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

// Invariant 5 compares buffer sizes with a product of the shape that could
// overflow: a slot count so large that keys * values would wrap around to
// exactly the floats held must still be a mismatch, and named as the keys'.
TEST(ColumnStoreEdges, AnOverflowingBufferSizeNeverMatches) {
  KvCache c(1, 2);  // one head of 2 lanes
  ASSERT_TRUE(AppendTo(c, ForwardColumns::Dense(1, 1)).ok());
  const size_t slots = c.physicalSlots();
  ASSERT_GT(slots, 0u);
  // rows * heads * slots' * row bytes = 8 * (2^63 + slots) wraps to 8 * slots.
  Access::Slots(c) = (size_t{1} << 63) + slots;
  const Status s = c.CheckInvariants();
  ExpectError(s, {"ColumnStore invariant 5",
                  "keys holds " + std::to_string(8 * slots) + " values, " +
                      std::to_string(std::numeric_limits<size_t>::max()) + " expected"});
}

TEST(ColumnStoreEdges, ANextPositionListOfTheWrongLengthBreaksInvariant5) {
  BatchedKvCache c(2, 1, 2);
  ASSERT_TRUE(AppendTo(c, ForwardColumns::Dense(2, 2)).ok());
  Access::Next(c).push_back(2);
  ExpectError(c.CheckInvariants(),
              {"next positions holds 3 values, 2 expected", "ColumnStore invariant 5"});
}

TEST(Invariants, CorruptedColumnStoresFail) {
  BatchedKvCache c(2, 1, 2);
  ForwardColumns cols = ForwardColumns::Dense(2, 3);
  cols.left = {1, 0};
  const auto k = Filled(2 * 3 * 2, 1.0f);
  ASSERT_TRUE(c.Append(cols, k.data(), k.data()).ok());
  ASSERT_TRUE(c.CheckInvariants().ok()) << c.CheckInvariants().message();

  BatchedKvCache order = c;
  std::vector<int32_t>& pos = Access::SlotPositions(order);
  ASSERT_EQ(pos[2], 1);  // row 0: pad, 0, 1
  pos[2] = 0;            // two slots of position 0
  ExpectBroken(order.CheckInvariants(), "ColumnStore invariant 7");

  BatchedKvCache pads = c;
  Access::HeldPads(pads)[1] = 1;  // row 1 has no pad column
  ExpectBroken(pads.CheckInvariants(), "ColumnStore invariant 10");

  BatchedKvCache next = c;
  Access::Next(next)[1] = 4;  // more tokens than columns
  ExpectBroken(next.CheckInvariants(), "ColumnStore invariant 6");

  // A negative next position is outside [0, columns] too: in a row that
  // holds tokens (whose slot positions then also exceed it) and in an
  // empty cache (where nothing else could notice it).
  BatchedKvCache negative = c;
  Access::Next(negative)[0] = -1;
  ExpectBroken(negative.CheckInvariants(), "ColumnStore invariant 6");
  BatchedKvCache empty(2, 1, 2);
  ASSERT_TRUE(empty.CheckInvariants().ok());
  Access::Next(empty)[1] = -2;
  ExpectBroken(empty.CheckInvariants(), "ColumnStore invariant 6");
}

}  // namespace
}  // namespace kvspec

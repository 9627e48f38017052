// Unit tests of the mask builder (core/mask_builder.h): each real query of
// a forward sees the positions up to its own (the last `window` of them
// with a window), a pad column is a query that sees nothing, a slot of no
// position is seen by no query, and a mask reserved for its columns is
// built without allocating.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kvspec/core/cache.h"
#include "kvspec/core/mask_builder.h"
#include "kvspec/kernels/kv_view.h"
#include "kvspec/kernels/mask.h"

namespace kvspec {
namespace {

// Two rows of a forward of 3 columns: row 0 left-padded by one column,
// row 1 right-padded by one, 2 real tokens each; the rows' next positions
// after it are 5 and 7, so row 0's tokens are at 3 and 4, row 1's at 5, 6.
ForwardColumns TwoPaddedRows() {
  ForwardColumns cols = ForwardColumns::Dense(2, 3);
  cols.left = {1, 0};
  cols.right = {0, 1};
  return cols;
}

const std::vector<int32_t> kNext = {5, 7};

TEST(MaskBuilder, EachRealQuerySeesEveryPositionUpToItsOwn) {
  const std::vector<int32_t> slot_pos(2 * 8, -1);
  const Mask m = BuildMask(TwoPaddedRows(), kNext, kNoWindow, slot_pos.data(), 8, 8);
  EXPECT_EQ(m.rows, 2);
  EXPECT_EQ(m.queries, 3);
  EXPECT_EQ(m.window, kNoWindow);
  EXPECT_EQ(m.query_pos, (std::vector<int32_t>{-1, 3, 4, 5, 6, -1}));
  EXPECT_EQ(m.hi, (std::vector<int32_t>{0, 3, 4, 5, 6, 0}));
  EXPECT_EQ(m.lo, (std::vector<int32_t>{1, 0, 0, 0, 0, 1}));  // pads: lo > hi
}

TEST(MaskBuilder, AWindowSeesTheLastWindowPositionsUpToItsOwn) {
  const std::vector<int32_t> slot_pos(2 * 8, -1);
  const Mask m = BuildMask(TwoPaddedRows(), kNext, 2, slot_pos.data(), 8, 8);
  EXPECT_EQ(m.window, 2);
  EXPECT_EQ(m.hi, (std::vector<int32_t>{0, 3, 4, 5, 6, 0}));
  EXPECT_EQ(m.lo, (std::vector<int32_t>{1, 2, 3, 4, 5, 1}));
  // A window longer than the positions held starts at position 0.
  const Mask wide = BuildMask(TwoPaddedRows(), kNext, 6, slot_pos.data(), 8, 8);
  EXPECT_EQ(wide.lo, (std::vector<int32_t>{1, 0, 0, 0, 1, 1}));
}

// Admits reads the slot positions in physical order: a slot is seen by a
// query when its position lies in the query's range; a slot holding -1
// (padding, a dropped tip, an unwritten slot) by none; a pad query sees
// nothing.
TEST(MaskBuilder, AdmitsTheSlotsWhosePositionsLieInTheQuerysRange) {
  // Row 0 holds positions 0..4 in slots 0..4 behind a pad slot at 5; row 1
  // a ring read in place: slots hold 4, 5, 6, -1, 2, 3.
  const std::vector<int32_t> slot_pos = {0, 1, 2, 3, 4, -1, 4, 5, 6, -1, 2, 3};
  const Mask m = BuildMask(TwoPaddedRows(), kNext, 3, slot_pos.data(), 6, 6, 4);
  EXPECT_EQ(m.slot_pos, slot_pos.data());
  EXPECT_EQ(m.slot_stride, 6u);
  EXPECT_EQ(m.slots, 6);
  EXPECT_EQ(m.first_slot, 4);
  const auto seen = [&](int row, int32_t query) {
    std::vector<int32_t> slots;
    for (int32_t s = 0; s < m.slots; ++s) {
      if (m.Admits(row, query, s)) slots.push_back(s);
    }
    return slots;
  };
  EXPECT_EQ(seen(0, 0), std::vector<int32_t>{});  // a pad query
  EXPECT_EQ(seen(0, 1), (std::vector<int32_t>{1, 2, 3}));  // position 3: 1..3
  EXPECT_EQ(seen(0, 2), (std::vector<int32_t>{2, 3, 4}));  // position 4: 2..4
  EXPECT_EQ(seen(1, 0), (std::vector<int32_t>{0, 1, 5}));  // position 5: 3..5
  EXPECT_EQ(seen(1, 1), (std::vector<int32_t>{0, 1, 2}));  // position 6: 4..6
  EXPECT_EQ(seen(1, 2), std::vector<int32_t>{});  // a pad query
}

// The mask over a cache's view takes the view's slot positions, stride,
// slots and first slot.
TEST(MaskBuilder, TheMaskOfAViewReadsTheViewsSlots) {
  const std::vector<float> k(2 * 1 * 4 * 2, 0.5f);
  const std::vector<int32_t> slot_pos = {0, 1, 2, 3, 4, 5, 6, -1};
  const KvView view = KvView::Dense(k.data(), k.data(), slot_pos.data(), 2, 1, 2, 4, 1);
  const Mask m = BuildMask(TwoPaddedRows(), kNext, kNoWindow, view);
  const Mask direct = BuildMask(TwoPaddedRows(), kNext, kNoWindow, view.slot_pos,
                                view.slot_stride, view.slots, view.first_slot);
  EXPECT_EQ(m.slot_pos, view.slot_pos);
  EXPECT_EQ(m.slot_stride, view.slot_stride);
  EXPECT_EQ(m.slots, view.slots);
  EXPECT_EQ(m.first_slot, view.first_slot);
  EXPECT_EQ(m.query_pos, direct.query_pos);
  EXPECT_EQ(m.lo, direct.lo);
  EXPECT_EQ(m.hi, direct.hi);
}

// A mask reserved for the forward's columns is built into its own storage
// (a layout reserves its masks before it changes any layer); building it
// again for another forward replaces every query.
TEST(MaskBuilder, AReservedMaskIsBuiltInPlace) {
  const std::vector<int32_t> slot_pos(2 * 8, -1);
  const ForwardColumns cols = TwoPaddedRows();
  Mask m;
  ReserveMask(&m, cols, 2);
  const int32_t* query_pos = m.query_pos.data();
  const int32_t* lo = m.lo.data();
  const int32_t* hi = m.hi.data();
  BuildMaskInto(&m, cols, kNext, 2, slot_pos.data(), 8, 8, 0);
  EXPECT_EQ(m.query_pos.data(), query_pos);
  EXPECT_EQ(m.lo.data(), lo);
  EXPECT_EQ(m.hi.data(), hi);
  const Mask fresh = BuildMask(cols, kNext, 2, slot_pos.data(), 8, 8);
  EXPECT_EQ(m.query_pos, fresh.query_pos);
  EXPECT_EQ(m.lo, fresh.lo);
  EXPECT_EQ(m.hi, fresh.hi);
  // A decode of one column on both rows after it.
  BuildMaskInto(&m, ForwardColumns::Dense(2, 1, /*decode=*/true), {6, 8}, 2, slot_pos.data(), 8,
                8, 0);
  EXPECT_EQ(m.queries, 1);
  EXPECT_EQ(m.query_pos, (std::vector<int32_t>{5, 7}));
  EXPECT_EQ(m.lo, (std::vector<int32_t>{4, 6}));
  EXPECT_EQ(m.hi, (std::vector<int32_t>{5, 7}));
}

}  // namespace
}  // namespace kvspec

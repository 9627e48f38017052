// Unit tests of the column store (core/kv_cache.h): KvCache, BatchedKvCache
// and the rotating caches: kinds, sizes, storage alignment, appends and the
// columns they accept, trims and tip drops (each refusal changes nothing),
// ring storage bounds, deep copies.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout_test_util.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/kernels/aligned_vector.h"
#include "kvspec/kernels/kv_view.h"

namespace kvspec {
namespace {

using layout_test::AppendTo;
using layout_test::ExpectError;

uint64_t HashOf(const Cache& c) {
  Hasher h;
  c.HashState(&h);
  return h.value();
}

std::vector<float> Filled(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

TEST(KvCache, KindsAndPredicates) {
  KvCache one(2, 8);
  BatchedKvCache many(3, 2, 8);
  EXPECT_EQ(one.kind(), "kv");
  EXPECT_EQ(many.kind(), "batched_kv");
  EXPECT_TRUE(IsPlainKvCache(one.kind()));
  EXPECT_TRUE(IsPlainKvCache(many.kind()));
  EXPECT_FALSE(IsRotatingCache(one.kind()));
  // Fail closed: unknown, empty and near-miss kinds are not capable.
  for (const char* k : {"", "KV", "kv ", "persisted(kv)", "rotating2", "ssm(kv)"}) {
    EXPECT_FALSE(IsPlainKvCache(k)) << k;
    EXPECT_FALSE(IsRotatingCache(k)) << k;
    EXPECT_FALSE(IsRecurrentCache(k)) << k;
    EXPECT_FALSE(IsAttentionCache(k)) << k;
  }
}

TEST(KvCache, BytesPerToken) {
  EXPECT_EQ(KvCache(1, 4).bytesPerToken(), 1u * (4 + 4) * 4);
  EXPECT_EQ(BatchedKvCache(5, 8, 128).bytesPerToken(), 8u * (128 + 128) * 4);
}

TEST(KvCache, MisuseIsRefusedAndChangesNothing) {
  BatchedKvCache c(2, 1, 2);
  const auto k = Filled(2 * 3 * 2, 1.0f);
  ASSERT_TRUE(c.Append(ForwardColumns::Dense(2, 3), k.data(), k.data()).ok());
  const uint64_t before = HashOf(c);

  ForwardColumns left = ForwardColumns::Dense(2, 3);
  left.left = {1, 0};  // row 0 holds tokens: no left padding
  Status s = c.Append(left, k.data(), k.data());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("left padding"), std::string::npos) << s.message();

  ForwardColumns too_much = ForwardColumns::Dense(2, 3);
  too_much.right = {2, 2};
  too_much.left = {0, 2};
  EXPECT_FALSE(c.Append(too_much, k.data(), k.data()).ok());

  ForwardColumns wrong_rows = ForwardColumns::Dense(3, 3);
  EXPECT_FALSE(c.Append(wrong_rows, k.data(), k.data()).ok());

  EXPECT_FALSE(c.trim(4).ok());              // more than stored
  EXPECT_FALSE(c.trim(-1).ok());
  EXPECT_FALSE(c.DropTips({1}).ok());        // wrong row count
  EXPECT_FALSE(c.DropTips({4, 0}).ok());     // more than the last write
  EXPECT_EQ(HashOf(c), before);
  EXPECT_EQ(c.positions(), (std::vector<int32_t>{3, 3}));
}

TEST(KvCache, BypassTrimOnlyRightAfterAWindow) {
  KvCache c(1, 1);
  const auto k = Filled(4, 1.0f);
  ASSERT_TRUE(c.Append(ForwardColumns::Dense(1, 4), k.data(), k.data()).ok());
  EXPECT_FALSE(c.CheckTrim(5, true).ok());
  ASSERT_TRUE(c.trim(2, true).ok());
  EXPECT_EQ(c.positions()[0], 2);
  // The bypass bound is spent: a second bypass trim is refused.
  EXPECT_FALSE(c.trim(1, true).ok());
  ASSERT_TRUE(c.Append(ForwardColumns::Dense(1, 1, /*decode=*/true), k.data(), k.data()).ok());
  EXPECT_FALSE(c.trim(1, true).ok());  // after a decode
  EXPECT_TRUE(c.trim(1).ok());         // a plain trim is fine
  EXPECT_EQ(c.positions()[0], 2);
}

TEST(KvCache, TrimDropsLastRealTokensWhateverPadsSitBetween) {
  KvCache c(1, 1);
  // Columns: t0 t1 pad (prepared padding), then trim 2.
  ForwardColumns cols = ForwardColumns::Dense(1, 3);
  cols.right = {1};
  const auto k = Filled(3, 10.0f);
  ASSERT_TRUE(c.Append(cols, k.data(), k.data()).ok());
  ASSERT_TRUE(c.trim(2).ok());
  EXPECT_EQ(c.positions()[0], 0);
  EXPECT_EQ(c.columns(), 1);  // the pad column remains
  EXPECT_TRUE(c.LogicalSlots(0).empty());
}

TEST(KvCache, RaggedDropTurnsExtraTipsIntoPadding) {
  BatchedKvCache c(2, 1, 1);
  const auto k = Filled(2 * 4, 1.0f);
  ASSERT_TRUE(c.Append(ForwardColumns::Dense(2, 4), k.data(), k.data()).ok());
  ASSERT_TRUE(c.DropTips({1, 3}).ok());
  EXPECT_EQ(c.positions(), (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(c.columns(), 3);
  const KvView v = c.View();
  EXPECT_EQ(v.slot_pos[0 * v.slot_stride + 2], 2);
  EXPECT_EQ(v.slot_pos[1 * v.slot_stride + 0], 0);
  EXPECT_EQ(v.slot_pos[1 * v.slot_stride + 1], -1);
  EXPECT_EQ(v.slot_pos[1 * v.slot_stride + 2], -1);
}

// A plain cache's buffer grows geometrically (core/kv_cache.h): when an
// append needs more slots than the buffer has, to max(needed, 1.5 x its
// slots, 16). One token at a time, the buffer is reallocated at 16, 24, 36,
// 54, 81, 121 and 181 slots and at no other append; a window that needs
// more than that gets exactly what it needs.
TEST(KvCache, PlainBufferGrowsByHalfItsSlotsFromSixteen) {
  const auto x = Filled(200 * 4, 0.5f);
  KvCache c(1, 2);  // 1 row: 16 bytes of keys and values and 4 of position per slot
  const size_t per_slot = c.bytesPerToken() + sizeof(int32_t);
  EXPECT_EQ(c.allocatedBytes(), 0u);
  std::vector<size_t> sizes;
  for (int i = 0; i < 150; ++i) {
    ASSERT_TRUE(c.Append(ForwardColumns::Dense(1, 1, /*decode=*/true), x.data(), x.data()).ok());
    const size_t slots = c.allocatedBytes() / per_slot;
    ASSERT_EQ(c.allocatedBytes(), slots * per_slot);
    if (sizes.empty() || sizes.back() != slots) sizes.push_back(slots);
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{16, 24, 36, 54, 81, 121, 181}));
  KvCache w(1, 2);
  ASSERT_TRUE(w.Append(ForwardColumns::Dense(1, 40), x.data(), x.data()).ok());
  EXPECT_EQ(w.allocatedBytes(), 40 * per_slot);
  ASSERT_TRUE(w.Append(ForwardColumns::Dense(1, 1, /*decode=*/true), x.data(), x.data()).ok());
  EXPECT_EQ(w.allocatedBytes(), 60 * per_slot);
  ASSERT_TRUE(w.Append(ForwardColumns::Dense(1, 30), x.data(), x.data()).ok());
  EXPECT_EQ(w.allocatedBytes(), 90 * per_slot);  // 1.5 x 60 holds the 71 needed
}

TEST(KvCache, CopyIsDeep) {
  KvCache a(1, 2);
  const auto k = Filled(2 * 2, 1.0f);
  ASSERT_TRUE(a.Append(ForwardColumns::Dense(1, 2), k.data(), k.data()).ok());
  std::unique_ptr<Cache> b = a.Copy();
  const uint64_t hb = HashOf(*b);
  ASSERT_TRUE(a.trim(1).ok());
  EXPECT_EQ(HashOf(*b), hb);
  EXPECT_EQ(b->positions()[0], 2);
  EXPECT_EQ(b->kind(), "kv");
}

bool StartsACacheLine(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kCacheLine == 0;
}

// The caches' storage starts on a cache line (kernels/aligned_vector.h): rows
// of 16 floats or a multiple of it then each start one, so a 512-bit load of
// a row touches one line. Checked after each growth of a plain buffer, for a
// ring, for copies, and for every recurrent state buffer of a batched ssm
// cache whose conv and recurrent parts are multiples of 16 floats.
TEST(CacheStorage, RowsOfSixteenFloatsStartACacheLine) {
  const int dim = 64;
  const auto x = Filled(3 * 2 * 40 * dim, 0.5f);
  BatchedKvCache plain(3, 2, dim);
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(plain.Append(ForwardColumns::Dense(3, 1, /*decode=*/true), x.data(), x.data()).ok());
    const KvView view = plain.View();
    for (int r = 0; r < 3; ++r) {
      for (int h = 0; h < 2; ++h) {
        for (int32_t t = 0; t < view.slots; ++t) {
          ASSERT_TRUE(StartsACacheLine(view.Key(r, h, t))) << i << " " << r << " " << h << " " << t;
          ASSERT_TRUE(StartsACacheLine(view.Value(r, h, t))) << i << " " << r << " " << h << " " << t;
        }
      }
    }
  }
  BatchedRotatingCache ring(2, 2, dim, 8, 12);
  ASSERT_TRUE(ring.Append(ForwardColumns::Dense(2, 5), x.data(), x.data()).ok());
  const std::unique_ptr<Cache> copy = ring.Copy();
  const Cache* rings[] = {&ring, copy.get()};
  for (const Cache* c : rings) {
    const KvView view = c->AsColumnStore()->View();
    EXPECT_TRUE(StartsACacheLine(view.k));
    EXPECT_TRUE(StartsACacheLine(view.v));
  }
  SsmShape shape;
  shape.value_heads = 2;
  shape.key_heads = 1;
  shape.dk = 16;
  shape.dv = 32;
  shape.conv = 4;  // conv: 3 x 64 channels; recurrent: 2 x 16 x 32
  BatchedSsmCache ssm(3, shape);
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(StartsACacheLine(ssm.ConvState(r))) << r;
    EXPECT_TRUE(StartsACacheLine(ssm.RecurrentState(r))) << r;
  }
}

// ------------------------------------------------------------ moved and gathered columns
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
  const uint64_t before = HashOf(c);
  ExpectError(AppendTo(c, ForwardColumns::Dense(2, 0)), {"at least one column, got 0"});
  EXPECT_EQ(HashOf(c), before);
}

// AppendReserved re-checks its columns and refuses storage reserved for
// other columns or rows, changing nothing.
TEST(AppendEdges, AppendReservedRefusesBadColumnsAndForeignSpace) {
  BatchedKvCache c(2, 1, 2);
  ASSERT_TRUE(AppendTo(c, ForwardColumns::Dense(2, 1)).ok());
  const uint64_t before = HashOf(c);
  const std::vector<float> k = layout_test::Filled(2 * 40 * 2, 0.25f);

  // Columns CheckAppend refuses, with space reserved for that many columns.
  AppendSpace space;
  c.ReserveAppend(ForwardColumns::Dense(2, 2), &space);
  ForwardColumns bad = ForwardColumns::Dense(2, 2);
  bad.left[1] = 3;
  ExpectError(c.AppendReserved(bad, k.data(), k.data(), &space),
              {"row 1: left 3 + right 0 exceeds 2 columns"});
  EXPECT_EQ(HashOf(c), before);

  // Space reserved for 1 column (16 slots), used for 30 (more slots).
  AppendSpace small;
  c.ReserveAppend(ForwardColumns::Dense(2, 1), &small);
  ExpectError(c.AppendReserved(ForwardColumns::Dense(2, 30), k.data(), k.data(), &small),
              {"internal: append space reserved for other columns"});
  EXPECT_EQ(HashOf(c), before);

  // Space of the right slots, but a last-write list for one row.
  AppendSpace rows;
  c.ReserveAppend(ForwardColumns::Dense(2, 1), &rows);
  rows.last_write.pop_back();
  ExpectError(c.AppendReserved(ForwardColumns::Dense(2, 1), k.data(), k.data(), &rows),
              {"internal: append space reserved for other columns"});
  EXPECT_EQ(HashOf(c), before);

  AppendSpace good;
  c.ReserveAppend(ForwardColumns::Dense(2, 1), &good);
  EXPECT_TRUE(c.AppendReserved(ForwardColumns::Dense(2, 1), k.data(), k.data(), &good).ok());
}

// ------------------------------------------------------------ trims, tip drops
TEST(TrimEdges, AWrappedRingRefusesATrimAndKeepsItsState) {
  RotatingCache c(1, 2, 2, 2);
  ASSERT_TRUE(AppendTo(c, ForwardColumns::Dense(1, 2)).ok());
  ASSERT_TRUE(c.isTrimmable());  // held 2 = capacity: not wrapped yet
  ASSERT_TRUE(AppendTo(c, ForwardColumns::Dense(1, 1, /*decode=*/true)).ok());
  ASSERT_FALSE(c.isTrimmable());
  const uint64_t before = HashOf(c);
  ExpectError(c.trim(1), {"the ring has wrapped (3 columns ever held, capacity 2)",
                          "not trimmable"});
  EXPECT_EQ(HashOf(c), before);
}

TEST(TrimEdges, DropTipsRefusesWithoutALastWriteAndNegativeCounts) {
  BatchedKvCache c(2, 1, 2);
  ASSERT_TRUE(AppendTo(c, ForwardColumns::Dense(2, 3)).ok());
  uint64_t before = HashOf(c);
  ExpectError(c.DropTips({0, -1}), {"row 1: cannot drop -1 of the 3 tokens of the last write"});
  EXPECT_EQ(HashOf(c), before);
  BatchedKvCache whole = c;
  EXPECT_TRUE(whole.DropTips({3, 0}).ok());  // all of the last write, and none

  ASSERT_TRUE(c.trim(1).ok());  // a trim is not a write
  before = HashOf(c);
  ExpectError(c.DropTips({0, 0}), {"rejected tips can only be dropped right after a write"});
  EXPECT_EQ(HashOf(c), before);
}

// Dropping the tips of the last write leaves the cache as if only the
// accepted tokens had been written, peak (the wrap bookkeeping) included,
// also when trims before that write had lowered the columns below the peak.
TEST(TipDrops, PeakIsAsIfOnlyTheAcceptedTokensWereWritten) {
  const auto x = Filled(6 * 2, 1.0f);
  KvCache a(1, 2), b(1, 2);
  for (KvCache* c : {&a, &b}) {
    ASSERT_TRUE(c->Append(ForwardColumns::Dense(1, 6), x.data(), x.data()).ok());
    ASSERT_TRUE(c->trim(1).ok());  // right after the write: peak 5
    ASSERT_TRUE(c->trim(2).ok());  // 3 columns held, peak still 5
  }
  ASSERT_TRUE(a.Append(ForwardColumns::Dense(1, 2), x.data(), x.data()).ok());
  ASSERT_TRUE(a.trim(1, /*bypass=*/true).ok());
  ASSERT_TRUE(b.Append(ForwardColumns::Dense(1, 1), x.data(), x.data()).ok());
  EXPECT_EQ(a.columns(), b.columns());
  EXPECT_EQ(b.peak(), 5);
  EXPECT_EQ(a.peak(), b.peak());
}

// A bypass trim drops at most the real tokens of the last window of every
// row: one more is refused by the cache itself (not only by a layout).
TEST(TipDrops, BypassTrimBeyondTheLastWindowIsRefused) {
  const auto x = Filled(4 * 2, 1.0f);
  KvCache c(1, 2);
  ASSERT_TRUE(c.Append(ForwardColumns::Dense(1, 4), x.data(), x.data()).ok());
  ASSERT_TRUE(c.Append(ForwardColumns::Dense(1, 2), x.data(), x.data()).ok());
  const Status s = c.trim(3, /*bypass=*/true);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("wrote only 2 real tokens"), std::string::npos) << s.message();
  EXPECT_EQ(c.columns(), 6);
  EXPECT_TRUE(c.trim(2, /*bypass=*/true).ok());
  EXPECT_EQ(c.columns(), 4);
}

// ------------------------------------------------------------ ring storage
// A ring is written in place: once a rotating cache (window 3, capacity 5)
// has wrapped, its storage stays the same whatever the number of decodes
// that follow, at most capacity + 1 slots per row (a decode appends one
// column to at most the capacity it holds); after a window of 8 columns,
// at most W - 1 + 8 slots (the older columns its earliest query sees, then
// the new ones), again unchanged by the decodes that follow.
TEST(RingStorage, StaysBoundedWhateverTheDecodes) {
  RotatingCache ring(/*kv_heads=*/1, /*dim=*/4, /*window=*/3, /*capacity=*/5);
  const auto x = layout_test::Filled(8 * 4, 0.5f);
  const auto decodes = [&](int n) {
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(
          ring.Append(ForwardColumns::Dense(1, 1, /*decode=*/true), x.data(), x.data()).ok());
    }
  };
  ASSERT_TRUE(ring.Append(ForwardColumns::Dense(1, 4), x.data(), x.data()).ok());
  decodes(4);  // position 8: wrapped
  const size_t wrapped = ring.allocatedBytes();
  EXPECT_LE(wrapped, ColumnStore::StorageBytes(1, 1, 4, KvType::kF32, 5 + 1));
  for (int i = 0; i < 40; ++i) {
    decodes(1);
    ASSERT_EQ(ring.allocatedBytes(), wrapped) << "after " << i + 1 << " more decodes";
  }
  EXPECT_EQ(ring.positions(), std::vector<int32_t>{48});
  ASSERT_TRUE(ring.Append(ForwardColumns::Dense(1, 8), x.data(), x.data()).ok());
  const size_t windowed = ring.allocatedBytes();
  EXPECT_LE(windowed, ColumnStore::StorageBytes(1, 1, 4, KvType::kF32, 3 - 1 + 8));
  for (int i = 0; i < 20; ++i) {
    decodes(1);
    ASSERT_EQ(ring.allocatedBytes(), windowed) << "after " << i + 1 << " decodes";
  }
}

}  // namespace
}  // namespace kvspec

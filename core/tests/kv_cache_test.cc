// Unit tests of KvCache / BatchedKvCache: kinds, sizes, misuse refused with
// nothing changed, trim and tip dropping, deep copies.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "kvspec/kernels/attention.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/mask_builder.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/kernels/aligned_vector.h"

namespace kvspec {
namespace {

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

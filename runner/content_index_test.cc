// The content index (runner/content_index.cc): Recover names zero, pad
// and unknown slots by every byte; Seen returns the sorted tags of the
// slots the mask admits and scans only the mask's slots; tags print and
// join as the trace writes them.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kvspec/kernels/kv_view.h"
#include "kvspec/kernels/mask.h"
#include "kvspec/kernels/quantize.h"
#include "kvspec/runner/runner.h"
#include "kvspec/runner/runner_internal.h"
#include "kvspec/trace/values.h"

namespace kvspec::trace {
namespace {

Tag Token(int32_t pos, int32_t id) {
  Tag t;
  t.kind = Tag::kToken;
  t.pos = pos;
  t.id = id;
  return t;
}

Tag Other(Tag::Kind kind) {
  Tag t;
  t.kind = kind;
  return t;
}

uint32_t BitsOf(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// One row of dense storage: kHeads heads, kDim floats, kSlots slots.
constexpr int kHeads = 2, kDim = 3, kSlots = 8, kLayer = 1;

struct Storage {
  std::vector<float> k = std::vector<float>(kHeads * kSlots * kDim, 0.0f);
  std::vector<float> v = std::vector<float>(kHeads * kSlots * kDim, 0.0f);
  std::vector<int32_t> slot_pos = std::vector<int32_t>(kSlots, -1);
  KvView view() const {
    return KvView::Dense(k.data(), v.data(), slot_pos.data(), 1, kHeads, kDim, kSlots, 0);
  }
  float* Key(int h, int slot) { return &k[(h * kSlots + slot) * kDim]; }
  float* Value(int h, int slot) { return &v[(h * kSlots + slot) * kDim]; }
  void FillSlot(int slot, float key, float value) {
    for (int h = 0; h < kHeads; ++h) {
      for (int d = 0; d < kDim; ++d) {
        Key(h, slot)[d] = key;
        Value(h, slot)[d] = value;
      }
    }
  }
  // Writes token (pos, id)'s contents into `slot` and remembers them.
  void WriteToken(ContentIndex* index, int slot, int32_t pos, int32_t id) {
    std::vector<float> q(kHeads * kDim), kk(kHeads * kDim), vv(kHeads * kDim);
    AttentionToken(kLayer, id, pos, kHeads, kHeads, kDim, q.data(), kk.data(), vv.data());
    index->Remember(kLayer, id, pos, kk.data(), vv.data(), kk.size(), KvType::kF32, kDim);
    for (int h = 0; h < kHeads; ++h) {
      std::memcpy(Key(h, slot), &kk[h * kDim], kDim * sizeof(float));
      std::memcpy(Value(h, slot), &vv[h * kDim], kDim * sizeof(float));
    }
    slot_pos[slot] = pos;
  }
};

// A slot is `zero` or `pad` only when every key and value float of every
// head holds that bit pattern; one float off anywhere (the last float of
// the last head's value included) makes it an unknown content: `junk`.
TEST(ContentIndexEdges, RecoverNamesZeroPadAndJunkSlotsByEveryByte) {
  const float pad = PadValue();
  Storage s;
  ContentIndex index;
  s.WriteToken(&index, 7, 5, 9);
  s.FillSlot(0, 0.0f, 0.0f);
  s.FillSlot(1, pad, pad);
  // 2: zero but the last value float of the last head.
  s.FillSlot(2, 0.0f, 0.0f);
  s.Value(kHeads - 1, 2)[kDim - 1] = 1.0f;
  // 3: zero keys, values of another pattern (only the values differ).
  s.FillSlot(3, 0.0f, 0.5f);
  // 4: padding but the last key float of the last head.
  s.FillSlot(4, pad, pad);
  s.Key(kHeads - 1, 4)[kDim - 1] = 0.0f;
  // 5: head 0 all zero, head 1 all padding.
  s.FillSlot(5, 0.0f, 0.0f);
  for (int d = 0; d < kDim; ++d) s.Key(1, 5)[d] = s.Value(1, 5)[d] = pad;
  // 6: padding keys, zero values.
  s.FillSlot(6, pad, 0.0f);
  const KvView view = s.view();
  EXPECT_EQ(index.Recover(kLayer, view, 0, 0).kind, Tag::kZero);
  EXPECT_EQ(index.Recover(kLayer, view, 0, 1).kind, Tag::kPad);
  for (int slot = 2; slot <= 6; ++slot) {
    EXPECT_EQ(index.Recover(kLayer, view, 0, slot).kind, Tag::kJunk) << "slot " << slot;
  }
  const Tag t = index.Recover(kLayer, view, 0, 7);
  EXPECT_EQ(t, Token(5, 9));
  // The same bytes under another layer are not that token.
  EXPECT_EQ(index.Recover(kLayer + 1, view, 0, 7).kind, Tag::kJunk);
  // The pad value is a quiet NaN, not zero, so the two cannot be confused.
  EXPECT_NE(BitsOf(pad), 0u);
}

// A layer that stores q8_0 or q4_0: the index remembers what a token's
// contents read back as once quantized, so a slot holding the quantized
// bytes is that token; a pad column (NaN contents: non-finite blocks) is
// `pad`, never-written storage `zero`, another token's bytes `junk`.
TEST(ContentIndexEdges, RecoverReadsQuantizedSlots) {
  constexpr int kBlockDim = 64, kSlotsQ = 4;
  for (KvType type : {KvType::kBf16, KvType::kQ8_0, KvType::kQ4_0}) {
    const size_t row = KvRowBytes(type, kBlockDim);
    std::vector<uint8_t> k(kHeads * kSlotsQ * row, 0), v(k.size(), 0);
    std::vector<int32_t> slot_pos(kSlotsQ, -1);
    ContentIndex index;
    auto store = [&](int slot, const float* kk, const float* vv) {
      for (int h = 0; h < kHeads; ++h) {
        const size_t at = (static_cast<size_t>(h) * kSlotsQ + slot) * row;
        ASSERT_TRUE(StoreKvRow(type, kk + h * kBlockDim, kBlockDim, &k[at]).ok());
        ASSERT_TRUE(StoreKvRow(type, vv + h * kBlockDim, kBlockDim, &v[at]).ok());
      }
    };
    std::vector<float> q(kHeads * kBlockDim), kk(q.size()), vv(q.size());
    AttentionToken(kLayer, 9, 5, kHeads, kHeads, kBlockDim, q.data(), kk.data(), vv.data());
    index.Remember(kLayer, 9, 5, kk.data(), vv.data(), kk.size(), type, kBlockDim);
    store(0, kk.data(), vv.data());
    const std::vector<float> pads(kk.size(), PadValue());
    store(1, pads.data(), pads.data());
    AttentionToken(kLayer, 10, 6, kHeads, kHeads, kBlockDim, q.data(), kk.data(), vv.data());
    store(3, kk.data(), vv.data());  // written, never remembered
    const KvView view = KvView::DenseBytes(type, k.data(), v.data(), slot_pos.data(), 1, kHeads,
                                           kBlockDim, kSlotsQ, 0);
    EXPECT_EQ(index.Recover(kLayer, view, 0, 0), Token(5, 9)) << KvTypeName(type);
    EXPECT_EQ(index.Recover(kLayer, view, 0, 1).kind, Tag::kPad) << KvTypeName(type);
    EXPECT_EQ(index.Recover(kLayer, view, 0, 2).kind, Tag::kZero) << KvTypeName(type);
    EXPECT_EQ(index.Recover(kLayer, view, 0, 3).kind, Tag::kJunk) << KvTypeName(type);
  }
}

// Mask admitting positions lo..hi of the one query of one row.
Mask OneQueryMask(const Storage& s, int32_t lo, int32_t hi) {
  Mask m;
  m.rows = 1;
  m.queries = 1;
  m.slot_pos = s.slot_pos.data();
  m.slot_stride = kSlots;
  m.slots = kSlots;
  m.query_pos = {hi};
  m.lo = {lo};
  m.hi = {hi};
  return m;
}

// The tags of the admitted slots, sorted (tokens by position, then pad,
// zero, junk), whatever their physical order; the first and the last slot
// are scanned too.
TEST(ContentIndexEdges, SeenOfOneQueryIsTheSortedTagsOfAdmittedSlots) {
  const float pad = PadValue();
  Storage s;
  ContentIndex index;
  s.WriteToken(&index, 0, 3, 3);
  s.WriteToken(&index, 1, 1, 11);
  s.WriteToken(&index, 2, 6, 6);  // outside 1..5
  s.FillSlot(3, pad, pad);
  s.slot_pos[3] = 2;  // an admitted slot holding padding
  s.WriteToken(&index, 4, 0, 0);  // outside 1..5
  s.FillSlot(5, 0.0f, 0.0f);
  s.slot_pos[5] = 4;  // an admitted zero slot
  // slot 6: no position
  s.WriteToken(&index, 7, 5, 5);  // the last slot
  const KvView view = s.view();
  const Mask mask = OneQueryMask(s, 1, 5);
  const std::vector<Tag> want = {Token(1, 11), Token(3, 3), Token(5, 5), Other(Tag::kPad),
                                 Other(Tag::kZero)};
  EXPECT_EQ(index.Seen(kLayer, view, mask, 0, 0), want);
  SlotTags tags(index, kLayer, view, mask);
  EXPECT_EQ(tags.Seen(0, 0), want);
  // Nothing admitted: nothing seen.
  const Mask none = OneQueryMask(s, 7, 9);
  EXPECT_EQ(index.Seen(kLayer, view, none, 0, 0), std::vector<Tag>{});
}

// A mask scans `slots` slots per row (kernels/mask.h), which may be fewer
// than its stride: a slot past them is not seen even when it holds a
// position the query admits. (Storage of 8 slots, a mask over the first 7:
// slot 7 is in bounds, so scanning one slot too many shows as a tag.)
TEST(ContentIndexEdges, SeenScansOnlyTheMasksSlots) {
  Storage s;
  ContentIndex index;
  s.WriteToken(&index, 0, 2, 2);
  s.WriteToken(&index, kSlots - 2, 3, 8);  // the last slot scanned
  s.WriteToken(&index, kSlots - 1, 4, 4);  // admitted, but past the scan
  const KvView view = s.view();
  Mask mask = OneQueryMask(s, 0, 9);
  const std::vector<Tag> all = {Token(2, 2), Token(3, 8), Token(4, 4)};
  EXPECT_EQ(index.Seen(kLayer, view, mask, 0, 0), all);
  mask.slots = kSlots - 1;
  const std::vector<Tag> want = {Token(2, 2), Token(3, 8)};
  EXPECT_EQ(index.Seen(kLayer, view, mask, 0, 0), want);
  SlotTags tags(index, kLayer, view, mask);
  EXPECT_EQ(tags.Seen(0, 0), want);
}

TEST(TagEdges, ToStringAndJoinTags) {
  EXPECT_EQ(Token(5, 5).ToString(), "5");
  EXPECT_EQ(Token(5, 7).ToString(), "5:7");
  EXPECT_EQ(Token(0, 0).ToString(), "0");
  EXPECT_EQ(Other(Tag::kPad).ToString(), "pad");
  EXPECT_EQ(Other(Tag::kZero).ToString(), "zero");
  EXPECT_EQ(Other(Tag::kJunk).ToString(), "junk");
  using runner_internal::JoinTags;
  EXPECT_EQ(JoinTags({Token(0, 0), Token(2, 9), Other(Tag::kPad), Other(Tag::kZero),
                      Other(Tag::kJunk)}),
            " 0 2:9 pad zero junk");
  EXPECT_EQ(JoinTags({}), "");
}

}  // namespace
}  // namespace kvspec::trace

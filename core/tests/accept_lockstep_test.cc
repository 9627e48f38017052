// Behaviour of core/ that survivors of the fifth fresh mutation sample
// (tools/mutate --sample 60 --seed 2026120308) showed no test observed:
// what Layout::Accept refuses before it changes anything (each condition on
// its own), and the lockstep of layers sharing a mask in the number of
// columns they hold. Written after that run: they do not change its score.
// Also two older survivors of issue 20 that no test killed any more: a
// ring's storage bounded by its capacity, a truncated recurrent state
// refused before it is allocated, and grouped-query attention with 8 or more
// query heads per KV head (the kernel's second block of 4 heads of a group).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvspec/core/batch.h"
#include "kvspec/core/codec/codec.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/tests/layout_test_util.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/kernels/attention.h"
#include "kvspec/kernels/kv_view.h"
#include "kvspec/kernels/mask.h"

namespace kvspec {

// The states the lockstep test corrupts (the friend that ColumnStore and
// Layout name for tests that corrupt states; this binary's own definition).
struct InvariantsTestAccess {
  static int64_t& Held(ColumnStore& c) { return c.held_; }
  static std::vector<int64_t>& HeldPads(ColumnStore& c) { return c.held_pads_; }
  static std::vector<std::unique_ptr<Cache>>& Layers(Layout& l) { return l.layers_; }
};

namespace {

using Access = InvariantsTestAccess;
using layout_test::Filled;
using layout_test::Layer;
using layout_test::RunForward;

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

// Layers sharing a mask hold the same columns (ColumnStore::SamePhase): a
// ring that holds one column more than the layer it shares the mask with
// (an empty slot counted as a held pad column), although each ring is
// valid on its own and both have the same slots, phase, positions, peak and
// last write, breaks Layout invariant 4. Its next append would keep a
// different number of columns than its mask's layer.
TEST(LayerLockstep, RingsSharingAMaskMustHoldTheSameColumns) {
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(1, {Layer("r", CacheKind::kRotating, 2, 4),
                                 Layer("s", CacheKind::kRotating, 2, 4)},
                             &layout)
                  .ok());
  // The rings wrap (window 3, then decodes to position 6), a window of 2
  // overwrites their oldest columns, and a bypass trim drops its last
  // token: they hold fewer columns than they have slots, and than the
  // layout's columns.
  ASSERT_TRUE(RunForward(*layout, ForwardColumns::Dense(1, 3)).ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(RunForward(*layout, ForwardColumns::Dense(1, 1, /*decode=*/true)).ok());
  }
  ASSERT_TRUE(RunForward(*layout, ForwardColumns::Dense(1, 2)).ok());
  ASSERT_TRUE(layout->Trim(1, /*bypass=*/true).ok());
  auto* ring = static_cast<ColumnStore*>(Access::Layers(*layout)[1].get());
  ASSERT_EQ(ring->AsColumnStore(), layout->cache(1).AsColumnStore());
  int64_t& held = Access::Held(*ring);
  ASSERT_TRUE(layout->CheckInvariants().ok()) << layout->CheckInvariants().message();
  const KvView view = ring->View();
  ASSERT_LT(held, ring->columns());
  ASSERT_LT(held, static_cast<int64_t>(view.slots));
  // The slot after its newest column is empty.
  const size_t next_slot = (static_cast<size_t>(view.first_slot) + static_cast<size_t>(held)) %
                           static_cast<size_t>(view.slots);
  ASSERT_EQ(view.slot_pos[next_slot], -1);
  held += 1;
  Access::HeldPads(*ring)[0] += 1;
  const Status own = ring->CheckInvariants();
  ASSERT_TRUE(own.ok()) << own.message();
  const Status s = layout->CheckInvariants();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("layer 1 is out of lockstep with layer 0 (Layout invariant 4)"),
            std::string::npos)
      << s.message();
}

// A ring is written in place: once a rotating cache (window 3, capacity 5)
// has wrapped, its storage stays the same whatever the number of decodes
// that follow, at most capacity + 1 slots per row (a decode appends one
// column to at most the capacity it holds); after a window of 8 columns,
// at most W - 1 + 8 slots (the older columns its earliest query sees, then
// the new ones), again unchanged by the decodes that follow.
TEST(RingStorage, StaysBoundedWhateverTheDecodes) {
  RotatingCache ring(/*kv_heads=*/1, /*dim=*/4, /*window=*/3, /*capacity=*/5);
  const auto x = Filled(8 * 4, 0.5f);
  const auto decodes = [&](int n) {
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(
          ring.Append(ForwardColumns::Dense(1, 1, /*decode=*/true), x.data(), x.data()).ok());
    }
  };
  ASSERT_TRUE(ring.Append(ForwardColumns::Dense(1, 4), x.data(), x.data()).ok());
  decodes(4);  // position 8: wrapped
  const size_t wrapped = ring.allocatedBytes();
  EXPECT_LE(wrapped, ColumnStore::StorageBytes(1, 1, 4, 5 + 1));
  for (int i = 0; i < 40; ++i) {
    decodes(1);
    ASSERT_EQ(ring.allocatedBytes(), wrapped) << "after " << i + 1 << " more decodes";
  }
  EXPECT_EQ(ring.positions(), std::vector<int32_t>{48});
  ASSERT_TRUE(ring.Append(ForwardColumns::Dense(1, 8), x.data(), x.data()).ok());
  const size_t windowed = ring.allocatedBytes();
  EXPECT_LE(windowed, ColumnStore::StorageBytes(1, 1, 4, 3 - 1 + 8));
  for (int i = 0; i < 20; ++i) {
    decodes(1);
    ASSERT_EQ(ring.allocatedBytes(), windowed) << "after " << i + 1 << " decodes";
  }
}

// The codec allocates a recurrent cache's states before it reads them, so
// it first checks that the input holds them: an encoding cut to half its
// length (half of the states missing) is refused as "recurrent state
// larger than the input", before anything is allocated.
TEST(CodecDamage, ATruncatedRecurrentStateIsRefusedBeforeItIsAllocated) {
  SsmShape shape;
  shape.value_heads = 4;
  shape.key_heads = 2;
  shape.dk = 16;
  shape.dv = 16;
  SsmCache cache(shape);
  std::string bytes;
  ASSERT_TRUE(EncodeCache(cache, &bytes).ok());
  const size_t state_bytes = 2 * (shape.ConvFloats() + shape.RecurrentFloats()) * sizeof(float);
  // The states are nearly all of the encoding.
  ASSERT_GT(state_bytes, bytes.size() - 256);
  std::unique_ptr<Cache> out;
  ASSERT_TRUE(DecodeCache(bytes, &out).ok());
  out.reset();
  const Status s = DecodeCache(bytes.substr(0, bytes.size() / 2), &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("recurrent state larger than the input"), std::string::npos)
      << s.message();
  EXPECT_EQ(out, nullptr);
}

// The up-front check is exactly as strong as the states are large: over
// every cut of a batched recurrent cache's encoding, the cuts refused as
// "recurrent state larger than the input" are consecutive, and there are
// exactly as many as the bytes of both buffers of every row (the states
// start right after the shape, so a cut leaves 0 .. state bytes - 1 of them;
// a longer cut is refused by whatever later field it cuts into). Shapes
// with one and four conv taps, whose conv state has a key part and none.
TEST(CodecDamage, TheStateSizeCheckRefusesExactlyTheCutsThatCannotHoldTheStates) {
  for (const int conv : {1, 4}) {
    SCOPED_TRACE("conv kernel " + std::to_string(conv));
    SsmShape shape;
    shape.value_heads = 2;
    shape.key_heads = 1;
    shape.dk = 2;
    shape.dv = 3;
    shape.conv = conv;
    const int rows = 2;
    BatchedSsmCache cache(rows, shape);
    std::string bytes;
    ASSERT_TRUE(EncodeCache(cache, &bytes).ok());
    const size_t state_bytes =
        size_t{rows} * 2 * (shape.ConvFloats() + shape.RecurrentFloats()) * sizeof(float);
    ASSERT_GT(bytes.size(), state_bytes);
    std::unique_ptr<Cache> out;
    ASSERT_TRUE(DecodeCache(bytes, &out).ok());
    out.reset();
    std::vector<size_t> refused_as_state;
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
      const Status s = DecodeCache(bytes.substr(0, cut), &out);
      ASSERT_FALSE(s.ok()) << "a cut at " << cut << " of " << bytes.size() << " bytes";
      ASSERT_EQ(out, nullptr);
      if (s.message().find("recurrent state larger than the input") != std::string::npos) {
        refused_as_state.push_back(cut);
      }
    }
    ASSERT_FALSE(refused_as_state.empty());
    EXPECT_EQ(refused_as_state.size(), state_bytes);
    EXPECT_EQ(refused_as_state.back() - refused_as_state.front() + 1, refused_as_state.size())
        << "not consecutive";
  }
}

// An armed cache's encoding ends with its round records, one per row, each
// an 8-byte count and the record's floats. The codec allocates the records
// before it reads them, so it first checks that the input holds a count for
// every row: an armed cache of 16 rows cut anywhere inside its last 16
// counts (an armed round with no verify token yet, so every record is
// empty) is refused with exactly that message, before anything is read.
TEST(CodecDamage, RoundRecordsOfAnArmedCacheCutShortAreRefusedBeforeTheyAreAllocated) {
  SsmShape shape;
  shape.value_heads = 1;
  shape.key_heads = 1;
  shape.dk = 2;
  shape.dv = 2;
  const int rows = 16;
  BatchedSsmCache cache(rows, shape);
  ASSERT_TRUE(cache.ArmRound().ok());
  std::string bytes;
  ASSERT_TRUE(EncodeCache(cache, &bytes).ok());
  std::unique_ptr<Cache> out;
  ASSERT_TRUE(DecodeCache(bytes, &out).ok());
  out.reset();
  const size_t counts = rows * sizeof(uint64_t);
  ASSERT_GT(bytes.size(), counts);
  // The last 16 counts are zero: the records are empty.
  EXPECT_EQ(bytes.substr(bytes.size() - counts), std::string(counts, '\0'));
  for (const size_t cut : {size_t{1}, size_t{8}, size_t{9}, counts - 1, counts}) {
    SCOPED_TRACE("cut by " + std::to_string(cut) + " bytes");
    const Status s = DecodeCache(bytes.substr(0, bytes.size() - cut), &out);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("round records claim more than the input holds"),
              std::string::npos)
        << s.message();
    EXPECT_EQ(out, nullptr);
  }
}

// Grouped-query attention with 8 or more query heads per KV head (the
// kernel serves a group 4 heads at a time, then one at a time): every query
// head's output matches the scalar reference, on 1 and 2 KV heads, dims
// below, at and above a vector, for a decode and a window of 3 queries.
TEST(AttentionGroups, EightOrMoreQueryHeadsPerKvHeadMatchTheReference) {
  for (const int group : {8, 9, 12}) {
    for (const int kv_heads : {1, 2}) {
      for (const int dim : {3, 8, 17}) {
        for (const int32_t queries : {1, 3}) {
          const int32_t slots = 10;
          const int q_heads = kv_heads * group;
          std::vector<float> k(static_cast<size_t>(kv_heads) * slots * dim);
          std::vector<float> v(k.size());
          for (size_t i = 0; i < k.size(); ++i) {
            k[i] = std::sin(0.37f * static_cast<float>(i));
            v[i] = std::cos(0.23f * static_cast<float>(i));
          }
          std::vector<int32_t> pos(static_cast<size_t>(slots));
          for (int32_t s = 0; s < slots; ++s) pos[s] = s;
          const KvView view = KvView::Dense(k.data(), v.data(), pos.data(), 1, kv_heads, dim,
                                            slots, 0);
          Mask mask;
          mask.rows = 1;
          mask.queries = queries;
          mask.slot_pos = pos.data();
          mask.slot_stride = static_cast<size_t>(slots);
          mask.slots = slots;
          for (int32_t t = 0; t < queries; ++t) {
            const int32_t p = slots - queries + t;
            mask.query_pos.push_back(p);
            mask.lo.push_back(0);
            mask.hi.push_back(p);
          }
          std::vector<float> q(static_cast<size_t>(queries) * q_heads * dim);
          for (size_t i = 0; i < q.size(); ++i) {
            q[i] = std::sin(1.3f * static_cast<float>(i) + 0.5f);
          }
          std::vector<float> got(q.size(), 777.0f), want(q.size(), -777.0f);
          Attend(q.data(), q_heads, view, mask, got.data());
          AttendReference(q.data(), q_heads, view, mask, want.data());
          for (size_t i = 0; i < q.size(); ++i) {
            ASSERT_LE(std::fabs(got[i] - want[i]), kAttentionTolerance * (1 + std::fabs(want[i])))
                << "group " << group << ", " << kv_heads << " KV heads, dim " << dim << ", "
                << queries << " queries: query " << i / dim / q_heads << " head "
                << i / dim % q_heads << " lane " << i % dim << ": " << got[i] << " vs "
                << want[i];
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvspec

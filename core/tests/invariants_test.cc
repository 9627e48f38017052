// Unit tests of CheckInvariants() (core/invariants.h): the column store, the
// recurrent caches and the layout hold their invariants after the operations
// a trace runs (windows with padding, decodes that wrap rings, rounds with
// ragged accepts, trims, filter, join, extract, copy, a codec round trip),
// and a deliberately corrupted state fails them, naming the invariant.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvspec/core/codec/codec.h"
#include "kvspec/core/invariants.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/tests/layout_test_util.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/kernels/conv1d.h"

namespace kvspec {

// Test-only access to the state the tests corrupt (a friend of the classes).
struct InvariantsTestAccess {
  static std::vector<int32_t>& SlotPositions(ColumnStore& c) { return c.slot_pos_; }
  static std::vector<int64_t>& HeldPads(ColumnStore& c) { return c.held_pads_; }
  static std::vector<int32_t>& Next(ColumnStore& c) { return c.next_; }
  static std::vector<uint8_t>& Active(SsmCacheBase& c) { return c.active_; }
  static bool& Verified(SsmCacheBase& c) { return c.verified_; }
  static SsmShape& Shape(SsmCacheBase& c) { return c.shape_; }
  static std::vector<uint8_t>& Snapshots(SsmCacheBase& c) { return c.snapshot_; }
  static std::vector<int32_t>& RoundReal(SsmCacheBase& c) { return c.round_real_; }
  static std::vector<std::vector<float>>& Records(SsmCacheBase& c) { return c.record_; }
  static std::vector<std::unique_ptr<Cache>>& Layers(Layout& l) { return l.layers_; }
  static std::vector<int32_t>& BypassBound(Layout& l) { return l.bypass_bound_; }
  static std::vector<int>& MaskOfLayer(Layout& l) { return l.mask_of_layer_; }
  static std::vector<LayerConfig>& Configs(Layout& l) { return l.configs_; }
};

namespace {

using Access = InvariantsTestAccess;
using layout_test::Filled;
using layout_test::Layer;
using layout_test::RunForward;

// kv, two rings sharing a mask (window 3, capacity 4), a ring of its own
// window and a recurrent layer.
std::unique_ptr<Layout> Hybrid(int rows) {
  std::unique_ptr<Layout> layout;
  EXPECT_TRUE(Layout::Create(rows,
                             {Layer("a", CacheKind::kKv), Layer("r", CacheKind::kRotating, 3, 4),
                              Layer("s", CacheKind::kRotating, 3, 4),
                              Layer("w", CacheKind::kRotating, 2, 0),
                              Layer("g", CacheKind::kSsm)},
                             &layout)
                  .ok());
  return layout;
}

void ExpectValid(const Layout& layout, const std::string& after) {
  const Status s = layout.CheckInvariants();
  EXPECT_TRUE(s.ok()) << "after " << after << ": " << s.message();
  for (size_t l = 0; l < layout.size(); ++l) {
    const Status c = layout.cache(l).CheckInvariants();
    EXPECT_TRUE(c.ok()) << "after " << after << ", layer " << l << ": " << c.message();
  }
}

void ExpectBroken(const Status& s, const std::string& invariant) {
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(invariant), std::string::npos) << s.message();
}

TEST(Invariants, HoldAfterTypicalLayoutOperations) {
  std::unique_ptr<Layout> layout = Hybrid(2);
  ASSERT_NE(layout, nullptr);
  ExpectValid(*layout, "create");
  ForwardColumns window = ForwardColumns::Dense(2, 3);
  window.left = {1, 0};
  ASSERT_TRUE(RunForward(*layout, window).ok());
  ExpectValid(*layout, "a left-padded window");
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(RunForward(*layout, ForwardColumns::Dense(2, 1, /*decode=*/true)).ok());
    ExpectValid(*layout, "decode " + std::to_string(i) + " (the rings wrap)");
  }
  ASSERT_TRUE(layout->Arm().ok());
  ExpectValid(*layout, "arm");
  ForwardColumns verify = ForwardColumns::Dense(2, 3);
  verify.right = {1, 0};
  ASSERT_TRUE(RunForward(*layout, verify).ok());
  ExpectValid(*layout, "the verify forward");
  ASSERT_TRUE(layout->Accept({1, 2}).ok());
  ExpectValid(*layout, "a ragged accept");
  std::unique_ptr<Layout> copy = layout->Copy();
  ExpectValid(*copy, "copy");
  ASSERT_TRUE(layout->Join(*copy).ok());
  ExpectValid(*layout, "join");
  ASSERT_TRUE(layout->Filter({0, 3}).ok());
  ExpectValid(*layout, "filter");
  std::unique_ptr<Layout> row;
  ASSERT_TRUE(layout->Extract(1, &row).ok());
  ExpectValid(*row, "extract");
  std::string bytes;
  ASSERT_TRUE(EncodeLayout(*layout, &bytes).ok());
  std::unique_ptr<Layout> back;
  ASSERT_TRUE(DecodeLayout(bytes, &back).ok());
  ExpectValid(*back, "a codec round trip");
}

TEST(Invariants, HoldAfterTrims) {
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(2, {Layer("a", CacheKind::kKv), Layer("r", CacheKind::kRotating, 3, 5)},
                             &layout)
                  .ok());
  ForwardColumns window = ForwardColumns::Dense(2, 4);
  window.left = {2, 0};
  ASSERT_TRUE(RunForward(*layout, window).ok());
  ASSERT_TRUE(layout->Trim(1, /*bypass=*/false).ok());
  ExpectValid(*layout, "trim");
  ASSERT_TRUE(RunForward(*layout, ForwardColumns::Dense(2, 3)).ok());
  ASSERT_TRUE(layout->Trim(2, /*bypass=*/true).ok());
  ExpectValid(*layout, "trim bypass");
  layout->ForgetBypassBound();
  ExpectValid(*layout, "a reload's forgotten bound");
}

// ------------------------------------------------------------ corrupted
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

TEST(Invariants, CorruptedLayoutsFail) {
  std::unique_ptr<Layout> layout = Hybrid(1);
  ASSERT_NE(layout, nullptr);
  ASSERT_TRUE(RunForward(*layout, ForwardColumns::Dense(1, 3)).ok());
  ExpectValid(*layout, "a window");

  std::unique_ptr<Layout> step = layout->Copy();
  Access::Layers(*step)[0] = std::make_unique<KvCache>(1, 4);  // an empty layer 0
  ExpectBroken(step->CheckInvariants(), "Layout invariant 3");
  // Every change checks the layout first: on a broken one it is refused,
  // naming the operation and the invariant, and changes nothing.
  const uint64_t broken = step->StateHash();
  const Status trim = step->Trim(0, /*bypass=*/false);
  ExpectBroken(trim, "Layout invariant 3");
  EXPECT_NE(trim.message().find("Layout::Trim refused"), std::string::npos) << trim.message();
  const Status arm = step->Arm();
  ExpectBroken(arm, "Layout invariant 3");
  EXPECT_NE(arm.message().find("Layout::Arm refused"), std::string::npos) << arm.message();
  EXPECT_EQ(step->StateHash(), broken);
  EXPECT_FALSE(step->armed());

  std::unique_ptr<Layout> bound = layout->Copy();
  Access::BypassBound(*bound) = {4};  // beyond the 3 tokens held
  ExpectBroken(bound->CheckInvariants(), "Layout invariant 6");

  // A bound within the tokens held (3 + 1) but beyond the 1 token the last
  // forward (a decode) wrote: no layer can drop it.
  std::unique_ptr<Layout> last = layout->Copy();
  ASSERT_TRUE(RunForward(*last, ForwardColumns::Dense(1, 1, /*decode=*/true)).ok());
  ExpectValid(*last, "a decode");
  Access::BypassBound(*last) = {2};
  ExpectBroken(last->CheckInvariants(), "Layout invariant 7");

  // No layers at all (and so no configs and no mask indexes either).
  std::unique_ptr<Layout> none = layout->Copy();
  Access::Layers(*none).clear();
  Access::Configs(*none).clear();
  Access::MaskOfLayer(*none).clear();
  ExpectBroken(none->CheckInvariants(), "Layout invariant 1");

  std::unique_ptr<Layout> extra = layout->Copy();
  Access::MaskOfLayer(*extra).push_back(0);  // a mask index for a layer that is not there
  ExpectBroken(extra->CheckInvariants(), "Layout invariant 5");

  Access::MaskOfLayer(*layout)[1] = 7;  // there is one mask per window
  ExpectBroken(layout->CheckInvariants(), "Layout invariant 5");
}

// Layers sharing a mask must be at the same phase: a ring that holds the
// same tokens but got them by decodes (so its last write differs) is not.
TEST(Invariants, LayersSharingAMaskOutOfLockstepFail) {
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(1, {Layer("r", CacheKind::kRotating, 2, 4),
                                 Layer("s", CacheKind::kRotating, 2, 4)},
                             &layout)
                  .ok());
  ASSERT_TRUE(RunForward(*layout, ForwardColumns::Dense(1, 3)).ok());
  auto other = std::make_unique<RotatingCache>(1, 4, 2, 4);
  const auto x = Filled(4, 0.5f);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(other->Append(ForwardColumns::Dense(1, 1, true), x.data(), x.data()).ok());
  }
  ASSERT_TRUE(other->CheckInvariants().ok());
  ASSERT_EQ(other->positions(), layout->positions());
  Access::Layers(*layout)[1] = std::move(other);
  ExpectBroken(layout->CheckInvariants(), "Layout invariant 4");
}

// Each window has its own mask: a layer pointed at the mask of another
// window (a valid index, so the index check passes) breaks invariant 5,
// named as such, whether the window or only the ring's capacity differs.
TEST(Invariants, LayerReadingTheMaskOfAnotherWindowFails) {
  for (size_t layer : {size_t{1}, size_t{2}}) {
    std::unique_ptr<Layout> layout;  // a copy has no masks: one layout each
    ASSERT_TRUE(Layout::Create(1, {Layer("r", CacheKind::kRotating, 2, 4),
                                   Layer("s", CacheKind::kRotating, 3, 4),
                                   Layer("t", CacheKind::kRotating, 2, 8)},
                               &layout)
                    .ok());
    ASSERT_TRUE(RunForward(*layout, ForwardColumns::Dense(1, 3)).ok());
    ExpectValid(*layout, "three windows");
    std::vector<int>& masks = Access::MaskOfLayer(*layout);
    ASSERT_EQ(masks.size(), 3u);
    ASSERT_GE(masks[0], 0);
    ASSERT_NE(masks[layer], masks[0]);
    masks[layer] = masks[0];
    const Status s = layout->CheckInvariants();
    ExpectBroken(s, "Layout invariant 5");
    EXPECT_NE(s.message().find("layer " + std::to_string(layer) +
                               " reads the mask of another window"),
              std::string::npos)
        << s.message();
  }
}

// A layer cache must hold as many rows as the layout: a batched cache of 2
// rows in a layout of 1 breaks invariant 2, naming both counts.
TEST(Invariants, LayerWithAnotherRowCountFails) {
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(1, {Layer("a", CacheKind::kKv)}, &layout).ok());
  ExpectValid(*layout, "create");
  const LayerConfig c = layout->config(0);
  Access::Layers(*layout)[0] = std::make_unique<BatchedKvCache>(2, c.heads, c.dim);
  const Status s = layout->CheckInvariants();
  ExpectBroken(s, "Layout invariant 2");
  EXPECT_NE(s.message().find("with 2 rows in a layout of 1"), std::string::npos) << s.message();
}

// The bug detector: a broken invariant aborts, naming the operation.
TEST(InvariantsDeathTest, ABrokenInvariantAborts) {
  KvCache c(1, 2);
  const auto k = Filled(2, 1.0f);
  ASSERT_TRUE(c.Append(ForwardColumns::Dense(1, 1), k.data(), k.data()).ok());
  Access::HeldPads(c)[0] = 3;
  EXPECT_DEATH(AssertInvariants(c, "Test::Corrupt", __FILE__, __LINE__),
               "invariant broken after Test::Corrupt .*ColumnStore invariant 10");
#if KVSPEC_INVARIANTS_CHECKED
  EXPECT_DEATH((void)c.Append(ForwardColumns::Dense(1, 1), k.data(), k.data()),
               "invariant broken after ColumnStore::Append");
#endif
}

}  // namespace
}  // namespace kvspec

// The layout's invariants (core/layout.h, checked in core/layout.cc): each
// broken alone, in an otherwise valid layout (a layer's own, its row count
// and kind, layers in step, rings sharing a mask in lockstep, the masks,
// the bypass bound), fails naming its invariant; every change refuses a
// layout broken in a cheap invariant and changes nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kvspec/core/invariants_test_access.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/layout_test_util.h"
#include "kvspec/kernels/kv_view.h"
#include "kvspec/kernels/mask.h"

namespace kvspec {
namespace {

using Access = InvariantsTestAccess;
using layout_test::AppendTo;
using layout_test::ExpectBroken;
using layout_test::ExpectError;
using layout_test::Filled;
using layout_test::Layer;
using layout_test::RunForward;

ColumnStore& Store(Layout& l, size_t layer) {
  return const_cast<ColumnStore&>(*Access::Layers(l)[layer]->AsColumnStore());
}

void ExpectValid(const Layout& layout, const std::string& after) {
  const Status s = layout.CheckInvariants();
  EXPECT_TRUE(s.ok()) << "after " << after << ": " << s.message();
  for (size_t l = 0; l < layout.size(); ++l) {
    const Status c = layout.cache(l).CheckInvariants();
    EXPECT_TRUE(c.ok()) << "after " << after << ", layer " << l << ": " << c.message();
  }
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

}  // namespace
}  // namespace kvspec

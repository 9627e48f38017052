// The batch lifecycle (core/batch.h, and Layout::Join): caches of another
// kind or shape are not joined, rows that are not there are neither
// filtered nor extracted, and layouts join only with the same layer list
// (every field of every layer), not with themselves; each refusal changes
// nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kvspec/core/batch.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/layout_test_util.h"
#include "kvspec/core/ssm_cache.h"

namespace kvspec {
namespace {

using layout_test::AppendTo;
using layout_test::AttentionBuffers;
using layout_test::ExpectError;
using layout_test::Layer;

LayerConfig Kv(const std::string& name) { return Layer(name, CacheKind::kKv); }

LayerConfig Ring(const std::string& name, int32_t window, int32_t capacity = 0) {
  return Layer(name, CacheKind::kRotating, window, capacity);
}

std::unique_ptr<Layout> Created(int rows, const std::vector<LayerConfig>& layers) {
  std::unique_ptr<Layout> layout;
  const Status s = Layout::Create(rows, layers, &layout);
  EXPECT_TRUE(s.ok()) << s.message();
  return layout;
}

// ------------------------------------------------------------ caches
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

// Extracting a row the batch does not have is refused, a negative row as
// much as one past the end, naming the row and the batch's row count; the
// cache is left as it was and nothing is made.
TEST(BatchExtract, ANegativeRowIsRefused) {
  BatchedKvCache cache(2, 1, 4);
  auto hash = [&cache] {
    Hasher h;
    cache.HashState(&h);
    return h.value();
  };
  const uint64_t before = hash();
  for (int32_t row : {-1, -2, 2}) {
    std::unique_ptr<Cache> made;
    const Status s = ExtractRow(cache, row, &made);
    ASSERT_FALSE(s.ok()) << "row " << row;
    EXPECT_EQ(s.message(), "extract: no row " + std::to_string(row) + " (the batch has 2)");
    EXPECT_EQ(made, nullptr);
    EXPECT_EQ(hash(), before);
  }
}

// ------------------------------------------------------------ layouts
// Join refuses a layer list that differs in a layer's kind or head count,
// naming the layer; a layout of another layer count; and the layout itself.
// Nothing changes on either side.
TEST(LayoutJoinEdges, KindHeadsLayerCountAndSelfAreRefused) {
  LayerConfig ring = Ring("a", 4);
  LayerConfig kv = Kv("a");
  kv.window = 4;  // the ring's shape, another kind
  LayerConfig two = ring;
  two.heads = 2;
  two.q_heads = 2;
  LayerConfig one = ring;
  one.q_heads = 2;  // the same query heads as `two`, one head
  struct Case {
    const char* what;
    std::vector<LayerConfig> ours, theirs;
    std::string message;
  };
  LayerConfig renamed = ring;
  renamed.name = "b";
  const Case cases[] = {
      {"name", {ring}, {renamed}, "join needs the same layer list (layer 'a' differs)"},
      {"kind", {ring}, {kv}, "join needs the same layer list (layer 'a' differs)"},
      {"heads", {one}, {two}, "join needs the same layer list (layer 'a' differs)"},
      {"more layers", {ring}, {ring, Kv("b")}, "join needs the same layer list"},
      {"fewer layers", {ring, Kv("b")}, {ring}, "join needs the same layer list"},
  };
  for (const Case& c : cases) {
    std::unique_ptr<Layout> a = Created(1, c.ours), b = Created(2, c.theirs);
    ASSERT_NE(a, nullptr) << c.what;
    ASSERT_NE(b, nullptr) << c.what;
    const uint64_t ours = a->StateHash(), theirs = b->StateHash();
    const Status s = a->Join(*b);
    EXPECT_FALSE(s.ok()) << c.what;
    EXPECT_EQ(s.message(), c.message) << c.what;
    EXPECT_EQ(a->StateHash(), ours) << c.what;
    EXPECT_EQ(b->StateHash(), theirs) << c.what;
    EXPECT_EQ(a->rows(), 1) << c.what;
  }
  std::unique_ptr<Layout> a = Created(2, {ring});
  const uint64_t before = a->StateHash();
  const Status s = a->Join(*a);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "a layout cannot join itself");
  EXPECT_EQ(a->StateHash(), before);
  EXPECT_EQ(a->rows(), 2);
  // and a copy of it joins
  std::unique_ptr<Layout> copy = a->Copy();
  ASSERT_TRUE(a->Join(*copy).ok());
  EXPECT_EQ(a->rows(), 4);
}

// Layouts join only with the same layer list: a layer of another head dim
// is named as the difference.
TEST(LayoutJoin, ALayerOfAnotherDimIsRefusedByName) {
  LayerConfig kv;
  kv.name = "a";
  kv.dim = 4;
  LayerConfig wide = kv;
  wide.dim = 8;
  std::unique_ptr<Layout> a, b;
  ASSERT_TRUE(Layout::Create(1, {kv}, &a).ok());
  ASSERT_TRUE(Layout::Create(1, {wide}, &b).ok());
  const Status s = a->Join(*b);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("join needs the same layer list"), std::string::npos)
      << s.message();
  EXPECT_EQ(a->rows(), 1);
}

// Layouts join only with the same layer list, every field of every layer
// included: a layout whose one layer differs from ours in a single field
// (a ring of another capacity, an ssm layer of another conv size, ...) is
// refused by the layout, naming the layer, and nothing changes.
TEST(LayoutJoin, EveryFieldOfEveryLayerMustMatch) {
  LayerConfig ring;
  ring.name = "r";
  ring.kind = CacheKind::kRotating;
  ring.heads = 1;
  ring.q_heads = 2;
  ring.window = 4;
  ring.capacity = 6;
  LayerConfig ssm;
  ssm.name = "s";
  ssm.kind = CacheKind::kSsm;
  ssm.heads = 2;
  ssm.kheads = 1;
  struct Change {
    const char* field;
    int layer;  // 0: the ring, 1: the ssm layer
    void (*apply)(LayerConfig*);
  };
  const Change changes[] = {
      {"name", 0, [](LayerConfig* c) { c->name = "q"; }},
      {"q_heads", 0, [](LayerConfig* c) { c->q_heads = 1; }},
      {"dim", 0, [](LayerConfig* c) { c->dim = 8; }},
      {"window", 0, [](LayerConfig* c) { c->window = 5; }},
      {"capacity", 0, [](LayerConfig* c) { c->capacity = 7; }},
      {"kheads", 1, [](LayerConfig* c) { c->kheads = 2; }},
      {"dk", 1, [](LayerConfig* c) { c->dk = 8; }},
      {"dv", 1, [](LayerConfig* c) { c->dv = 8; }},
      {"conv", 1, [](LayerConfig* c) { c->conv = 3; }},
  };
  std::unique_ptr<Layout> same;
  ASSERT_TRUE(Layout::Create(1, {ring, ssm}, &same).ok());
  for (const Change& change : changes) {
    std::vector<LayerConfig> other_layers = {ring, ssm};
    change.apply(&other_layers[static_cast<size_t>(change.layer)]);
    std::unique_ptr<Layout> a, b;
    ASSERT_TRUE(Layout::Create(1, {ring, ssm}, &a).ok()) << change.field;
    ASSERT_TRUE(Layout::Create(1, other_layers, &b).ok()) << change.field;
    const uint64_t before = a->StateHash();
    const Status s = a->Join(*b);
    EXPECT_FALSE(s.ok()) << change.field;
    EXPECT_NE(s.message().find("join needs the same layer list"), std::string::npos)
        << change.field << ": " << s.message();
    EXPECT_EQ(a->rows(), 1) << change.field;
    EXPECT_EQ(a->StateHash(), before) << change.field;
  }
  // and the same layer list joins
  std::unique_ptr<Layout> a;
  ASSERT_TRUE(Layout::Create(1, {ring, ssm}, &a).ok());
  ASSERT_TRUE(a->Join(*same).ok());
  EXPECT_EQ(a->rows(), 2);
}

// BytesAfterJoin is 0 for a layout of another layer count (Join refuses
// it), and what the joined layers hold otherwise.
TEST(LayoutJoinEdges, BytesAfterJoinOfAnotherLayerCountIsZero) {
  std::unique_ptr<Layout> a = Created(1, {Kv("a")});
  std::unique_ptr<Layout> b = Created(1, {Kv("a"), Kv("b")});
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  AttentionBuffers x(a->config(0), 1, 3);
  ASSERT_TRUE(a->Forward(ForwardColumns::Dense(1, 3), {x.io()}).ok());
  ASSERT_TRUE(b->Forward(ForwardColumns::Dense(1, 3), {x.io(), x.io()}).ok());
  EXPECT_EQ(a->BytesAfterJoin(*b), 0u);
  EXPECT_EQ(b->BytesAfterJoin(*a), 0u);
  std::unique_ptr<Layout> same = a->Copy();
  const size_t joined = a->BytesAfterJoin(*same);
  EXPECT_GT(joined, 0u);
  ASSERT_TRUE(a->Join(*same).ok());
  EXPECT_EQ(a->allocatedBytes(), joined);
}

}  // namespace
}  // namespace kvspec

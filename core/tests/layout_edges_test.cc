// Layout (core/layout.h) behaviour the rest of the suite never produced
// (issue 20's coverage gaps): every shape a layer config may not have is
// refused by Create, one field at a time, with the boundary values that are
// still accepted; the refusals of Forward, Trim and Join that no other test
// provoked leave the layout unchanged; an operation on a layout whose cheap
// invariants are broken is refused (Copy() aborts); BytesAfterJoin of
// another layer list is 0; a layer with an output but no query attends
// nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvspec/core/layout.h"
#include "kvspec/kernels/conv1d.h"

namespace kvspec {

// Test-only access to the state these tests corrupt (a friend of Layout).
struct InvariantsTestAccess {
  static std::vector<int32_t>& BypassBound(Layout& l) { return l.bypass_bound_; }
};

namespace {

LayerConfig Kv(const std::string& name) {
  LayerConfig c;
  c.name = name;
  c.kind = CacheKind::kKv;
  return c;
}

LayerConfig Ring(const std::string& name, int32_t window, int32_t capacity = 0) {
  LayerConfig c;
  c.name = name;
  c.kind = CacheKind::kRotating;
  c.window = window;
  c.capacity = capacity;
  return c;
}

LayerConfig Ssm(const std::string& name) {
  LayerConfig c;
  c.name = name;
  c.kind = CacheKind::kSsm;
  return c;
}

// Create refuses `layers` with exactly `message` and builds nothing.
void ExpectCreateRefused(int rows, const std::vector<LayerConfig>& layers,
                         const std::string& message) {
  std::unique_ptr<Layout> out;
  const Status s = Layout::Create(rows, layers, &out);
  EXPECT_FALSE(s.ok()) << "expected the refusal: " << message;
  EXPECT_EQ(s.message(), message);
  EXPECT_EQ(out, nullptr) << message;
}

void ExpectCreated(int rows, const std::vector<LayerConfig>& layers, const std::string& what) {
  std::unique_ptr<Layout> out;
  const Status s = Layout::Create(rows, layers, &out);
  EXPECT_TRUE(s.ok()) << what << ": " << s.message();
  EXPECT_NE(out, nullptr) << what;
}

// A plain attention layer needs heads >= 1, dim >= 1, window >= 0 and query
// heads a multiple of the heads: each violation alone is refused, naming the
// layer and its shape; the smallest accepted values are accepted.
TEST(LayoutCreateEdges, PlainLayerShapeIsCheckedFieldByField) {
  LayerConfig c = Kv("a");
  c.heads = 0;
  ExpectCreateRefused(1, {c}, "layer 'a': bad shape (heads 0, query heads 0, dim 4, window 0)");
  c = Kv("a");
  c.dim = 0;
  ExpectCreateRefused(1, {c}, "layer 'a': bad shape (heads 1, query heads 1, dim 0, window 0)");
  c = Kv("a");
  c.window = -1;
  ExpectCreateRefused(1, {c}, "layer 'a': bad shape (heads 1, query heads 1, dim 4, window -1)");
  c = Kv("a");
  c.heads = 2;
  c.q_heads = 3;
  ExpectCreateRefused(1, {c}, "layer 'a': bad shape (heads 2, query heads 3, dim 4, window 0)");
  // the same refusals in a batched layout, for the second (unnamed) layer
  c = Kv("");
  c.window = -1;
  ExpectCreateRefused(2, {Kv("a"), c},
                      "layer 1: bad shape (heads 1, query heads 1, dim 4, window -1)");

  c = Kv("a");
  c.heads = 1;
  c.dim = 1;
  c.window = 0;
  ExpectCreated(1, {c}, "heads 1, dim 1, window 0");
  ExpectCreated(2, {c}, "heads 1, dim 1, window 0, two rows");
  c.window = 1;
  ExpectCreated(1, {c}, "window 1");
  c.heads = 2;
  c.q_heads = 4;
  ExpectCreated(1, {c}, "2 heads, 4 query heads");
  c.q_heads = 2;
  ExpectCreated(1, {c}, "2 heads, 2 query heads");
}

// A ring layer needs heads >= 1, dim >= 1, window >= 1, a capacity (0: the
// window) >= the window and query heads a multiple of the heads.
TEST(LayoutCreateEdges, RingLayerShapeIsCheckedFieldByField) {
  LayerConfig c = Ring("r", 4);
  c.heads = 0;
  ExpectCreateRefused(1, {c},
                      "layer 'r': bad ring shape (heads 0, dim 4, window 4, capacity 4)");
  c = Ring("r", 4);
  c.dim = 0;
  ExpectCreateRefused(1, {c},
                      "layer 'r': bad ring shape (heads 1, dim 0, window 4, capacity 4)");
  c = Ring("r", 0);
  ExpectCreateRefused(1, {c},
                      "layer 'r': bad ring shape (heads 1, dim 4, window 0, capacity 0)");
  c = Ring("r", 0, 4);  // a capacity does not make up for no window
  ExpectCreateRefused(1, {c},
                      "layer 'r': bad ring shape (heads 1, dim 4, window 0, capacity 4)");
  c = Ring("r", 4, 3);
  ExpectCreateRefused(1, {c},
                      "layer 'r': bad ring shape (heads 1, dim 4, window 4, capacity 3)");
  c = Ring("r", 4);
  c.heads = 2;
  c.q_heads = 3;
  ExpectCreateRefused(1, {c},
                      "layer 'r': bad ring shape (heads 2, dim 4, window 4, capacity 4)");
  c = Ring("", 4, 3);
  ExpectCreateRefused(3, {Kv("a"), Kv("b"), c},
                      "layer 2: bad ring shape (heads 1, dim 4, window 4, capacity 3)");

  c = Ring("r", 1);
  c.dim = 1;
  ExpectCreated(1, {c}, "window 1, capacity 1, dim 1");
  ExpectCreated(2, {c}, "window 1, capacity 1, dim 1, two rows");
  ExpectCreated(1, {Ring("r", 4, 4)}, "capacity = window");
  ExpectCreated(1, {Ring("r", 4, 5)}, "capacity = window + 1");
  c = Ring("r", 4);
  c.heads = 2;
  c.q_heads = 6;
  ExpectCreated(1, {c}, "2 heads, 6 query heads");
}

// A recurrent layer needs value heads >= 1, key heads (0: the value heads)
// >= 1 dividing them, dk >= 1, dv >= 1 and 1 <= conv <= kMaxConvKernel.
TEST(LayoutCreateEdges, RecurrentLayerShapeIsCheckedFieldByField) {
  const int max_conv = static_cast<int>(kMaxConvKernel);
  LayerConfig c = Ssm("s");
  c.heads = 0;
  c.kheads = 1;  // 0 % 1 == 0: only the value-head count is wrong
  ExpectCreateRefused(1, {c},
                      "layer 's': bad recurrent shape (heads 0, kheads 1, dk 4, dv 4, conv 4)");
  c = Ssm("s");
  c.kheads = -1;  // 1 % -1 == 0: only the key-head count is wrong
  ExpectCreateRefused(1, {c},
                      "layer 's': bad recurrent shape (heads 1, kheads -1, dk 4, dv 4, conv 4)");
  c = Ssm("s");
  c.heads = 3;
  c.kheads = 2;
  ExpectCreateRefused(1, {c},
                      "layer 's': bad recurrent shape (heads 3, kheads 2, dk 4, dv 4, conv 4)");
  c = Ssm("s");
  c.dk = 0;
  ExpectCreateRefused(1, {c},
                      "layer 's': bad recurrent shape (heads 1, kheads 1, dk 0, dv 4, conv 4)");
  c = Ssm("s");
  c.dv = 0;
  ExpectCreateRefused(1, {c},
                      "layer 's': bad recurrent shape (heads 1, kheads 1, dk 4, dv 0, conv 4)");
  c = Ssm("s");
  c.conv = 0;
  ExpectCreateRefused(1, {c},
                      "layer 's': bad recurrent shape (heads 1, kheads 1, dk 4, dv 4, conv 0)");
  c = Ssm("s");
  c.conv = max_conv + 1;
  ExpectCreateRefused(1, {c},
                      "layer 's': bad recurrent shape (heads 1, kheads 1, dk 4, dv 4, conv " +
                          std::to_string(max_conv + 1) + ")");
  c = Ssm("");
  c.dv = 0;
  ExpectCreateRefused(2, {Kv("a"), c},
                      "layer 1: bad recurrent shape (heads 1, kheads 1, dk 4, dv 0, conv 4)");

  c = Ssm("s");
  c.heads = 1;
  c.dk = 1;
  c.dv = 1;
  c.conv = 1;
  ExpectCreated(1, {c}, "heads 1, dk 1, dv 1, conv 1");
  ExpectCreated(2, {c}, "heads 1, dk 1, dv 1, conv 1, two rows");
  c.conv = max_conv;
  ExpectCreated(1, {c}, "conv kMaxConvKernel");
  c = Ssm("s");
  c.heads = 4;
  c.kheads = 2;
  ExpectCreated(1, {c}, "4 value heads over 2 key heads");
  c.kheads = 4;
  ExpectCreated(1, {c}, "4 value heads over 4 key heads");
}

// A kind outside the enumeration is refused by name, not built as any kind.
TEST(LayoutCreateEdges, AnUnknownKindIsRefused) {
  LayerConfig c = Kv("x");
  c.kind = static_cast<CacheKind>(7);
  ExpectCreateRefused(1, {Kv("a"), c}, "layer 'x': unknown kind");
  c.name.clear();
  ExpectCreateRefused(1, {Kv("a"), c}, "layer 1: unknown kind");
}

// A layout needs at least one row and one layer.
TEST(LayoutCreateEdges, NoRowsOrNoLayersAreRefused) {
  ExpectCreateRefused(0, {Kv("a")}, "a layout needs at least one row");
  ExpectCreateRefused(-3, {Kv("a")}, "a layout needs at least one row");
  ExpectCreateRefused(1, {}, "a layout needs at least one layer");
  ExpectCreateRefused(2, {}, "a layout needs at least one layer");
  ExpectCreated(1, {Kv("a")}, "one row, one layer");
}

std::vector<float> Filled(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + 0.01f * static_cast<float>(i % 97);
  return v;
}

// q, k, v and out of one attention layer for a forward of `columns` columns.
struct AttentionBuffers {
  AttentionBuffers(const LayerConfig& c, int rows, int32_t columns)
      : q(Filled(static_cast<size_t>(rows) * columns * c.QueryHeads() * c.dim, 0.4f)),
        k(Filled(static_cast<size_t>(rows) * columns * c.heads * c.dim, 0.6f)),
        out(q.size(), 0.0f) {}
  AttentionIO io() { return AttentionIO(q.data(), k.data(), k.data(), out.data()); }
  std::vector<float> q, k, out;
};

// Forward refuses inputs for another number of layers than the layout has,
// saying both counts, and changes nothing.
TEST(LayoutForwardEdges, InputsForAnotherLayerCountAreRefused) {
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(1, {Kv("a"), Ring("r", 4)}, &layout).ok());
  AttentionBuffers a(layout->config(0), 1, 2), r(layout->config(1), 1, 2);
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(1, 2), {a.io(), r.io()}).ok());
  const uint64_t before = layout->StateHash();
  Status s = layout->Forward(ForwardColumns::Dense(1, 2), {a.io()});
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "forward inputs for 1 layers, layout has 2");
  EXPECT_EQ(layout->StateHash(), before);
  s = layout->Forward(ForwardColumns::Dense(1, 2), {a.io(), r.io(), a.io()});
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "forward inputs for 3 layers, layout has 2");
  EXPECT_EQ(layout->StateHash(), before);
  EXPECT_EQ(layout->positions(), std::vector<int32_t>{2});
}

// A layer given an output buffer but no query appends its keys and values
// and attends nothing: the buffer is left as it was.
TEST(LayoutForwardEdges, AnOutputWithoutAQueryIsLeftUntouched) {
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(1, {Kv("a"), Kv("b")}, &layout).ok());
  AttentionBuffers a(layout->config(0), 1, 3), b(layout->config(1), 1, 3);
  const float kSentinel = -12345.0f;
  std::fill(b.out.begin(), b.out.end(), kSentinel);
  AttentionIO no_query = b.io();
  no_query.q = nullptr;
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(1, 3), {a.io(), no_query}).ok());
  for (float x : b.out) EXPECT_EQ(x, kSentinel);
  // the keys were appended, and the layer with a query attended
  EXPECT_EQ(layout->positions(), std::vector<int32_t>{3});
  EXPECT_EQ(layout->cache(1).columns(), 3);
  bool written = false;
  for (float x : a.out) written = written || x != 0.0f;
  EXPECT_TRUE(written);
}

// A recurrent layer reads only its SsmIO: query and output pointers given
// with it are ignored (it has no mask to attend through), the output
// buffer is left as it was.
TEST(LayoutForwardEdges, ARecurrentLayerIgnoresAttentionPointers) {
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(1, {Kv("a"), Ssm("s")}, &layout).ok());
  const LayerConfig& c = layout->config(1);
  const size_t L = 2, C = c.SsmChannels(), hv = static_cast<size_t>(c.heads);
  const std::vector<float> weights = Filled(C * c.conv, 0.1f), x = Filled(L * C, 0.2f),
                           gate = Filled(L * hv, 0.5f), beta = Filled(L * hv, 0.3f);
  SsmIO ssm;
  ssm.conv_weights = weights.data();
  ssm.x = x.data();
  ssm.gate = gate.data();
  ssm.beta = beta.data();
  AttentionIO recurrent(ssm);
  const std::vector<float> query = Filled(L * c.heads * c.dim, 0.7f);
  const float kSentinel = -54321.0f;
  std::vector<float> out(query.size(), kSentinel);
  recurrent.q = query.data();
  recurrent.out = out.data();
  AttentionBuffers a(layout->config(0), 1, 2);
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(1, 2), {a.io(), recurrent}).ok());
  for (float v : out) EXPECT_EQ(v, kSentinel);
  EXPECT_EQ(layout->positions(), std::vector<int32_t>{2});
  EXPECT_EQ(layout->LastMask(1), nullptr);
}

// Trim refuses a negative count and changes nothing; a count of 0 is a
// (no-op) trim.
TEST(LayoutTrimEdges, ANegativeCountIsRefused) {
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(2, {Kv("a")}, &layout).ok());
  AttentionBuffers a(layout->config(0), 2, 3);
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(2, 3), {a.io()}).ok());
  const uint64_t before = layout->StateHash();
  for (bool bypass : {false, true}) {
    const Status s = layout->Trim(-1, bypass);
    EXPECT_FALSE(s.ok()) << bypass;
    EXPECT_EQ(s.message(), "trim of a negative count") << bypass;
    EXPECT_EQ(layout->StateHash(), before) << bypass;
  }
  EXPECT_TRUE(layout->Trim(0, /*bypass=*/false).ok());
  EXPECT_EQ(layout->positions(), (std::vector<int32_t>{3, 3}));
  EXPECT_TRUE(layout->Trim(1, /*bypass=*/false).ok());
  EXPECT_EQ(layout->positions(), (std::vector<int32_t>{2, 2}));
}

std::unique_ptr<Layout> Created(int rows, const std::vector<LayerConfig>& layers) {
  std::unique_ptr<Layout> layout;
  const Status s = Layout::Create(rows, layers, &layout);
  EXPECT_TRUE(s.ok()) << s.message();
  return layout;
}

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

// A layout whose cheap invariants are broken (here invariant 6: a bypass
// bound of the wrong size) refuses CopyTo and Forward, naming the
// operation and the invariant, and Copy() aborts with that message.
std::unique_ptr<Layout> WithBrokenRoundState() {
  std::unique_ptr<Layout> layout = Created(2, {Kv("a")});
  if (!layout) return layout;
  InvariantsTestAccess::BypassBound(*layout).assign(3, 0);
  return layout;
}

TEST(LayoutBrokenEdges, CopyToAndForwardRefuseABrokenLayout) {
  std::unique_ptr<Layout> layout = WithBrokenRoundState();
  ASSERT_NE(layout, nullptr);
  const uint64_t before = layout->StateHash();
  std::unique_ptr<Layout> copy;
  Status s = layout->CopyTo(&copy);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "Layout::Copy refused: bad layout round state (Layout invariant 6)");
  EXPECT_EQ(copy, nullptr);
  AttentionBuffers a(layout->config(0), 2, 1);
  s = layout->Forward(ForwardColumns::Dense(2, 1), {a.io()});
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "Layout::Forward refused: bad layout round state (Layout invariant 6)");
  EXPECT_EQ(layout->StateHash(), before);
  EXPECT_EQ(layout->positions(), (std::vector<int32_t>{0, 0}));
}

TEST(LayoutBrokenEdgesDeathTest, CopyOfABrokenLayoutAborts) {
  std::unique_ptr<Layout> layout = WithBrokenRoundState();
  ASSERT_NE(layout, nullptr);
  EXPECT_DEATH((void)layout->Copy(),
               "kvspec: fatal in Layout::Copy: Layout::Copy refused: bad layout round state "
               "\\(Layout invariant 6\\)");
}

}  // namespace
}  // namespace kvspec

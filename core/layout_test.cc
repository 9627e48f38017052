// Unit tests of the layout (core/layout.h): Create checks every layer
// shape field by field (the smallest valid values accepted); Forward,
// Trim, CopyTo and Copy refuse what they must and change nothing; a copy
// and every new or changed layout read no mask until their own forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvspec/core/codec/codec.h"
#include "kvspec/core/invariants_test_access.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/layout_test_util.h"
#include "kvspec/kernels/conv1d.h"

namespace kvspec {
namespace {

using layout_test::AttentionBuffers;
using layout_test::Filled;
using layout_test::Layer;

LayerConfig Kv(const std::string& name) { return Layer(name, CacheKind::kKv); }

LayerConfig Ring(const std::string& name, int32_t window, int32_t capacity = 0) {
  return Layer(name, CacheKind::kRotating, window, capacity);
}

LayerConfig Ssm(const std::string& name) { return Layer(name, CacheKind::kSsm); }

// n floats counting up from `start` in steps of 1.
std::vector<float> Counting(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
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

std::unique_ptr<Layout> Created(int rows, const std::vector<LayerConfig>& layers) {
  std::unique_ptr<Layout> layout;
  const Status s = Layout::Create(rows, layers, &layout);
  EXPECT_TRUE(s.ok()) << s.message();
  return layout;
}

// ------------------------------------------------------------ create
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

// A plain attention layer needs a dim of at least 1: a dim of 0 is a bad
// shape, refused by Layout::Create naming the layer and its shape.
TEST(LayoutCreate, APlainLayerOfDimZeroIsRefused) {
  LayerConfig c;
  c.name = "a";
  c.heads = 1;
  c.dim = 0;
  std::unique_ptr<Layout> layout;
  const Status s = Layout::Create(1, {c}, &layout);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("layer 'a': bad shape (heads 1, query heads 1, dim 0", 0), 0u)
      << s.message();
  EXPECT_EQ(layout, nullptr);
  c.dim = 1;
  EXPECT_TRUE(Layout::Create(1, {c}, &layout).ok());
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

TEST(LayoutCreate, RingCapacityBelowTheWindowIsRefused) {
  LayerConfig ring;
  ring.name = "r";
  ring.kind = CacheKind::kRotating;
  ring.window = 4;
  ring.capacity = 3;
  std::unique_ptr<Layout> layout;
  const Status s = Layout::Create(1, {ring}, &layout);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad ring shape"), std::string::npos) << s.message();
  EXPECT_EQ(layout, nullptr);
  ring.capacity = 4;
  EXPECT_TRUE(Layout::Create(1, {ring}, &layout).ok());
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

// ------------------------------------------------------------ forward, trim
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

// ------------------------------------------------------------ copies and masks
// Masks point into the caches: a copy has no last mask until its own first
// forward, whatever the original had.
TEST(LayoutCopy, ACopyHasNoLastMask) {
  LayerConfig kv;
  kv.name = "a";
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(1, {kv, kv}, &layout).ok());
  const auto x = Counting(3 * 4, 0.5f);
  const AttentionIO io(x.data(), x.data(), x.data(), nullptr);
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(1, 3), {io, io}).ok());
  ASSERT_NE(layout->LastMask(0), nullptr);
  const std::unique_ptr<Layout> copy = layout->Copy();
  EXPECT_EQ(copy->LastMask(0), nullptr);
  EXPECT_EQ(copy->LastMask(1), nullptr);
  ASSERT_TRUE(copy->Forward(ForwardColumns::Dense(1, 1, true), {io, io}).ok());
  ASSERT_NE(copy->LastMask(1), nullptr);
  EXPECT_EQ(copy->LastMask(1)->queries, 1);
}

// Every layout that an operation makes anew (created, copied, extracted,
// decoded) and every one that a filter or join changed reads no mask until
// its own first forward, and holds its invariants (Layout invariant 5: a
// layer reads no mask, or one that exists), also in a build without the
// invariant checks after each operation.
TEST(LayoutMasks, EveryNewOrChangedLayoutReadsNoMask) {
  LayerConfig kv, ring;
  kv.name = "a";
  ring.name = "r";
  ring.kind = CacheKind::kRotating;
  ring.window = 2;
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(2, {kv, ring}, &layout).ok());
  auto reads_no_mask = [](const Layout& l, const char* what) {
    EXPECT_TRUE(l.CheckInvariants().ok()) << what << ": " << l.CheckInvariants().message();
    for (size_t i = 0; i < l.size(); ++i) EXPECT_EQ(l.LastMask(i), nullptr) << what << " " << i;
  };
  reads_no_mask(*layout, "created");
  const auto x = Counting(2 * 3 * 4, 0.5f);
  const AttentionIO io(x.data(), x.data(), x.data(), nullptr);
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(2, 3), {io, io}).ok());
  ASSERT_NE(layout->LastMask(0), nullptr);
  ASSERT_NE(layout->LastMask(1), nullptr);
  reads_no_mask(*layout->Copy(), "copied");
  std::unique_ptr<Layout> one;
  ASSERT_TRUE(layout->Extract(1, &one).ok());
  reads_no_mask(*one, "extracted");
  std::string bytes;
  ASSERT_TRUE(EncodeLayout(*layout, &bytes).ok());
  std::unique_ptr<Layout> decoded;
  ASSERT_TRUE(DecodeLayout(bytes, &decoded).ok());
  reads_no_mask(*decoded, "decoded");
  const std::unique_ptr<Layout> other = layout->Copy();
  ASSERT_TRUE(layout->Join(*other).ok());
  reads_no_mask(*layout, "joined");
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(4, 1), {io, io}).ok());
  ASSERT_NE(layout->LastMask(1), nullptr);
  ASSERT_TRUE(layout->Filter({0, 3}).ok());
  reads_no_mask(*layout, "filtered");
  // Each reads its own mask after its own forward.
  ASSERT_TRUE(one->Forward(ForwardColumns::Dense(1, 1), {io, io}).ok());
  ASSERT_NE(one->LastMask(1), nullptr);
  EXPECT_EQ(one->LastMask(1)->rows, 1);
  EXPECT_TRUE(one->CheckInvariants().ok());
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

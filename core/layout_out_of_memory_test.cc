// The layout when memory runs out:
// - BytesAfterFilter and BytesAfterJoin, when memory runs
//   out while one layer's figure is computed, report the largest size_t
//   (no budget grants it), never a sum that wrapped around;
// - running out of memory in the attention kernel's scratch, after a
//   forward wrote the caches, is fatal with a message (core/layout.h).
//
// This binary replaces the global operator new and delete (the n-th
// allocation from an arming throws std::bad_alloc): it is its own test
// executable so that no other test runs under them, and so that no larger
// forward before the death test has grown the attention kernel's scratch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "kvspec/core/layout.h"

namespace {

long g_countdown = 0;     // > 0: the allocation that brings it to 0 fails
bool g_injected = false;  // an allocation was failed since the last arming

void* ReplacedAllocate(size_t n, size_t align) {
  if (g_countdown > 0 && --g_countdown == 0) {
    g_injected = true;
    throw std::bad_alloc();
  }
  void* p = nullptr;
  if (align == 0) {
    p = std::malloc(n == 0 ? 1 : n);
  } else if (posix_memalign(&p, std::max(align, sizeof(void*)), n == 0 ? 1 : n) != 0) {
    p = nullptr;
  }
  if (!p) throw std::bad_alloc();
  return p;
}

void ReplacedRelease(void* p, size_t) noexcept { std::free(p); }

}  // namespace

#include "kvspec/testing/replace_new.h"  // every form, through the two above

namespace kvspec {
namespace {

// Fails the n-th allocation from now on (n >= 1); Disarm() stops it and
// says whether an allocation was failed.
void FailAllocation(long n) {
  g_injected = false;
  g_countdown = n;
}
bool Disarm() {
  g_countdown = 0;
  return g_injected;
}

std::vector<float> Filled(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + 0.01f * static_cast<float>(i % 97);
  return v;
}

LayerConfig Kv(const std::string& name, int32_t window = 0) {
  LayerConfig c;
  c.name = name;
  c.window = window;
  return c;
}

// The inputs of a forward of `columns` columns through every (attention)
// layer, built before any allocation is made to fail.
struct ForwardInputs {
  ForwardInputs(const Layout& layout, int32_t columns)
      : cols(ForwardColumns::Dense(layout.rows(), columns)) {
    const size_t rows = static_cast<size_t>(layout.rows());
    buffers.reserve(3 * layout.size());
    for (size_t l = 0; l < layout.size(); ++l) {
      const LayerConfig& c = layout.config(l);
      const size_t q = rows * columns * c.QueryHeads() * c.dim;
      const size_t kv = rows * columns * c.heads * c.dim;
      const float* query = buffers.emplace_back(Filled(q, 0.4f)).data();
      const float* key = buffers.emplace_back(Filled(kv, 0.6f)).data();
      float* out = buffers.emplace_back(q, 0.0f).data();
      io.emplace_back(query, key, key, out);
    }
  }
  ForwardColumns cols;
  std::vector<std::vector<float>> buffers;
  std::vector<AttentionIO> io;
};

// `figure()` with the n-th allocation failing, for n = 1, 2, ... until it no
// longer reaches an n-th allocation: each run gives either the figure
// without injection or the largest size_t; the layers after the failing
// one never wrap that around to a small number. Returns how many runs
// were injected.
int ExpectSaturated(const char* what, const std::function<size_t()>& figure) {
  const size_t clean = figure();
  EXPECT_GT(clean, 0u) << what;
  EXPECT_LT(clean, std::numeric_limits<size_t>::max()) << what;
  int injected = 0;
  for (long n = 1; n < 10000; ++n) {
    FailAllocation(n);
    const size_t got = figure();
    if (!Disarm()) {
      EXPECT_EQ(got, clean) << what << " without an injection (n = " << n << ")";
      break;
    }
    ++injected;
    EXPECT_TRUE(got == clean || got == std::numeric_limits<size_t>::max())
        << what << " with allocation " << n << " failing: " << got << " (clean: " << clean
        << ")";
  }
  return injected;
}

TEST(LayoutAllocationEdges, ByteFiguresSaturateWhenMemoryRunsOut) {
  std::unique_ptr<Layout> layout, other;
  const std::vector<LayerConfig> layers = {Kv("a"), Kv("b", 2), Kv("c")};
  ASSERT_TRUE(Layout::Create(2, layers, &layout).ok());
  ASSERT_TRUE(Layout::Create(1, layers, &other).ok());
  const ForwardInputs ours(*layout, 3), theirs(*other, 3);
  ASSERT_TRUE(layout->Forward(ours.cols, ours.io).ok());
  ASSERT_TRUE(other->Forward(theirs.cols, theirs.io).ok());
  const Layout& l = *layout;
  const Layout& o = *other;
  const std::vector<int32_t> rows = {1};
  // Each figure allocates for every layer: a failure in any layer but the
  // last is followed by layers whose figures are added to the saturated one.
  EXPECT_GE(ExpectSaturated("BytesAfterFilter", [&] { return l.BytesAfterFilter(rows); }), 3);
  EXPECT_GE(ExpectSaturated("BytesAfterJoin", [&] { return l.BytesAfterJoin(o); }), 3);
  // and the clean figures are what Filter and Join then hold
  const size_t filtered = l.BytesAfterFilter(rows), joined = l.BytesAfterJoin(o);
  std::unique_ptr<Layout> copy = layout->Copy();
  ASSERT_TRUE(copy->Filter(rows).ok());
  EXPECT_EQ(copy->allocatedBytes(), filtered);
  ASSERT_TRUE(layout->Join(*other).ok());
  EXPECT_EQ(layout->allocatedBytes(), joined);
}

// Running out of memory in the attention kernel's scratch, after the
// forward's checks and reservations passed and its caches were written,
// aborts naming Layout::Forward. Every earlier failure is a refusal; the
// first run whose failure lands in the kernel dies (a forward larger than
// any other in this binary, so the kernel's scratch must grow).
TEST(LayoutAllocationEdgesDeathTest, AttentionScratchOutOfMemoryIsFatal) {
  auto run = [] {
    std::unique_ptr<Layout> layout;
    if (!Layout::Create(1, {Kv("a")}, &layout).ok()) return;
    const ForwardInputs in(*layout, 200);
    for (long n = 1; n < 10000; ++n) {
      FailAllocation(n);
      const Status s = layout->Forward(in.cols, in.io);
      if (!Disarm()) return;  // no failure reached: the run ends alive
      if (s.ok()) return;     // a failure swallowed: the run ends alive
    }
  };
  EXPECT_DEATH(run(),
               "kvspec: fatal in Layout::Forward: out of memory in the attention kernel's "
               "scratch");
}

}  // namespace
}  // namespace kvspec

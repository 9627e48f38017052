// The invariants of the column store, the recurrent caches and the layout
// hold after the operations a trace runs (windows with padding, decodes
// that wrap rings, rounds with ragged accepts, trims, filter, join,
// extract, copy, a codec round trip); a broken one aborts, naming the
// operation (core/invariants.h), as does an allocation failure while an
// operation changes the state.
#include <gtest/gtest.h>

#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvspec/core/codec/codec.h"
#include "kvspec/core/invariants.h"
#include "kvspec/core/invariants_test_access.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/layout_test_util.h"

namespace kvspec {
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

// The fatal path of an operation that fails to allocate while it changes
// the state: the process aborts, naming the operation and the failure.
TEST(FatalEdgesDeathTest, AnAllocationFailureWhileChangingTheStateAborts) {
  EXPECT_DEATH((void)FatalOnAllocationFailure("Test::Change",
                                              []() -> Status { throw std::bad_alloc(); }),
               "kvspec: fatal in Test::Change: out of memory while changing the state");
  EXPECT_DEATH(
      (void)FatalOnAllocationFailure(
          "Test::Grow", []() -> Status { throw std::length_error("vector::reserve"); }),
      "kvspec: fatal in Test::Grow: an allocation larger than the largest one while changing "
      "the state");
}

}  // namespace
}  // namespace kvspec

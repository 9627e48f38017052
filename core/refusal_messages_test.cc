// Each refusal of the caches, the layout and the batch lifecycle states its
// own exact message. A check that only asks for !ok() does not notice a
// refusal whose condition is lost while a later check still refuses the
// input with another message; these cases do. Each
// case breaks exactly the one condition of its refusal, expects the exact
// message, and checks that the state is unchanged (the hash of the cache or
// layout before and after, and an output argument left untouched).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "kvspec/core/batch.h"
#include "kvspec/core/cache.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/core/layout_test_util.h"

namespace kvspec {
namespace {

using layout_test::Filled;
using layout_test::Layer;
using layout_test::RunForward;
using layout_test::SsmInputs;

uint64_t Hash(const Cache& c) {
  Hasher h;
  c.HashState(&h);
  return h.value();
}

// What a refused call did: its status, the state's hash around it, and
// whether its output argument (if any; a join's other layout) was left as
// it was.
struct Outcome {
  Status status;
  uint64_t before = 0;
  uint64_t after = 0;
  bool output_untouched = true;
};

struct Refusal {
  std::string name;     // the test's name (letters, digits, underscores)
  std::string message;  // the exact message the call refuses with
  std::function<Outcome()> run;
};

void PrintTo(const Refusal& r, std::ostream* os) { *os << r.name; }

// A cache of any kind string that is none of the library's cache families.
class MysteryCache final : public Cache {
 public:
  explicit MysteryCache(std::string kind) : kind_(std::move(kind)) {}
  std::string kind() const override { return kind_; }
  int rows() const override { return 1; }
  int64_t columns() const override { return 0; }
  std::vector<int32_t> positions() const override { return positions_; }
  const std::vector<int32_t>& positionsRef() const override { return positions_; }
  size_t bytesPerToken() const override { return 0; }
  size_t allocatedBytes() const override { return 0; }
  bool isTrimmable() const override { return true; }
  Status CheckTrim(int32_t, bool) const override { return Status::Ok(); }
  Status trim(int32_t, bool) override { return Status::Ok(); }
  void HashState(Hasher* hasher) const override { hasher->Bytes(kind_.data(), kind_.size()); }
  std::unique_ptr<Cache> Copy() const override { return std::make_unique<MysteryCache>(*this); }

 private:
  std::string kind_;
  std::vector<int32_t> positions_{0};
};

// Appends `cols` to an attention cache with made-up contents.
Status AppendTo(AttentionCache& c, const ForwardColumns& cols) {
  const size_t n = static_cast<size_t>(c.rows()) * static_cast<size_t>(cols.columns) *
                   static_cast<size_t>(c.kvHeads()) * static_cast<size_t>(c.headDim());
  const std::vector<float> k = Filled(n, 0.5f);
  return c.Append(cols, k.data(), k.data());
}


// ------------------------------------------------------------ batch lifecycle
// The batch calls take a const cache: their output must stay empty.

Outcome Filter(const Cache& c, const std::vector<int32_t>& rows) {
  Outcome o;
  std::unique_ptr<Cache> out;
  o.before = Hash(c);
  o.status = FilterRows(c, rows, &out);
  o.after = Hash(c);
  o.output_untouched = out == nullptr;
  return o;
}

Outcome Extract(const Cache& c, int32_t row) {
  Outcome o;
  std::unique_ptr<Cache> out;
  o.before = Hash(c);
  o.status = ExtractRow(c, row, &out);
  o.after = Hash(c);
  o.output_untouched = out == nullptr;
  return o;
}

Outcome Merge(const Cache& a, const Cache& b) {
  Outcome o;
  std::unique_ptr<Cache> out;
  o.before = Hash(a) ^ (Hash(b) << 1);
  o.status = MergeRows({&a, &b}, &out);
  o.after = Hash(a) ^ (Hash(b) << 1);
  o.output_untouched = out == nullptr;
  return o;
}

// A two-row batched kv cache after a window of 3 columns.
BatchedKvCache TwoRowBatch() {
  BatchedKvCache c(2, 1, 2);
  EXPECT_TRUE(AppendTo(c, ForwardColumns::Dense(2, 3)).ok());
  return c;
}

// A single-row recurrent cache, fed 2 tokens, then armed.
SsmCache ArmedSsm() {
  const SsmShape shape;
  SsmCache c(shape);
  SsmInputs in(shape, 1, 2);
  EXPECT_TRUE(c.Forward(ForwardColumns::Dense(1, 2), in.io).ok());
  EXPECT_TRUE(c.ArmRound().ok());
  return c;
}

std::vector<Refusal> BatchRefusals() {
  const std::string unknown = "unknown cache kind 'paged_kv': refused";
  const std::string armed = "a speculative round is armed: commit or roll back first";
  return {
      // An unknown kind, through each call's kind check (the merge's first
      // cache and a later one).
      {"FilterOfAnUnknownKind", unknown,
       [] { return Filter(MysteryCache("paged_kv"), {0}); }},
      {"ExtractOfAnUnknownKind", unknown,
       [] { return Extract(MysteryCache("paged_kv"), 0); }},
      {"MergeWithAnUnknownKindFirst", unknown,
       [] { return Merge(MysteryCache("paged_kv"), KvCache(1, 2)); }},
      {"MergeWithAnUnknownKindSecond", unknown,
       [] { return Merge(KvCache(1, 2), MysteryCache("paged_kv")); }},
      // A kind string the object is not: every later check would pass or
      // refuse with its own message (no row 5, no rows at all).
      {"ExtractOfACacheThatIsNotItsKind",
       "cache of kind 'kv' is not what its kind says: refused",
       [] { return Extract(MysteryCache("kv"), 5); }},
      {"FilterOfACacheThatIsNotItsKind",
       "cache of kind 'ssm' is not what its kind says: refused",
       [] { return Filter(MysteryCache("ssm"), {}); }},
      {"MergeOfACacheThatIsNotItsKind",
       "cache of kind 'batched_rotating' is not what its kind says: refused",
       [] { return Merge(MysteryCache("batched_rotating"), MysteryCache("batched_rotating")); }},
      // An armed recurrent round, through each call.
      {"FilterOfAnArmedRound", armed, [] { return Filter(ArmedSsm(), {0}); }},
      {"ExtractOfAnArmedRound", armed, [] { return Extract(ArmedSsm(), 0); }},
      {"MergeWithAnArmedRound", armed,
       [] { return Merge(SsmCache(SsmShape{}), ArmedSsm()); }},
      {"FilterOfNoRows", "filter needs at least one row",
       [] { return Filter(TwoRowBatch(), {}); }},
      {"FilterOfRowsOutOfOrder", "filter: rows must be strictly ascending",
       [] { return Filter(TwoRowBatch(), {1, 0}); }},
      {"FilterOfARepeatedRow", "filter: rows must be strictly ascending",
       [] { return Filter(TwoRowBatch(), {0, 0}); }},
  };
}

// ------------------------------------------------------------ recurrent caches
std::vector<Refusal> RecurrentRefusals() {
  return {
      {"ASecondVerifyForward", "the round's verify forward has run: commit or roll back first",
       [] {
         const SsmShape shape;
         SsmCache c = ArmedSsm();
         SsmInputs in(shape, 1, 2);
         EXPECT_TRUE(c.Forward(ForwardColumns::Dense(1, 2), in.io).ok());  // the verify forward
         Outcome o;
         o.before = Hash(c);
         const Status check = c.CheckForward(ForwardColumns::Dense(1, 1, true));
         o.status = c.Forward(ForwardColumns::Dense(1, 1, true), in.io);
         EXPECT_EQ(check.message(), o.status.message());
         o.after = Hash(c);
         return o;
       }},
      {"ArmingTwice", "a round is already armed",
       [] {
         SsmCache c = ArmedSsm();
         Outcome o;
         o.before = Hash(c);
         o.status = c.ArmRound();
         o.after = Hash(c);
         return o;
       }},
      {"CommitWithoutARound", "commit without an armed round",
       [] {
         SsmCache c(SsmShape{});
         Outcome o;
         o.before = Hash(c);
         o.status = c.Commit();
         o.after = Hash(c);
         return o;
       }},
      {"RollbackWithoutARound", "rollback without an armed round",
       [] {
         SsmCache c(SsmShape{});
         Outcome o;
         o.before = Hash(c);
         o.status = c.Rollback({0});
         o.after = Hash(c);
         return o;
       }},
      {"RollbackBeforeTheVerifyForward", "rollback before the round's verify forward",
       [] {
         SsmCache c = ArmedSsm();
         Outcome o;
         o.before = Hash(c);
         o.status = c.Rollback({0});
         o.after = Hash(c);
         EXPECT_TRUE(c.armed());
         return o;
       }},
      {"RollbackWithMoreKeepCountsThanRows", "rollback takes one keep count per row (2), got 3",
       [] {
         const SsmShape shape;
         BatchedSsmCache c(2, shape);
         EXPECT_TRUE(c.ArmRound().ok());
         SsmInputs in(shape, 2, 2);
         EXPECT_TRUE(c.Forward(ForwardColumns::Dense(2, 2), in.io).ok());
         Outcome o;
         o.before = Hash(c);
         o.status = c.Rollback({1, 1, 1});
         o.after = Hash(c);
         EXPECT_TRUE(c.armed());
         return o;
       }},
      {"RollbackWithFewerKeepCountsThanRows", "rollback takes one keep count per row (2), got 1",
       [] {
         const SsmShape shape;
         BatchedSsmCache c(2, shape);
         EXPECT_TRUE(c.ArmRound().ok());
         SsmInputs in(shape, 2, 2);
         EXPECT_TRUE(c.Forward(ForwardColumns::Dense(2, 2), in.io).ok());
         Outcome o;
         o.before = Hash(c);
         o.status = c.Rollback({1});
         o.after = Hash(c);
         EXPECT_TRUE(c.armed());
         return o;
       }},
  };
}

// ------------------------------------------------------------ column stores
Outcome TrimOf(ColumnStore& c, int32_t n, bool bypass) {
  Outcome o;
  o.before = Hash(c);
  const Status check = c.CheckTrim(n, bypass);
  o.status = c.trim(n, bypass);
  EXPECT_EQ(check.message(), o.status.message());
  o.after = Hash(c);
  return o;
}

std::vector<Refusal> ColumnStoreRefusals() {
  const std::string after_window = "trim bypass is only valid right after a window write";
  return {
      // The last write was a decode step: a bypass trim of its one token
      // would otherwise be within its bounds.
      {"BypassTrimAfterADecode", after_window,
       [] {
         KvCache c(1, 2);
         EXPECT_TRUE(AppendTo(c, ForwardColumns::Dense(1, 3)).ok());
         EXPECT_TRUE(AppendTo(c, ForwardColumns::Dense(1, 1, /*decode=*/true)).ok());
         return TrimOf(c, 1, true);
       }},
      // No last write: a trim forgot it.
      {"BypassTrimAfterATrim", after_window,
       [] {
         KvCache c(1, 2);
         EXPECT_TRUE(AppendTo(c, ForwardColumns::Dense(1, 3)).ok());
         EXPECT_TRUE(c.trim(1).ok());
         return TrimOf(c, 1, true);
       }},
      // Row 1's last window held one real token (then a prepared pad): a
      // bypass trim of 2 is past it, though every row holds 2 tokens.
      {"BypassTrimPastARowsLastWindow",
       "trim bypass of 2: row 1 wrote only 1 real tokens in the last window",
       [] {
         BatchedKvCache c = TwoRowBatch();
         ForwardColumns cols = ForwardColumns::Dense(2, 2);
         cols.right[1] = 1;
         EXPECT_TRUE(AppendTo(c, cols).ok());
         EXPECT_TRUE(c.CheckTrim(1, true).ok());  // within every row's last window
         return TrimOf(c, 2, true);
       }},
      {"DropTipsWithMoreCountsThanRows", "drop list has 3 values for 2 rows",
       [] {
         BatchedKvCache c = TwoRowBatch();
         Outcome o;
         o.before = Hash(c);
         const Status check = c.CheckDropTips({0, 0, 0});
         o.status = c.DropTips({0, 0, 0});
         EXPECT_EQ(check.message(), o.status.message());
         o.after = Hash(c);
         EXPECT_TRUE(c.DropTips({0, 0}).ok());  // one count per row
         return o;
       }},
  };
}

// ------------------------------------------------------------ layouts
std::unique_ptr<Layout> Create(int rows, const std::vector<LayerConfig>& layers) {
  std::unique_ptr<Layout> layout;
  const Status s = Layout::Create(rows, layers, &layout);
  EXPECT_TRUE(s.ok()) << s.message();
  return layout;
}

// A kv and a recurrent layer after a window of 2 columns, then armed.
std::unique_ptr<Layout> ArmedHybrid(int rows) {
  std::unique_ptr<Layout> l = Create(rows, {Layer("a", CacheKind::kKv), Layer("g", CacheKind::kSsm)});
  EXPECT_TRUE(RunForward(*l, ForwardColumns::Dense(rows, 2)).ok());
  EXPECT_TRUE(l->Arm().ok());
  return l;
}

// A layout call refused, its state hash around it.
Outcome OnLayout(Layout& l, const std::function<Status()>& call) {
  Outcome o;
  o.before = l.StateHash();
  o.status = call();
  o.after = l.StateHash();
  return o;
}

std::vector<Refusal> LayoutRefusals() {
  return {
      {"AForwardAfterTheVerifyForward",
       "a round is armed and its verify forward has run: accept first",
       [] {
         std::unique_ptr<Layout> l = ArmedHybrid(1);
         EXPECT_TRUE(RunForward(*l, ForwardColumns::Dense(1, 2)).ok());  // the verify forward
         EXPECT_EQ(l->CheckForward(ForwardColumns::Dense(1, 1, true)).message(),
                   "a round is armed and its verify forward has run: accept first");
         return OnLayout(*l, [&] { return RunForward(*l, ForwardColumns::Dense(1, 1, true)); });
       }},
      // The recurrent layer's own check would refuse too, as an internal error.
      {"ALayoutArmedTwice", "a round is already armed",
       [] {
         std::unique_ptr<Layout> l = ArmedHybrid(1);
         return OnLayout(*l, [&] { return l->Arm(); });
       }},
      // Attention layers only: no layer would refuse the trim itself.
      {"ATrimWhileArmed", "trim is refused while a round is armed",
       [] {
         std::unique_ptr<Layout> l =
             Create(1, {Layer("a", CacheKind::kKv), Layer("r", CacheKind::kRotating, 4)});
         EXPECT_TRUE(RunForward(*l, ForwardColumns::Dense(1, 3)).ok());
         EXPECT_TRUE(l->Arm().ok());
         return OnLayout(*l, [&] { return l->Trim(1, false); });
       }},
      {"AFilterWhileArmed", "filter is refused while a round is armed",
       [] {
         std::unique_ptr<Layout> l = ArmedHybrid(2);
         return OnLayout(*l, [&] { return l->Filter({0}); });
       }},
      {"AJoinWhileThisSideIsArmed", "join is refused while a round is armed",
       [] {
         std::unique_ptr<Layout> l = ArmedHybrid(1);
         std::unique_ptr<Layout> other =
             Create(1, {Layer("a", CacheKind::kKv), Layer("g", CacheKind::kSsm)});
         const uint64_t other_before = other->StateHash();
         Outcome o = OnLayout(*l, [&] { return l->Join(*other); });
         o.output_untouched = other->StateHash() == other_before;
         return o;
       }},
      {"AJoinWhileTheOtherSideIsArmed", "join is refused while a round is armed",
       [] {
         std::unique_ptr<Layout> other = ArmedHybrid(1);
         std::unique_ptr<Layout> l =
             Create(1, {Layer("a", CacheKind::kKv), Layer("g", CacheKind::kSsm)});
         const uint64_t other_before = other->StateHash();
         Outcome o = OnLayout(*l, [&] { return l->Join(*other); });
         o.output_untouched = other->StateHash() == other_before;
         return o;
       }},
      {"AnExtractWhileArmed", "extract is refused while a round is armed",
       [] {
         std::unique_ptr<Layout> l = ArmedHybrid(2);
         std::unique_ptr<Layout> out;
         Outcome o = OnLayout(*l, [&] { return l->Extract(0, &out); });
         o.output_untouched = out == nullptr;
         return o;
       }},
  };
}

std::vector<Refusal> AllRefusals() {
  std::vector<Refusal> all;
  for (auto* part : {&BatchRefusals, &RecurrentRefusals, &ColumnStoreRefusals, &LayoutRefusals}) {
    for (Refusal& r : (*part)()) all.push_back(std::move(r));
  }
  return all;
}

class RefusalMessages : public ::testing::TestWithParam<Refusal> {};

TEST_P(RefusalMessages, StatesItsOwnMessageAndChangesNothing) {
  const Refusal& r = GetParam();
  const Outcome o = r.run();
  ASSERT_FALSE(o.status.ok()) << "accepted; expected: " << r.message;
  EXPECT_EQ(o.status.message(), r.message);
  EXPECT_EQ(o.after, o.before) << "the state changed";
  EXPECT_TRUE(o.output_untouched) << "the output argument changed";
}

std::string CaseName(const ::testing::TestParamInfo<Refusal>& param) { return param.param.name; }

INSTANTIATE_TEST_SUITE_P(Core, RefusalMessages, ::testing::ValuesIn(AllRefusals()), CaseName);

}  // namespace
}  // namespace kvspec

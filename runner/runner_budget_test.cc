// The runner's limits (runner/runner_budget.cc, docs/trace-runner.md): the memory a trace
// holds (the layers, each forward's storage, inputs, read-back and index,
// held `out` and `sees` entries, reloads, filter and extract) and its work,
// exactly, with the limit reported on the statement that crosses it (exit
// 2), also inside `expect error`; a row's token limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kvspec/core/layout.h"
#include "kvspec/runner/runner.h"

namespace kvspec::trace {
namespace {

// n floats counting up from `start` in steps of 1.
std::vector<float> Filled(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

struct RunResult {
  int status = -1;
  std::string out, err;
};

RunResult RunText(const std::string& text, const RunOptions& options = {}) {
  std::ostringstream out, err;
  RunResult r;
  r.status = RunTraceText(text, "t.trace", options, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// ------------------------------------------------------------ memory and work
// A trace that needs more storage than the budget stops like a limit
// violation: exit status 2, not 1 (the status of a refusal or a failed
// expectation), with the statement's line.
TEST(TraceRunnerLimits, StorageBudgetExceededExitsTwo) {
  // 16 KiB per column: the second window needs more than 1 MiB.
  const std::string text =
      "trace 1\nrows 1\nlayer a kv heads=8 dim=256\nwindow 2\nwindow 80\n";
  trace::RunOptions options;
  options.max_bytes = size_t{1} << 20;
  std::ostringstream out, err;
  EXPECT_EQ(trace::RunTraceText(text, "budget.trace", options, out, err), 2);
  EXPECT_NE(err.str().find("budget.trace:5:"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("limit: the forward needs "), std::string::npos) << err.str();
  EXPECT_NE(err.str().find(" MiB (budget 1 MiB"), std::string::npos)
      << err.str();
  std::ostringstream out2, err2;
  options.max_bytes = size_t{16} << 20;
  EXPECT_EQ(trace::RunTraceText(text, "budget.trace", options, out2, err2), 0) << err2.str();
}

// The smallest limit in [lo, hi] with which `text` runs to its end (exit 0)
// when `set(options, limit)` applies it; one less stops it. The runner
// passes for every limit from that one up, so a bisection finds it.
template <class Set>
uint64_t SmallestPassingLimit(const std::string& text, uint64_t lo, uint64_t hi, Set set) {
  while (lo < hi) {  // runs with hi, not with lo - 1
    const uint64_t mid = lo + (hi - lo) / 2;
    trace::RunOptions options;
    set(&options, mid);
    std::ostringstream out, err;
    if (trace::RunTraceText(text, "limit.trace", options, out, err) == 0) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

size_t SmallestBudget(const std::string& text) {
  return static_cast<size_t>(SmallestPassingLimit(
      text, 1, uint64_t{64} << 20,
      [](trace::RunOptions* o, uint64_t limit) { o->max_bytes = static_cast<size_t>(limit); }));
}

// A reload holds the layout, its encoding and its decoded copy at once: the
// smallest budget that lets a trace reload exceeds the smallest one that
// runs it without the reload by more than half the layout's storage, and
// one byte less stops it at the reload, naming it.
TEST(TraceRunnerLimits, ReloadNeedsRoomForTwoCopies) {
  // Wide tokens (64 heads x dim 512: 256 KiB each), so that the layout's
  // storage, not one forward's read-back, decides the smallest budget.
  LayerConfig kv;
  kv.name = "a";
  kv.heads = 64;
  kv.dim = 512;
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(1, {kv}, &layout).ok());
  const auto x = Filled(8 * 64 * 512, 0.5f);
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(1, 8),
                              {AttentionIO(x.data(), x.data(), x.data(), nullptr)})
                  .ok());
  const std::string prefix = "trace 1\nrows 1\nlayer a kv heads=64 dim=512\nwindow 8\n";
  const size_t held = layout->allocatedBytes();
  ASSERT_GT(held, 0u);
  const size_t without = SmallestBudget(prefix);
  const size_t with = SmallestBudget(prefix + "reload\n");
  EXPECT_GT(with, without + held / 2);  // the decoded copy is budgeted
  trace::RunOptions options;
  options.max_bytes = with - 1;
  std::ostringstream out, err;
  EXPECT_EQ(trace::RunTraceText(prefix + "reload\n", "reload.trace", options, out, err), 2);
  EXPECT_NE(err.str().find("reload.trace:5: limit: reload needs"), std::string::npos)
      << err.str();
}

// The runner holds the tags each query saw in the last forward only for a
// trace that reads them (`expect sees`): the smallest budget that runs a
// trace with an `expect sees` exceeds the one of the same trace without it,
// by at least those tags (one per seen pair of the window's 32 queries).
// Copies made after the forward (forks) decide both budgets, not the
// forward's own read-back.
TEST(TraceRunnerLimits, SeenTagsAreHeldOnlyForATraceThatReadsThem) {
  const std::string window = "trace 1\nrows 1\nlayer a kv heads=8 dim=256\nwindow 32\n";
  const std::string forks = "fork b\nfork c\nfork d\n";
  const size_t without = SmallestBudget(window + forks);
  const size_t with = SmallestBudget(window + "expect sees a r0 p0: 0\n" + forks);
  const size_t pairs = 32 * 33 / 2;
  EXPECT_GE(with, without + pairs * sizeof(trace::Tag)) << "without " << without;
  // The forks decide: one fork less needs less in both.
  EXPECT_LT(SmallestBudget(window + "fork b\nfork c\n"), without);
}

// The smallest work budget (RunOptions::max_work, in operations) that runs
// `text` to its end: one operation less stops it with a work limit.
uint64_t SmallestWork(const std::string& text, bool values) {
  return SmallestPassingLimit(text, 0, uint64_t{1} << 40,
                              [values](trace::RunOptions* o, uint64_t limit) {
                                o->max_work = limit;
                                o->values = values;
                              });
}

// A forward's work, as docs/trace-runner.md defines it, per attention layer: per seen
// (query, slot) pair 2 x Hq x D multiply-adds when outputs are observed
// (--values) and 64 for its reported tag; per real token a scan of the
// mask over the slots after the append; and the bytes of those slots
// (K and V: 2 x H x D floats, and a position each). A plain cache grows to
// max(needed, 1.5 x slots, 16) slots (core/kv_cache.h). The budget is the
// sum over the trace's forwards, exactly: nothing else counts.
TEST(TraceRunnerLimits, WorkBudgetIsTheSumOfTheForwardsWork) {
  const std::string text = "trace 1\nrows 1\nlayer a kv heads=2 qheads=4 dim=8\nwindow 4\nwindow 2\n";
  const uint64_t slot_bytes = 2 * 2 * 8 * sizeof(float) + sizeof(int32_t);  // 132
  const uint64_t slots = 16;  // 4, then 6 tokens: 16 slots both times
  const uint64_t pairs1 = 1 + 2 + 3 + 4, pairs2 = 5 + 6;
  const uint64_t plain = (4 * slots + slots * slot_bytes + pairs1 * 64) +
                         (2 * slots + slots * slot_bytes + pairs2 * 64);
  EXPECT_EQ(plain, 5664u);
  EXPECT_EQ(SmallestWork(text, false), plain);
  EXPECT_EQ(SmallestWork(text, true), plain + (pairs1 + pairs2) * 2 * 4 * 8);
  // A window of its own: the first forward alone.
  EXPECT_EQ(SmallestWork("trace 1\nrows 1\nlayer a kv heads=2 qheads=4 dim=8\nwindow 4\n", false),
            4 * slots + slots * slot_bytes + pairs1 * 64);
}

// A recurrent forward's work (the "recurrent steps" of docs/trace-runner.md), per real
// token of a row: 4 multiply-adds per recurrent state element (Hv x dv x
// dk: its decay, the k.S read, the update and the q.S output) and one per
// conv weight (C x K, C = 2 x Hk x dk + Hv x dv channels); pad columns
// cost nothing, and outputs are always computed, with or without --values.
// Here Hv = 2, Hk = 1, dk = 4, dv = 3, K = 4: C = 14, 4 x 24 + 14 x 4 = 152
// per token, over 3 + 2 tokens (a right pad in row 1) and a decode of 2.
TEST(TraceRunnerLimits, RecurrentWorkIsItsStepsPerRealToken) {
  const std::string header =
      "trace 1\nrows 2\nlayer s ssm heads=2 kheads=1 dk=4 dv=3 conv=4\nwindow 3 right=0,1\n";
  const uint64_t channels = 2 * 1 * 4 + 2 * 3;
  const uint64_t per_token = 4 * 2 * 3 * 4 + channels * 4;
  ASSERT_EQ(per_token, 152u);
  EXPECT_EQ(SmallestWork(header, false), 5 * per_token);
  EXPECT_EQ(SmallestWork(header + "decode\n", false), 7 * per_token);
  EXPECT_EQ(SmallestWork(header + "decode\n", true), 7 * per_token);
}

// What creating the layers costs (docs/trace-runner.md: a recurrent layer double-buffers
// every row's state, conv [K-1][C] and S [Hv][dv][dk] floats; an attention
// layer, ring or not, starts empty: a ring's slots are counted by its first
// forward), summed over the layers in header order: the smallest memory
// budget of a trace of layers only is exactly that sum, which is what the
// layout holds, and one byte less stops it at the last layer that holds
// any, naming it.
TEST(TraceRunnerLimits, CreatingTheLayersCostsTheirStorageExactly) {
  const std::string header =
      "trace 1\nrows 2\nlayer s ssm heads=2 kheads=1 dk=4 dv=3 conv=4\nlayer k kv heads=3 dim=8\n"
      "layer r rotating window=3 capacity=5 heads=2 dim=4\n";
  const uint64_t channels = 2 * 1 * 4 + 2 * 3;
  const uint64_t ssm = 2 * 2 * ((4 - 1) * channels + 2 * 3 * 4) * sizeof(float);
  ASSERT_EQ(ssm, 1056u);
  EXPECT_EQ(SmallestBudget(header), ssm);
  const std::vector<std::pair<size_t, std::string>> short_of = {
      {ssm - 1, "t.trace:3: limit: the layers up to 's' needs 1 MiB (budget 1 MiB, --max-memory)\n"},
      {0, "t.trace:3: limit: the layers up to 's' needs 1 MiB (budget 0 MiB, --max-memory)\n"}};
  for (const auto& [budget, want] : short_of) {
    trace::RunOptions options;
    options.max_bytes = budget;
    std::ostringstream out, err;
    EXPECT_EQ(trace::RunTraceText(header, "t.trace", options, out, err), 2) << budget;
    EXPECT_EQ(err.str(), want) << budget;
  }
  // The ring's slots come with its first forward: a window needs them.
  EXPECT_GT(SmallestBudget(header + "window 1\n"),
            ssm + 2 * 5 * (2 * 2 * 4 * sizeof(float) + sizeof(int32_t)));
}

// A recurrent layer named "s" of the given shape (kheads 0: = heads).
LayerConfig SsmLayer(int heads, int kheads, int dk, int dv, int conv) {
  LayerConfig s;
  s.name = "s";
  s.kind = CacheKind::kSsm;
  s.heads = heads;
  s.kheads = kheads;
  s.dk = dk;
  s.dv = dv;
  s.conv = conv;
  return s;
}

// A recurrent forward's memory, exactly (docs/trace-runner.md: the layout's storage,
// which a recurrent forward does not grow; the inputs x [C], gate and beta
// [Hv] and outputs y [Hv x dv] of every column, pads included; the
// read-back of each real token's outputs, a float and its 16-byte text
// each; and, in an armed round, the round records of the real tokens: per
// token C + 2 Hk dk + Hv dv + Hv + Hv floats). Hv = 2, Hk = 1, dk = 4,
// dv = 3, K = 4 (C = 14), 2 rows, a window of 3 columns with 3 + 2 real
// tokens.
TEST(TraceRunnerLimits, ARecurrentForwardCostsItsStateInputsOutputsAndRecords) {
  const LayerConfig s = SsmLayer(/*heads=*/2, /*kheads=*/1, /*dk=*/4, /*dv=*/3, /*conv=*/4);
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(2, {s}, &layout).ok());
  const uint64_t held = layout->allocatedBytes();
  ASSERT_EQ(layout->BytesAfterForward(3), held);  // a recurrent state does not grow
  const std::string header =
      "trace 1\nrows 2\nlayer s ssm heads=2 kheads=1 dk=4 dv=3 conv=4\n";
  const uint64_t io = 2 * 3 * (14 + 2 + 2 + 2 * 3) * sizeof(float);
  const uint64_t read_back = 5 * 2 * 3 * (sizeof(float) + 16);
  const uint64_t records = 5 * (14 + 2 * 4 + 2 * 3 + 2 + 2) * sizeof(float);
  EXPECT_EQ(SmallestBudget(header + "window 3 right=0,1\n"), held + io + read_back);
  ASSERT_TRUE(layout->Arm().ok());
  ASSERT_EQ(layout->allocatedBytes(), held);
  EXPECT_EQ(SmallestBudget(header + "arm\nwindow 3 right=0,1\n"),
            held + io + read_back + records);
}

// The same for an attention forward: the storage it grows to (a plain
// cache of 1 head of dim 4 grows to 16 slots of K, V and a position), its
// inputs k and v (and q and o when outputs are observed: Hq = 2), the
// read-back (per seen pair a Tag and its 24-byte text; per query, when
// observed, its Hq x D outputs, a float and its 16-byte text each) and the
// content index's 64 bytes per new token. One window of 3 tokens: 6 pairs.
TEST(TraceRunnerLimits, AnAttentionForwardCostsItsStorageInputsReadBackAndIndex) {
  const std::string text = "trace 1\nrows 1\nlayer a kv heads=1 qheads=2 dim=4\nwindow 3\n";
  const uint64_t storage = 16 * (2 * 4 * sizeof(float) + sizeof(int32_t));
  const uint64_t pairs = 1 + 2 + 3, index = 3 * 64;
  const uint64_t tags = pairs * (sizeof(trace::Tag) + 24);
  const uint64_t appended = 2 * 3 * 1 * 4 * sizeof(float);  // k and v
  const uint64_t observed = 2 * 3 * 2 * 4 * sizeof(float) + 3 * 2 * 4 * (sizeof(float) + 16);
  const auto smallest = [&](bool values) {
    return SmallestPassingLimit(text, 1, uint64_t{1} << 24,
                                [values](trace::RunOptions* o, uint64_t limit) {
                                  o->max_bytes = static_cast<size_t>(limit);
                                  o->values = values;
                                });
  };
  EXPECT_EQ(smallest(false), storage + appended + tags + index);
  EXPECT_EQ(smallest(true), storage + appended + observed + tags + index);
}

// An attention layer that grows holds its old storage (counted in what the
// runner holds) and its new one at once, each counted once: a plain cache
// of 8 heads of dim 64 (4100 bytes a slot) holds 16 slots after a window
// of 16, and a decode grows it to 24 (1.5 x 16); the decode needs what is
// held (the 16 slots and the index's 16 entries of 64 bytes), the 24 new
// slots, its k and v, the read-back of its 17 pairs and its index entry,
// more than the window did.
TEST(TraceRunnerLimits, AGrowingAttentionLayerCountsItsOldAndNewStorageOnce) {
  const std::string text = "trace 1\nrows 1\nlayer a kv heads=8 dim=64\nwindow 16\ndecode\n";
  const uint64_t slot = 2 * 8 * 64 * sizeof(float) + sizeof(int32_t);
  ASSERT_EQ(slot, 4100u);
  const uint64_t held = 16 * slot + 16 * 64;
  const uint64_t decode = 24 * slot + 2 * 8 * 64 * sizeof(float) + 17 * (sizeof(trace::Tag) + 24) + 64;
  EXPECT_EQ(SmallestBudget(text), held + decode);
}

// The work limit names the work in whole millions, rounded down: a trace
// whose work is 5,999,996 operations (by the figures above: 422 tokens of
// 1 head of dim 32 in one window, 422 slots of 260 bytes) needs "5 M".
TEST(TraceRunnerLimits, WorkLimitNamesWholeMillions) {
  const std::string text = "trace 1\nrows 1\nlayer a kv heads=1 dim=32\nwindow 422\n";
  const uint64_t pairs = 422 * 423 / 2;
  const uint64_t work = 422 * 422 + 422 * (2 * 32 * sizeof(float) + sizeof(int32_t)) + pairs * 64;
  ASSERT_EQ(work, 5999996u);
  ASSERT_EQ(SmallestWork(text, false), work);
  trace::RunOptions options;
  options.max_work = 1000000;
  std::ostringstream out, err;
  EXPECT_EQ(trace::RunTraceText(text, "work.trace", options, out, err), 2);
  EXPECT_NE(err.str().find("work.trace:4: limit: work of the trace up to here needs 5 M operations "
                           "(budget 1 M, --max-work)"),
            std::string::npos)
      << err.str();
}

// ------------------------------------------------------------ held entries
// The smallest memory budget (RunOptions::max_bytes) with which `text` runs
// to its end; one byte less stops it.
uint64_t SmallestBudget(const std::string& text, bool values) {
  uint64_t lo = 1, hi = uint64_t{64} << 20;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    trace::RunOptions options;
    options.max_bytes = static_cast<size_t>(mid);
    options.values = values;
    std::ostringstream out, err;
    if (trace::RunTraceText(text, "out.trace", options, out, err) == 0) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// With outputs observed (--values), a layout's last forward holds every
// query's output: the budget of docs/trace-runner.md counts 64 bytes per reported entry plus
// its floats (Hq x D), in every layout that holds the forward (each fork
// copies it). A window of 8 queries of 1 head of dim 4, then forks: the
// smallest budget with --values exceeds the one without by exactly
// (layouts holding the forward) x 8 x (64 + 16) bytes, the forks deciding
// both; that budget runs the trace and one byte less stops it at the last
// fork, exit 2.
TEST(TraceRunnerLimits, EachHeldOutEntryCosts64BytesAndItsFloats) {
  const std::string window = "trace 1\nrows 1\nlayer a kv heads=1 dim=4\nwindow 8\n";
  const uint64_t per_forward = 8 * (64 + 4 * sizeof(float));
  std::string text = window;
  uint64_t last_with = 0, last_without = 0;
  for (int forks = 1; forks <= 6; ++forks) {
    text += "fork f" + std::to_string(forks) + "\n";
    const uint64_t with = SmallestBudget(text, true);
    const uint64_t without = SmallestBudget(text, false);
    if (forks >= 3) {  // the forks decide, not the forward
      // The last fork is made while `forks` layouts hold the forward.
      EXPECT_EQ(with - without, static_cast<uint64_t>(forks) * per_forward)
          << forks << " forks: " << with << " vs " << without;
    }
    if (forks >= 4) {
      // One more fork holds one more copy of the storage and the outputs.
      EXPECT_EQ(with - last_with, without - last_without + per_forward) << forks << " forks";
    }
    last_with = with;
    last_without = without;
  }
  trace::RunOptions options;
  options.values = true;
  options.max_bytes = static_cast<size_t>(last_with);
  std::ostringstream out, err;
  EXPECT_EQ(trace::RunTraceText(text, "out.trace", options, out, err), 0) << err.str();
  options.max_bytes = static_cast<size_t>(last_with - 1);
  std::ostringstream out2, err2;
  EXPECT_EQ(trace::RunTraceText(text, "out.trace", options, out2, err2), 2);
  EXPECT_NE(err2.str().find("out.trace:10: limit: fork needs "), std::string::npos) << err2.str();
}

// The same for the tags each query saw, held for a trace that reads them
// (`expect sees`): 64 bytes per query of the forward plus one Tag per seen
// pair (8 queries seeing 1 + 2 + ... + 8 tokens), in every layout holding
// the forward. The smallest budget of the trace with the `expect sees`
// line exceeds the one without it by exactly that, the forks deciding.
TEST(TraceRunnerLimits, EachHeldSeesEntryCosts64BytesAndItsTags) {
  const std::string window = "trace 1\nrows 1\nlayer a kv heads=1 dim=4\nwindow 8\n";
  const uint64_t per_forward = 8 * 64 + (8 * 9 / 2) * sizeof(trace::Tag);
  std::string forks;
  for (int n = 1; n <= 5; ++n) {
    forks += "fork f" + std::to_string(n) + "\n";
    if (n < 3) continue;  // the forks decide, not the forward
    const uint64_t with = SmallestBudget(window + "expect sees a r0 p0: 0\n" + forks, false);
    const uint64_t without = SmallestBudget(window + forks, false);
    EXPECT_EQ(with - without, static_cast<uint64_t>(n) * per_forward)
        << n << " forks: " << with << " vs " << without;
  }
}

// ------------------------------------------------------------ limits of statements
// An operation inside `expect error` that exceeds a limit is the limit:
// exit 2 on its line, not a met (or failed) expectation.
TEST(RunnerEdges, ExpectErrorOverALimitStopsAsTheLimit) {
  const std::string text =
      "trace 1\nrows 1\nlayer a kv\nexpect error window 8\nexpect positions 0\n";
  RunOptions options;
  options.max_work = 1;
  const RunResult r = RunText(text, options);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err.rfind("t.trace:4: limit: work of the trace", 0), 0u) << r.err;
  // Within the budget the window runs, so the expectation fails.
  const RunResult ok = RunText(text);
  EXPECT_EQ(ok.status, 1);
  EXPECT_NE(ok.err.find("t.trace:4: expected an error got none"), std::string::npos) << ok.err;
}

// The smallest memory budget (RunOptions::max_bytes) under which `text`
// runs to its end with exit 0 (bisection; a budget that passes passes
// every larger one).
size_t SmallestPassingBudget(const std::string& text) {
  size_t lo = 0, hi = size_t{1} << 32;  // lo fails, hi passes
  RunOptions options;
  options.max_bytes = hi;
  EXPECT_EQ(RunText(text, options).status, 0);
  while (hi - lo > 1) {
    options.max_bytes = lo + (hi - lo) / 2;
    (RunText(text, options).status == 0 ? hi : lo) = options.max_bytes;
  }
  return hi;
}

// `filter` and `extract` build their new layers while everything held stays
// allocated: with a copy of the layout held (a fork), they are the
// statements that need the most memory, so one byte less than the budget
// the trace needs stops it at them, as a limit (exit 2) naming them.
TEST(RunnerEdges, FilterAndExtractAreRefusedOverTheMemoryBudget) {
  const std::string head = "trace 1\nrows 2\nlayer a kv heads=64 dim=512\nwindow 4\nfork x\n";
  for (const char* statement : {"filter 0,1", "extract 1 as y"}) {
    const std::string last = statement;
    const std::string text = head + last + "\n";
    const size_t budget = SmallestPassingBudget(text);
    RunOptions options;
    options.max_bytes = budget - 1;
    const RunResult r = RunText(text, options);
    EXPECT_EQ(r.status, 2) << last;
    const std::string what = last.substr(0, last.find(' '));
    EXPECT_EQ(r.err.rfind("t.trace:6: limit: " + what + " needs ", 0), 0u) << r.err;
    // Without the last statement the trace needs less.
    options.max_bytes = budget - 1;
    EXPECT_EQ(RunText(head, options).status, 0) << last;
  }
}

// A row may hold exactly kMaxTokensPerRow tokens (the forwards that fill
// it run and `expect positions` holds); a forward that would put one more
// in it stops the run as a limit on its line (exit 2).
// It writes a million tokens: seconds in the dev build, minutes under ASan,
// so sanitized builds leave it to the dev run.
TEST(RunnerEdges, ARowHoldsAtMostTheTokenLimit) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "a million tokens take minutes under ASan; the dev build runs this test";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "a million tokens take minutes under ASan; the dev build runs this test";
#endif
#endif
  std::string text = "trace 1\nrows 1\nlayer a rotating window=1\n";
  int64_t held = 0;
  for (; held + 4096 <= kMaxTokensPerRow; held += 4096) text += "window 4096\n";
  text += "window " + std::to_string(kMaxTokensPerRow - held) + "\n";
  text += "expect positions " + std::to_string(kMaxTokensPerRow) + "\n";
  const int decode_line = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
  text += "decode\n";
  const RunResult r = RunText(text);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "t.trace:" + std::to_string(decode_line) + ": limit: row 0 would exceed " +
                       std::to_string(kMaxTokensPerRow) + " tokens\n");
}

}  // namespace
}  // namespace kvspec::trace

// Budgets that are exact for every kind and storage type
// (docs/trace-runner.md: the runner's memory budget counts a layout's real
// bytes, each figure checked before the allocation it stands for).
//
// LayoutBudgetTargets.EstimatesAreTheBytesBuilt drives random layouts of
// every layer kind (kv, rotating, ssm; batched when rows > 1, single-row
// after an extract) through forwards with padding, trims, rounds, forks,
// joins, filters, extracts and reloads. Before each operation that builds
// storage it takes the figure a budget checks (Layout::BytesAfterForward
// and AttentionCache::BytesAfterAppend, core/batch.h's FilterRowsBytes,
// MergeRowsBytes and ExtractRowBytes, allocatedBytes() for a fork or a
// reload), and after it the bytes each layer holds: equal, per layer and in
// all. Every layer's storage is also checked against a model of its own
// written from the shapes alone (a slot: K and V rows of every head and a
// position; a recurrent row: two buffers of conv and recurrent state; a
// round: one record per verify token), a refused operation changes no
// byte, and a layout of other layers, which cannot join, costs 0.
//
// LayoutBudgetTargets.TheRunnerGrantsExactlyTheBytesOfTheLayers runs the
// header of a random layout through the trace runner with --max-memory set
// to the bytes Layout::Create holds (accepted) and one byte less (stopped,
// exit 2, at the last layer that holds any).
// LayoutBudgetTargets.TheRunnerGrantsALifecycleStatementExactlyItsBytes
// does the same for a `filter`, `extract` or `join` after padded windows:
// the smallest budget of the trace exceeds the one of the same trace with
// a `fork` in that statement's place by exactly the bytes it builds minus
// the layout's own; that budget runs it, one byte less stops it there.
//
// Each runs once per Highway target (the test name carries the target).
// Layer shapes come from testing/shape_generators.h; RowBytes below is
// the model's one place that knows how a key or value row is stored.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/detail/Configuration.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kvspec/core/batch.h"
#include "kvspec/core/codec/codec.h"
#include "kvspec/core/layout.h"
#include "kvspec/kernels/kv_blocks.h"
#include "kvspec/properties/forward_inputs.h"
#include "kvspec/runner/runner.h"
#include "kvspec/testing/generators.h"
#include "kvspec/testing/rc_choices.h"
#include "kvspec/testing/shape_generators.h"
#include "kvspec/testing/target_params.h"
#include "kvspec/testing/target_scope.h"

namespace kvspec {
namespace {

// Layouts of every kind in proportion (testing/shape_generators.h), at
// every size (a sized draw makes small cases of plain kv layers only).
rc::Gen<std::vector<LayerConfig>> GenLayers() {
  return rc::gen::exec([] {
    testing::RcChoices choices(testing::RcChoices::Scale::kUniform);
    return testing::MixedLayers(choices);
  });
}

// ------------------------------------------------------------ the model
// Bytes of one stored head row of keys (or values) of an attention layer.
size_t RowBytes(const LayerConfig& l) { return KvRowBytes(l.kv, l.dim); }

// One slot of an attention layer: K and V rows of every head, a position.
size_t SlotBytes(const LayerConfig& l) {
  return 2 * static_cast<size_t>(l.heads) * RowBytes(l) + sizeof(int32_t);
}

size_t Channels(const LayerConfig& l) {
  return 2 * static_cast<size_t>(l.KeyHeads()) * l.dk + static_cast<size_t>(l.heads) * l.dv;
}

// A recurrent layer's rows: two buffers each of conv [K-1][C] and
// recurrent [Hv][dv][dk] floats.
size_t SsmStateBytes(int rows, const LayerConfig& l) {
  const size_t row = static_cast<size_t>(l.conv - 1) * Channels(l) +
                     static_cast<size_t>(l.heads) * l.dv * l.dk;
  return static_cast<size_t>(rows) * 2 * row * sizeof(float);
}

// What building a recurrent cache allocates besides its state (and
// allocatedBytes() leaves out): one token's scratch (pre-conv outputs C,
// prepared q and k 2 x Hk x dk, outputs Hv x dv) and the packed conv
// weights (K x C).
size_t SsmScratchBytes(const LayerConfig& l) {
  const size_t hk = static_cast<size_t>(l.KeyHeads()) * l.dk;
  return (Channels(l) + 2 * hk + static_cast<size_t>(l.heads) * l.dv +
          static_cast<size_t>(l.conv) * Channels(l)) *
         sizeof(float);
}

// One verify token's round record: pre-conv x (C), prepared q and k
// (2 x Hk x dk), v (Hv x dv), the gate and beta (Hv each).
size_t SsmRecordBytes(const LayerConfig& l) {
  const size_t hk = static_cast<size_t>(l.KeyHeads()) * l.dk;
  const size_t hv = static_cast<size_t>(l.heads);
  return (Channels(l) + 2 * hk + hv * l.dv + 2 * hv) * sizeof(float);
}

// What Layout::Create holds for a layer: a recurrent layer its rows'
// state; an attention layer nothing (a ring gets its capacity of slots at
// its first forward).
size_t CreatedBytes(int rows, const LayerConfig& l) {
  return l.kind == CacheKind::kSsm ? SsmStateBytes(rows, l) : 0;
}

// ------------------------------------------------------------ the checks
// Kind strings of the caches whose figures were checked exactly, and how
// often each operation built storage, over one rc::check.
std::map<std::string, int>& Reached() {
  static std::map<std::string, int> reached;
  return reached;
}

// Layer l of `layout`, just built from the figure `estimate`: it holds
// exactly that (a recurrent layer: its state, plus the scratch its
// constructor allocated), and its storage is what the model says.
void CheckBuilt(const Layout& layout, size_t l, size_t estimate, const char* what) {
  const LayerConfig& cfg = layout.config(l);
  const Cache& cache = layout.cache(l);
  const size_t held = cache.allocatedBytes();
  const size_t rows = static_cast<size_t>(layout.rows());
  RC_LOG() << what << " " << cfg.name << " (" << cache.kind() << "): figure " << estimate
           << ", holds " << held << "\n";
  if (cfg.kind == CacheKind::kSsm) {
    RC_ASSERT(held == SsmStateBytes(layout.rows(), cfg));
    RC_ASSERT(estimate == held + SsmScratchBytes(cfg));
  } else {
    RC_ASSERT(cache.bytesPerToken() == 2 * static_cast<size_t>(cfg.heads) * RowBytes(cfg));
    RC_ASSERT(estimate == held);
    RC_ASSERT(held % (rows * SlotBytes(cfg)) == 0);
    ++Reached()[KvTypeName(cfg.kv)];
  }
  ++Reached()[cache.kind()];
  ++Reached()[what];
}

// Every layout by name; operations act on the current one.
struct Layouts {
  std::map<std::string, std::unique_ptr<Layout>> named;
  std::string current = "main";
  Layout& Cur() { return *named.at(current); }
  // Every layout's state and bytes, for "a refusal changes nothing".
  std::string Snapshot() const {
    std::ostringstream os;
    os << current;
    for (const auto& n : named) {
      os << " " << n.first << ":" << n.second->StateHash() << ":" << n.second->allocatedBytes();
    }
    return os.str();
  }
};

const std::vector<std::string>& Names() {
  static const std::vector<std::string> names = {"main", "a", "b"};
  return names;
}

// A forward of 1-6 columns (a decode now and then) with padding, on the
// current layout. Attention layers hold exactly BytesAfterAppend; a
// recurrent layer holds what it held, plus one record per real token in
// an armed round; the layout's total is BytesAfterForward plus those.
void Forward(Layouts& s) {
  Layout& layout = s.Cur();
  const int rows = layout.rows();
  const bool decode = *rc::gen::inRange(0, 5) == 0;
  ForwardColumns cols = ForwardColumns::Dense(rows, 1, true);
  if (!decode) {
    testing::RcChoices choices;
    const testing::PaddedColumns p =
        testing::DrawPaddedColumns(choices, 6, layout.positions(), *rc::gen::arbitrary<bool>());
    cols = ForwardColumns::Dense(rows, p.columns);
    cols.left = p.left;
    cols.right = p.right;
  }
  const ForwardInputs in(layout, cols.columns, *rc::gen::arbitrary<uint32_t>());
  RC_LOG() << (decode ? std::string("decode") : "window " + std::to_string(cols.columns) +
                                                   " left=" + testing::JoinInts(cols.left) +
                                                   " right=" + testing::JoinInts(cols.right))
           << "\n";
  std::vector<size_t> figure(layout.size());
  for (size_t l = 0; l < layout.size(); ++l) {
    const AttentionCache* a = layout.attention(l);
    figure[l] = a ? a->BytesAfterAppend(cols.columns) : layout.cache(l).allocatedBytes();
  }
  const size_t total = layout.BytesAfterForward(cols.columns);
  const bool armed = layout.armed();
  const std::string before = s.Snapshot();
  if (!layout.Forward(cols, in.io).ok()) {
    RC_ASSERT(s.Snapshot() == before);
    return;
  }
  size_t records = 0;
  for (size_t l = 0; l < layout.size(); ++l) {
    const LayerConfig& cfg = layout.config(l);
    if (cfg.kind != CacheKind::kSsm) {
      CheckBuilt(layout, l, figure[l], "forward");
      continue;
    }
    size_t real = 0;
    for (int r = 0; r < rows; ++r) real += static_cast<size_t>(cols.Real(r));
    const size_t grown = armed ? real * SsmRecordBytes(cfg) : 0;
    RC_ASSERT(layout.cache(l).allocatedBytes() == figure[l] + grown);
    records += grown;
  }
  RC_ASSERT(layout.allocatedBytes() == total + records);
}

// Join, filter and extract: `figure(l)` per layer before, `call` builds;
// each built layer holds its figure (the layout's total figure is their
// sum). A refusal changes nothing.
template <typename Figure, typename Call>
void Lifecycle(Layouts& s, const char* what, size_t total, const Figure& figure,
               const Call& call) {
  const Layout& layout = s.Cur();
  std::vector<size_t> per_layer(layout.size());
  size_t sum = 0;
  for (size_t l = 0; l < layout.size(); ++l) {
    per_layer[l] = figure(l);
    sum += per_layer[l];
  }
  const std::string before = s.Snapshot();
  const Layout* built = nullptr;
  if (!call(&built).ok()) {
    RC_ASSERT(s.Snapshot() == before);
    return;
  }
  RC_ASSERT(total == sum);
  for (size_t l = 0; l < built->size(); ++l) CheckBuilt(*built, l, per_layer[l], what);
}

void Join(Layouts& s) {
  const std::string name = *rc::gen::elementOf(Names());
  RC_LOG() << "join " << name << "\n";
  auto it = s.named.find(name);
  if (it == s.named.end() || name == s.current) return;
  const Layout& a = s.Cur();
  const Layout& b = *it->second;
  if (a.rows() + b.rows() > 8) return;
  Lifecycle(
      s, "join", a.BytesAfterJoin(b),
      [&](size_t l) { return MergeRowsBytes({&a.cache(l), &b.cache(l)}); },
      [&](const Layout** built) {
        *built = &s.Cur();
        return s.Cur().Join(b);
      });
}

void Filter(Layouts& s) {
  const Layout& a = s.Cur();
  std::vector<int32_t> rows;
  for (int r = 0; r < a.rows(); ++r) {
    if (*rc::gen::inRange(0, 3) != 0) rows.push_back(r);
  }
  RC_LOG() << "filter " << testing::JoinInts(rows) << "\n";
  Lifecycle(
      s, "filter", a.BytesAfterFilter(rows),
      [&](size_t l) { return FilterRowsBytes(a.cache(l), rows); },
      [&](const Layout** built) {
        *built = &s.Cur();
        return s.Cur().Filter(rows);
      });
}

void Extract(Layouts& s) {
  const Layout& a = s.Cur();
  const int32_t row = *rc::gen::inRange<int32_t>(0, a.rows());
  const std::string name = *rc::gen::elementOf(Names());
  RC_LOG() << "extract " << row << " as " << name << "\n";
  if (s.named.count(name)) return;
  std::unique_ptr<Layout> one;
  Lifecycle(
      s, "extract", a.BytesOfExtract(row),
      [&](size_t l) { return ExtractRowBytes(a.cache(l), row); },
      [&](const Layout** built) {
        const Status st = a.Extract(row, &one);
        *built = one.get();
        return st;
      });
  if (one) s.named[name] = std::move(one);
}

// A fork or a reload holds a copy of the layout: exactly its bytes.
void Fork(Layouts& s) {
  const std::string name = *rc::gen::elementOf(Names());
  RC_LOG() << "fork " << name << "\n";
  if (s.named.count(name)) return;
  const size_t figure = s.Cur().allocatedBytes();
  std::unique_ptr<Layout> copy;
  RC_ASSERT(s.Cur().CopyTo(&copy).ok());
  RC_ASSERT(copy->allocatedBytes() == figure);
  s.named[name] = std::move(copy);
  ++Reached()["fork"];
}

void Reload(Layouts& s) {
  RC_LOG() << "reload\n";
  const size_t figure = s.Cur().allocatedBytes();
  std::string bytes;
  RC_ASSERT(EncodeLayout(s.Cur(), &bytes).ok());
  std::unique_ptr<Layout> loaded;
  RC_ASSERT(DecodeLayout(bytes, &loaded).ok());
  RC_ASSERT(loaded->allocatedBytes() == figure);
  loaded->ForgetBypassBound();
  s.named[s.current] = std::move(loaded);
  ++Reached()["reload"];
}

// Trims and rounds build nothing; they bring the layers to the states
// (wrapped rings, armed rounds, tips dropped) the figures must hold in.
void Other(Layouts& s) {
  Layout& layout = s.Cur();
  const std::string before = s.Snapshot();
  Status st;
  switch (*rc::gen::inRange(0, 4)) {
    case 0: {
      const std::vector<int32_t> p = layout.positions();
      const int32_t n = *rc::gen::inRange<int32_t>(0, *std::max_element(p.begin(), p.end()) + 1);
      const bool bypass = *rc::gen::arbitrary<bool>();
      RC_LOG() << "trim " << n << (bypass ? " bypass" : "") << "\n";
      st = layout.Trim(n, bypass);
      break;
    }
    case 1:
      RC_LOG() << "arm\n";
      st = layout.Arm();
      break;
    case 2: {
      std::vector<int32_t> keep;
      for (int r = 0; r < layout.rows(); ++r) keep.push_back(*rc::gen::inRange<int32_t>(0, 4));
      RC_LOG() << "accept " << testing::JoinInts(keep) << "\n";
      st = layout.Accept(keep);
      break;
    }
    default: {
      const std::string name = *rc::gen::elementOf(Names());
      RC_LOG() << "use " << name << "\n";
      if (s.named.count(name)) s.current = name;
      return;
    }
  }
  if (!st.ok()) RC_ASSERT(s.Snapshot() == before);
}

class LayoutBudgetTargets : public ::testing::TestWithParam<int64_t> {};

TEST_P(LayoutBudgetTargets, EstimatesAreTheBytesBuilt) {
  testing::TargetScope scope(GetParam());
  Reached().clear();
  const bool ok = rc::check(
      std::string("byte figures are the bytes built on ") + hwy::TargetName(GetParam()), [] {
        const int rows = *rc::gen::inRange(1, 4);
        const std::vector<LayerConfig> layers = *GenLayers();
        RC_LOG() << testing::TraceHeader(rows, layers);
        Layouts s;
        RC_ASSERT(Layout::Create(rows, layers, &s.named["main"]).ok());
        const Layout& created = s.Cur();
        for (size_t l = 0; l < layers.size(); ++l) {
          const Cache& cache = created.cache(l);
          RC_ASSERT(cache.allocatedBytes() == CreatedBytes(rows, layers[l]));
          if (const SsmCacheBase* ssm = created.recurrent(l)) {
            CheckBuilt(created, l, SsmCacheBase::BytesWhenBuilt(rows, ssm->shape()), "create");
          }
        }
        const int steps = *rc::gen::inRange(1, 25);
        for (int i = 0; i < steps; ++i) {
          switch (*rc::gen::inRange(0, 10)) {
            case 0: case 1: case 2: Forward(s); break;
            case 3: Join(s); break;
            case 4: Filter(s); break;
            case 5: Extract(s); break;
            case 6: Fork(s); break;
            case 7: Reload(s); break;
            default: Other(s); break;
          }
          RC_ASSERT(s.Cur().CheckInvariants().ok());
        }
        // A layout of other layers (one more) cannot join: its figure is 0.
        std::vector<LayerConfig> more = layers;
        more.push_back(layers.back());
        more.back().name = "extra";
        std::unique_ptr<Layout> other;
        RC_ASSERT(Layout::Create(rows, more, &other).ok());
        RC_ASSERT(s.Cur().BytesAfterJoin(*other) == 0u);
        const std::string before = s.Snapshot();
        RC_ASSERT(!s.Cur().Join(*other).ok());
        RC_ASSERT(s.Snapshot() == before);
      });
  ASSERT_TRUE(ok);
  // Every kind's figures and every operation that builds were checked,
  // when the run is large enough to reach them all.
  const rc::detail::TestParams& params = rc::detail::configuration().testParams;
  const bool check_reach = params.maxSuccess >= 200 && params.maxSize >= 30;
  for (const char* what : {"kv", "batched_kv", "rotating", "batched_rotating", "ssm",
                           "batched_ssm", "f32", "bf16", "q8_0", "q4_0", "create", "forward",
                           "join", "filter", "extract", "fork", "reload"}) {
    std::cout << what << ": " << Reached()[what] << " checked\n";
    if (check_reach) {
      EXPECT_GT(Reached()[what], 0) << what << " was never checked";
    }
  }
}

// The runner's budget for creating the layers (runner/runner_budget.cc)
// grants exactly what Layout::Create holds: the header runs with
// --max-memory at those bytes, and one byte less stops it as a limit on
// the last layer that holds any.
TEST_P(LayoutBudgetTargets, TheRunnerGrantsExactlyTheBytesOfTheLayers) {
  testing::TargetScope scope(GetParam());
  int stopped = 0;
  const bool ok = rc::check(
      std::string("the runner grants the layers their bytes on ") + hwy::TargetName(GetParam()),
      [&stopped] {
        const int rows = *rc::gen::inRange(1, 64);
        const std::vector<LayerConfig> layers = *GenLayers();
        const std::string text = testing::TraceHeader(rows, layers);
        RC_LOG() << text;
        std::unique_ptr<Layout> layout;
        RC_ASSERT(Layout::Create(rows, layers, &layout).ok());
        const size_t need = layout->allocatedBytes();
        size_t last = layers.size();  // the last layer holding any bytes
        for (size_t l = 0; l < layers.size(); ++l) {
          if (layout->cache(l).allocatedBytes() > 0) last = l;
        }
        trace::RunOptions options;
        options.max_bytes = need;
        std::ostringstream out, err;
        RC_ASSERT(trace::RunTraceText(text, "t.trace", options, out, err) == 0);
        RC_ASSERT(err.str().empty());
        if (need == 0) return;
        options.max_bytes = need - 1;
        std::ostringstream out2, err2;
        RC_ASSERT(trace::RunTraceText(text, "t.trace", options, out2, err2) == 2);
        const std::string want = "t.trace:" + std::to_string(3 + last) +
                                 ": limit: the layers up to '" + layers[last].name + "' needs ";
        RC_LOG() << err2.str();
        RC_ASSERT(err2.str().rfind(want, 0) == 0u);
        RC_ASSERT(out2.str().empty());
        ++stopped;
      });
  ASSERT_TRUE(ok);
  EXPECT_GT(stopped, 0);
}

// The smallest --max-memory under which `text` runs to its end (exit 0):
// the runner passes under every larger one, so a bisection finds it.
uint64_t SmallestBudget(const std::string& text) {
  uint64_t lo = 0, hi = uint64_t{1} << 30;  // lo may fail, hi passes
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    trace::RunOptions options;
    options.max_bytes = static_cast<size_t>(mid);
    std::ostringstream out, err;
    if (trace::RunTraceText(text, "t.trace", options, out, err) == 0) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// What the run of `text` under `budget` prints on its error stream.
std::string ErrorsUnder(const std::string& text, uint64_t budget, int* status) {
  trace::RunOptions options;
  options.max_bytes = static_cast<size_t>(budget);
  std::ostringstream out, err;
  *status = trace::RunTraceText(text, "t.trace", options, out, err);
  return err.str();
}

int Lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// The runner holds `filter`, `extract` and `join` to the bytes of the
// layers they build: a random layout gets 1-3 padded windows, then the
// statement S. The budget S needs is what the runner holds plus its
// figure; a `fork z` in S's place needs what the runner holds plus the
// layout's bytes. Forks before them make both the statements that need
// the most, so the smallest budgets of the two traces differ by exactly
// (bytes S builds) - (bytes of the layout), both counted on a copy of the
// layout built directly; the smallest budget runs the trace, and one byte
// less stops it at S as a limit naming S.
TEST_P(LayoutBudgetTargets, TheRunnerGrantsALifecycleStatementExactlyItsBytes) {
  testing::TargetScope scope(GetParam());
  std::map<std::string, int> decided;
  const bool ok = rc::check(
      std::string("the runner grants filter, extract and join their bytes on ") +
          hwy::TargetName(GetParam()),
      [&decided] {
        const int rows = *rc::gen::inRange(1, 4);
        const std::vector<LayerConfig> layers = *GenLayers();
        std::string text = testing::TraceHeader(rows, layers);
        std::unique_ptr<Layout> mirror;
        RC_ASSERT(Layout::Create(rows, layers, &mirror).ok());
        const int windows = *rc::gen::inRange(1, 3);
        for (int i = 0; i < windows; ++i) {
          testing::RcChoices choices;
          const testing::PaddedColumns p = testing::DrawPaddedColumns(
              choices, 6, mirror->positions(), *rc::gen::arbitrary<bool>());
          ForwardColumns cols = ForwardColumns::Dense(rows, p.columns);
          cols.left = p.left;
          cols.right = p.right;
          const ForwardInputs in(*mirror, cols.columns, 1);
          RC_PRE(mirror->Forward(cols, in.io).ok());
          text += "window " + std::to_string(p.columns) + " left=" + testing::JoinInts(p.left) +
                  " right=" + testing::JoinInts(p.right) + "\n";
        }
        // S, and the layers it builds, on a copy.
        std::string statement, word;
        std::unique_ptr<Layout> built;
        const int which = *rc::gen::inRange(0, 3);
        if (which == 0) {
          std::vector<int32_t> keep;
          for (int r = 0; r < rows; ++r) {
            if (*rc::gen::inRange(0, 3) != 0) keep.push_back(r);
          }
          if (keep.empty()) keep.push_back(*rc::gen::inRange<int32_t>(0, rows));
          word = "filter";
          statement = "filter " + testing::JoinInts(keep);
          RC_ASSERT(mirror->CopyTo(&built).ok());
          RC_ASSERT(built->Filter(keep).ok());
        } else if (which == 1) {
          const int32_t row = *rc::gen::inRange<int32_t>(0, rows);
          word = "extract";
          statement = "extract " + std::to_string(row) + " as x";
          RC_ASSERT(mirror->Extract(row, &built).ok());
        } else {
          word = "join";
          text += "fork o\n";
          statement = "join o";
          RC_ASSERT(mirror->CopyTo(&built).ok());
          RC_ASSERT(built->Join(*mirror).ok());
        }
        uint64_t bytes = 0;  // what S builds: its layers and their scratch
        for (size_t l = 0; l < built->size(); ++l) {
          bytes += built->cache(l).allocatedBytes();
          if (layers[l].kind == CacheKind::kSsm) bytes += SsmScratchBytes(layers[l]);
        }
        const uint64_t held = mirror->allocatedBytes();
        RC_LOG() << text << statement << "\nbuilds " << bytes << " bytes, the layout holds "
                 << held << "\n";
        if (bytes == 0) {  // the row holds no token: S needs nothing more
          RC_ASSERT(SmallestBudget(text + statement + "\n") == SmallestBudget(text));
          ++decided["nothing"];
          return;
        }
        std::string forks;
        for (int k = 0; k <= 64; k = k ? 2 * k : 1) {
          for (int f = k / 2 + 1; f <= k; ++f) forks += "fork f" + std::to_string(f) + "\n";
          const std::string with_s = text + forks + statement + "\n";
          const std::string with_fork = text + forks + "fork z\n";
          const uint64_t need_s = SmallestBudget(with_s);
          const uint64_t need_fork = SmallestBudget(with_fork);
          int status = 0, fork_status = 0;
          const std::string err = ErrorsUnder(with_s, need_s - 1, &status);
          const std::string fork_err = ErrorsUnder(with_fork, need_fork - 1, &fork_status);
          const std::string at = "t.trace:" + std::to_string(Lines(with_s)) + ": limit: ";
          if (err.rfind(at, 0) != 0 || fork_err.rfind(at, 0) != 0) continue;  // not decisive yet
          RC_LOG() << k << " forks: smallest budgets " << need_s << " (" << word << ") and "
                   << need_fork << " (fork)\n" << err;
          RC_ASSERT(status == 2);
          RC_ASSERT(err.rfind(at + word + " needs ", 0) == 0u);
          RC_ASSERT(need_s + held == need_fork + bytes);
          ErrorsUnder(with_s, need_s, &status);
          RC_ASSERT(status == 0);
          ++decided[word];
          return;
        }
        RC_FAIL("no number of forks made the statement the one that needs the most");
      });
  ASSERT_TRUE(ok);
  for (const char* word : {"filter", "extract", "join"}) EXPECT_GT(decided[word], 0) << word;
  // "nothing": S built no bytes (its rows held no token).
  for (const auto& d : decided) std::cout << d.first << ": " << d.second << " decided\n";
}

KVSPEC_FOR_EACH_TARGET(LayoutBudgetTargets);

}  // namespace
}  // namespace kvspec

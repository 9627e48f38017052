// Batch lifecycle and persistence properties over random hybrid layouts
// (kv, windowed kv, rings, recurrent layers) with random histories (windows
// with left and prepared padding, decodes, trims, speculative rounds):
//
// - join keeps every running row: after A.Join(B), the next forward shows
//   each row exactly what A or B alone would have shown it (visible sets
//   recovered from bytes, outputs bit for bit, recurrent state bytes);
// - extract then merge returns the original rows;
// - filter keeps the chosen rows exactly;
// - a persistence round trip is exact: the decoded layout hashes alike and
//   behaves alike afterwards; corrupting or truncating the bytes is refused
//   or decodes to a consistent layout, never a crash;
// - unknown or lying kinds are refused by every lifecycle operation and codec.
//
// The first four record their case as the trace it stands for (TraceRecord:
// the statements, with what the trace model says of each: `expect sees`,
// `expect positions`, `expect trimmable`, `expect error` for a refusal,
// `expect equal` where the property compares two layouts); a shrunk failure
// is written as a regression trace (properties/regression_writer.h), to
// which the writer adds the double-precision oracle's `expect out`. The
// trace states the rows' visible sets, positions and values (within the
// format's tolerance), not the bit-for-bit comparison of two forwards: a
// failure that only shows in the last bits is kept as tools/props' reproduce
// record, and the writer says so.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kvspec/core/batch.h"
#include "kvspec/core/codec/codec.h"
#include "kvspec/core/layout.h"
#include "kvspec/testing/generators.h"
#include "kvspec/testing/rc_choices.h"
#include "kvspec/testing/shape_generators.h"
#include "kvspec/testing/trace_model.h"
#include "kvspec/runner/runner.h"
#include "kvspec/trace/values.h"
#include "kvspec/properties/regression_writer.h"

namespace kvspec {
namespace {

using trace::ContentIndex;
using trace::Tag;

rc::Gen<std::vector<LayerConfig>> GenLayers() {
  return rc::gen::exec([] {
    testing::RcChoices choices;
    return testing::SmallLayers(choices);
  });
}

std::string Describe(const std::vector<LayerConfig>& layers) {
  std::ostringstream os;
  for (const LayerConfig& c : layers) {
    os << "layer " << c.name << " type " << static_cast<int>(c.kind) << " heads " << c.heads
       << " dim " << c.dim << " window " << c.window << " capacity " << c.capacity << " dk "
       << c.dk << " dv " << c.dv << " conv " << c.conv << "\n";
  }
  return os.str();
}

// What one forward showed a row: per layer, its queries' tags and outputs
// (attention) or its tokens' outputs and the state hash (recurrent).
struct RowView {
  std::vector<std::vector<Tag>> tags;
  std::vector<std::vector<float>> outs;
  std::vector<uint64_t> states;
  bool operator==(const RowView& o) const {
    if (tags != o.tags || states != o.states || outs.size() != o.outs.size()) return false;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (outs[i].size() != o.outs[i].size() ||
          std::memcmp(outs[i].data(), o.outs[i].data(), outs[i].size() * 4) != 0) {
        return false;
      }
    }
    return true;
  }
};


// The trace a lifecycle case stands for, recorded as the case runs
// (regression_writer.h), with the expectations of the trace model
// (testing/trace_model.h), which follows the statements alongside the real
// layouts. Layouts are named as in the trace: the first one `main`, the
// others made by `fork` and `extract`. Each statement is recorded before the
// property runs it, so that a failing operation is in the trace.
class TraceRecord {
 public:
  // `write`: false for a property whose subject is no trace (it records
  // nothing, so a failure leaves RapidCheck's reproduce string).
  TraceRecord(int rows, const std::vector<LayerConfig>& layers, bool write = true)
      : write_(write), layers_(layers), model_(rows, layers, /*print=*/false) {
    if (write_) regress::Recorder::Get().Begin(testing::TraceHeader(rows, layers));
  }

  // A statement; `expect error` when the model refuses it.
  void Step(const trace::Statement& st) {
    if (!write_) return;
    regress::Recorder& rec = regress::Recorder::Get();
    const std::string text = testing::StatementText(st);
    if (model_.Refuses(st)) {
      rec.Statement("expect error " + text);
      return;
    }
    const bool forward = st.op() == trace::Op::kWindow || st.op() == trace::Op::kDecode;
    rec.Statement(text, forward);
    RC_ASSERT(model_.Apply(st).done());
    if (st.op() == trace::Op::kUse || st.op() == trace::Op::kFork ||
        st.op() == trace::Op::kExtract) {
      return;  // the current layout is unchanged, or another one
    }
    if (forward) {
      const std::vector<int32_t>& first = model_.LastForwardFirst();
      const std::vector<int32_t>& real = model_.LastForwardReal();
      for (size_t l = 0; l < layers_.size(); ++l) {
        if (layers_[l].kind == CacheKind::kSsm) continue;
        for (int r = 0; r < model_.rows(); ++r) {
          for (int32_t j = 0; j < real[r]; ++j) {
            const int32_t p = first[r] + j;
            const std::vector<trace::SeenItem>* seen =
                model_.Sees(static_cast<int>(l), r, p);
            RC_ASSERT(seen != nullptr);
            std::string line = "expect sees " + layers_[l].name + " r" + std::to_string(r) +
                               " p" + std::to_string(p) + ":";
            for (const trace::SeenItem& e : *seen) {
              line += " " + std::to_string(e.pos);
              if (e.id != e.pos) line += ":" + std::to_string(e.id);
            }
            rec.Expect(line);
          }
        }
      }
    }
    ExpectState();
  }

  // `expect positions` and `expect trimmable` of the current layout.
  void ExpectState() {
    regress::Recorder& rec = regress::Recorder::Get();
    rec.Expect("expect positions " + testing::JoinInts(model_.Positions()));
    for (size_t l = 0; l < layers_.size(); ++l) {
      rec.Expect("expect trimmable " + layers_[l].name +
                 (model_.Trimmable(static_cast<int>(l)) ? " yes" : " no"));
    }
  }

  // The forward Driver::Forward(layout, cols, salt) runs on the current
  // layout: ids (position + salt) % 100000.
  void Forward(const ForwardColumns& cols, uint64_t salt) {
    const std::vector<int32_t> next = model_.Positions();
    std::vector<std::vector<int32_t>> ids(next.size());
    for (size_t r = 0; r < next.size() && r < cols.left.size(); ++r) {
      for (int32_t j = 0; j < cols.Real(r); ++j) {
        ids[r].push_back(static_cast<int32_t>((next[r] + j + salt) % 100000));
      }
    }
    if (cols.decode) {
      trace::DecodeOp op;
      op.has_ids = true;
      op.ids = ids;
      Step(testing::StatementOf(op));
      return;
    }
    trace::WindowOp op;
    op.columns = cols.columns;
    op.has_ids = true;
    op.ids = ids;
    bool padded = false;
    for (size_t r = 0; r < cols.left.size(); ++r) padded = padded || cols.left[r] || cols.right[r];
    if (padded) {
      op.has_left = op.has_right = true;
      op.left = cols.left;
      op.right = cols.right;
    }
    Step(testing::StatementOf(op));
  }

  void Trim(int32_t n) { Step(testing::StatementOf(trace::TrimOp{n, false})); }
  void Arm() { Step(testing::StatementOf(trace::ArmOp{})); }
  void Accept(std::vector<int32_t> keep) { Step(testing::StatementOf(trace::AcceptOp{std::move(keep)})); }
  void Fork(const std::string& name) { Step(testing::StatementOf(trace::ForkOp{name})); }
  // `use NAME` (nothing when NAME is current).
  void Use(const std::string& name) {
    if (name == current_) return;
    Step(testing::StatementOf(trace::UseOp{name}));
    current_ = name;
  }
  void Join(const std::string& name) { Step(testing::StatementOf(trace::JoinOp{name})); }
  void Filter(std::vector<int32_t> rows) { Step(testing::StatementOf(trace::FilterOp{std::move(rows)})); }
  // `extract R as NAME`, then what NAME holds (`use NAME`, its positions
  // and trimmability, `use` back).
  void Extract(int32_t row, const std::string& name) {
    const trace::Statement st = testing::StatementOf(trace::ExtractOp{row, name});
    const bool refused = write_ && model_.Refuses(st);
    Step(st);
    if (!write_ || refused) return;
    const std::string back = current_;
    Use(name);
    ExpectState();
    Use(back);
  }
  void Reload() { Step(testing::StatementOf(trace::ReloadOp{})); }
  // `expect equal NAME` (the current layout and NAME hold the same tokens).
  void ExpectEqual(const std::string& name) {
    if (write_) regress::Recorder::Get().Expect("expect equal " + name);
  }

 private:
  bool write_;
  std::string current_ = "main";  // the current layout's name
  std::vector<LayerConfig> layers_;
  testing::TraceModel model_;
};

// Drives layouts with TRACE.md token contents (ids = positions) and reads
// back what every row saw.
class Driver {
 public:
  explicit Driver(std::vector<LayerConfig> layers) : layers_(std::move(layers)) {
    for (size_t l = 0; l < layers_.size(); ++l) {
      if (layers_[l].kind == CacheKind::kSsm) {
        weights_.push_back(ContentIndex::ConvWeights(static_cast<int>(l), Channels(layers_[l]),
                                                     static_cast<size_t>(layers_[l].conv)));
      } else {
        weights_.emplace_back();
      }
    }
  }

  static size_t Channels(const LayerConfig& c) {
    return 2 * static_cast<size_t>(c.kheads ? c.kheads : c.heads) * c.dk +
           static_cast<size_t>(c.heads) * c.dv;
  }

  // One forward on `layout`; returns each row's view (empty when refused).
  std::vector<RowView> Forward(Layout& layout, const ForwardColumns& cols, uint64_t id_salt) {
    const int rows = layout.rows();
    const size_t L = static_cast<size_t>(cols.columns);
    const std::vector<int32_t> next = layout.positions();
    const size_t nl = layers_.size();
    std::vector<std::vector<float>> a(nl), b(nl), c(nl), o(nl);
    std::vector<AttentionIO> io(nl);
    auto id_of = [&](int32_t pos) { return static_cast<int32_t>((pos + id_salt) % 100000); };
    for (size_t l = 0; l < nl; ++l) {
      const LayerConfig& cfg = layers_[l];
      if (cfg.kind == CacheKind::kSsm) {
        const size_t C = Channels(cfg), hv = static_cast<size_t>(cfg.heads);
        a[l].assign(rows * L * C, ContentIndex::PadValue());
        b[l].assign(rows * L * hv, ContentIndex::PadValue());
        c[l].assign(rows * L * hv, ContentIndex::PadValue());
        o[l].assign(rows * L * hv * cfg.dv, 0.0f);
        for (int r = 0; r < rows; ++r) {
          for (int32_t j = 0; j < cols.Real(r); ++j) {
            const size_t at = r * L + static_cast<size_t>(cols.left[r] + j);
            ContentIndex::RecurrentToken(static_cast<int>(l), id_of(next[r] + j), next[r] + j, C,
                                         hv, &a[l][at * C], &b[l][at * hv], &c[l][at * hv]);
          }
        }
        io[l] = AttentionIO(
            SsmIO{weights_[l].data(), a[l].data(), b[l].data(), c[l].data(), o[l].data()});
        continue;
      }
      // q and out follow the layout's query heads (GQA), k and v its KV heads.
      const size_t hd = static_cast<size_t>(cfg.heads) * cfg.dim;
      const size_t qd = static_cast<size_t>(cfg.QueryHeads()) * cfg.dim;
      a[l].assign(rows * L * qd, ContentIndex::PadValue());
      b[l].assign(rows * L * hd, ContentIndex::PadValue());
      c[l] = b[l];
      o[l].assign(a[l].size(), 0.0f);
      for (int r = 0; r < rows; ++r) {
        for (int32_t j = 0; j < cols.Real(r); ++j) {
          const size_t col = r * L + static_cast<size_t>(cols.left[r] + j);
          const int32_t pos = next[r] + j;
          ContentIndex::AttentionToken(static_cast<int>(l), id_of(pos), pos, cfg.QueryHeads(),
                                       cfg.heads, cfg.dim, &a[l][col * qd], &b[l][col * hd],
                                       &c[l][col * hd]);
          index_.Remember(static_cast<int>(l), id_of(pos), pos, &b[l][col * hd], &c[l][col * hd],
                          hd, cfg.kv, cfg.dim);
        }
      }
      io[l] = AttentionIO(a[l].data(), b[l].data(), c[l].data(), o[l].data());
    }
    if (!layout.Forward(cols, io).ok()) return {};
    std::vector<RowView> views(static_cast<size_t>(rows));
    for (size_t l = 0; l < nl; ++l) {
      const LayerConfig& cfg = layers_[l];
      const AttentionCache* cache = layout.attention(l);
      const Mask* mask = cache ? layout.LastMask(l) : nullptr;
      const KvView view = cache ? cache->View() : KvView();
      const size_t per = cache ? static_cast<size_t>(cfg.QueryHeads()) * cfg.dim
                               : static_cast<size_t>(cfg.heads) * cfg.dv;
      for (int r = 0; r < rows; ++r) {
        for (int32_t j = 0; j < cols.Real(r); ++j) {
          const int32_t col = cols.left[r] + j;
          if (cache) {
            std::vector<Tag> seen;
            for (int32_t s = 0; s < mask->slots; ++s) {
              if (mask->Admits(r, col, s)) {
                seen.push_back(index_.Recover(static_cast<int>(l), view, r, s));
              }
            }
            std::sort(seen.begin(), seen.end());
            views[r].tags.push_back(seen);
          }
          const float* ov = &o[l][(r * L + static_cast<size_t>(col)) * per];
          views[r].outs.emplace_back(ov, ov + per);
        }
        if (!cache) views[r].states.push_back(layout.recurrent(l)->RowStateHash(r));
      }
    }
    return views;
  }

  // A random history: forwards with padding, decodes, trims, rounds; each
  // operation recorded in `rec` (on its current layout, which is `layout`).
  void History(Layout& layout, int steps, TraceRecord& rec) {
    for (int i = 0; i < steps; ++i) {
      const int op = *rc::gen::inRange(0, 6);
      const int rows = layout.rows();
      const std::vector<int32_t> next = layout.positions();
      if (op <= 2) {
        testing::RcChoices choices;
        const testing::PaddedColumns pads = testing::DrawPaddedColumns(choices, 5, next, true);
        ForwardColumns cols = ForwardColumns::Dense(rows, pads.columns);
        cols.left = pads.left;
        cols.right = pads.right;
        rec.Forward(cols, 0);
        Forward(layout, cols, 0);
      } else if (op == 3) {
        rec.Forward(ForwardColumns::Dense(rows, 1, true), 0);
        Forward(layout, ForwardColumns::Dense(rows, 1, true), 0);
      } else if (op == 4) {
        const int32_t n = *rc::gen::inRange<int32_t>(0, 3);
        rec.Trim(n);
        (void)layout.Trim(n, false);
      } else {
        rec.Arm();
        RC_ASSERT(layout.Arm().ok());
        const ForwardColumns cols = ForwardColumns::Dense(rows, *rc::gen::inRange<int32_t>(1, 5));
        rec.Forward(cols, 777);
        Forward(layout, cols, 777);
        std::vector<int32_t> keep;
        for (int r = 0; r < rows; ++r) keep.push_back(*rc::gen::inRange<int32_t>(0, 5));
        rec.Accept(keep);
        if (!layout.Accept(keep).ok()) {
          rec.Accept({0});
          RC_ASSERT(layout.Accept({0}).ok());
        }
      }
    }
  }

  const std::vector<LayerConfig>& layers() const { return layers_; }

 private:
  std::vector<LayerConfig> layers_;
  std::vector<std::vector<float>> weights_;
  ContentIndex index_;
};

std::unique_ptr<Layout> Build(const std::vector<LayerConfig>& layers, int rows) {
  std::unique_ptr<Layout> layout;
  RC_ASSERT(Layout::Create(rows, layers, &layout).ok());
  return layout;
}

ForwardColumns NextForward(int rows) {
  return ForwardColumns::Dense(rows, *rc::gen::inRange<int32_t>(1, 4));
}

// Rows 0..n-1.
std::vector<int32_t> FirstRows(int n) {
  std::vector<int32_t> rows;
  for (int r = 0; r < n; ++r) rows.push_back(r);
  return rows;
}

// The same next forward on `want` (layout `want_name` of the trace) and
// `got` (`got_name`) shows the same rows; the trace ends on `got_name`.
void SameNextForward(Driver& driver, Layout& want, Layout& got, uint64_t id_salt,
                     TraceRecord& rec, const std::string& want_name, const std::string& got_name) {
  const ForwardColumns f = NextForward(want.rows());
  rec.Use(want_name);
  rec.Forward(f, id_salt);
  const auto a = driver.Forward(want, f, id_salt);
  rec.Use(got_name);
  rec.Forward(f, id_salt);
  const auto b = driver.Forward(got, f, id_salt);
  RC_ASSERT(a.size() == b.size());
  for (size_t r = 0; r < a.size(); ++r) RC_ASSERT(a[r] == b[r]);
}

// Runs on every Highway target this CPU has (test names end in the target).
class LifecycleTargets : public ::testing::TestWithParam<int64_t> {};

// Trace: `main` and `b` start as one empty layout of the larger row count,
// each filtered to its own rows (so the trace builds both); `a0` is main's
// copy before the join.
KVSPEC_RECORDED_PROP_P(LifecycleTargets, JoinKeepsEveryRunningRow) {
  const auto layers = *GenLayers();
  RC_LOG() << Describe(layers);
  Driver driver(layers);
  const int rows_a = *rc::gen::inRange(1, 4);
  const int rows_b = *rc::gen::inRange(1, 4);
  const int rows = std::max(rows_a, rows_b);
  TraceRecord rec(rows, layers);
  auto a = Build(layers, rows);
  rec.Fork("b");
  auto b = a->Copy();
  if (rows_a < rows) {
    rec.Filter(FirstRows(rows_a));
    RC_ASSERT(a->Filter(FirstRows(rows_a)).ok());
  }
  driver.History(*a, *rc::gen::inRange(0, 6), rec);
  rec.Use("b");
  if (rows_b < rows) {
    rec.Filter(FirstRows(rows_b));
    RC_ASSERT(b->Filter(FirstRows(rows_b)).ok());
  }
  driver.History(*b, *rc::gen::inRange(0, 6), rec);
  rec.Use("main");
  rec.Fork("a0");
  auto a0 = a->Copy();
  auto b0 = b->Copy();
  rec.Join("b");
  RC_ASSERT(a->Join(*b).ok());
  RC_ASSERT(a->rows() == a0->rows() + b0->rows());
  // The larger peak: a joined ring is wrapped when either side was.
  for (size_t l = 0; l < layers.size(); ++l) {
    RC_ASSERT(a->cache(l).isTrimmable() ==
              (a0->cache(l).isTrimmable() && b0->cache(l).isTrimmable()));
  }
  RC_CLASSIFY(a0->columns() != b0->columns(), "sides of different lengths");
  const ForwardColumns f = NextForward(a->rows());
  rec.Forward(f, 5);
  const auto joined = driver.Forward(*a, f, 5);
  const ForwardColumns fa = ForwardColumns::Dense(a0->rows(), f.columns);
  rec.Use("a0");
  rec.Forward(fa, 5);
  const auto left = driver.Forward(*a0, fa, 5);
  const ForwardColumns fb = ForwardColumns::Dense(b0->rows(), f.columns);
  rec.Use("b");
  rec.Forward(fb, 5);
  const auto right = driver.Forward(*b0, fb, 5);
  RC_ASSERT(joined.size() == left.size() + right.size());
  for (size_t r = 0; r < left.size(); ++r) RC_ASSERT(joined[r] == left[r]);
  for (size_t r = 0; r < right.size(); ++r) RC_ASSERT(joined[left.size() + r] == right[r]);
}

// Trace: row r extracted as `eR`; `e0` joined with the others, then
// `expect equal main`.
KVSPEC_RECORDED_PROP_P(LifecycleTargets, ExtractThenMergeReturnsTheRows) {
  const auto layers = *GenLayers();
  RC_LOG() << Describe(layers);
  Driver driver(layers);
  const int rows = *rc::gen::inRange(1, 4);
  TraceRecord rec(rows, layers);
  auto batch = Build(layers, rows);
  driver.History(*batch, *rc::gen::inRange(0, 7), rec);
  std::unique_ptr<Layout> merged;
  for (int r = 0; r < batch->rows(); ++r) {
    const std::string name = "e" + std::to_string(r);
    rec.Use("main");
    rec.Extract(r, name);
    std::unique_ptr<Layout> one;
    RC_ASSERT(batch->Extract(r, &one).ok());
    RC_ASSERT(one->rows() == 1);
    RC_ASSERT(one->positions()[0] == batch->positions()[r]);
    // As a single-row cache fed only that row's tokens: a ring is trimmable
    // while it holds at most its capacity.
    for (size_t l = 0; l < layers.size(); ++l) {
      const LayerConfig& c = layers[l];
      const bool trimmable = c.kind == CacheKind::kKv ||
                             (c.kind == CacheKind::kRotating &&
                              one->positions()[0] <= (c.capacity ? c.capacity : c.window));
      RC_ASSERT(one->cache(l).isTrimmable() == trimmable);
    }
    if (!merged) {
      merged = std::move(one);
    } else {
      rec.Use("e0");
      rec.Join(name);
      RC_ASSERT(merged->Join(*one).ok());
    }
  }
  rec.Use("e0");
  rec.ExpectEqual("main");
  SameNextForward(driver, *batch, *merged, 9, rec, "main", "e0");
}

// Trace: `f` is a fork of main, filtered.
KVSPEC_RECORDED_PROP_P(LifecycleTargets, FilterKeepsTheChosenRows) {
  const auto layers = *GenLayers();
  RC_LOG() << Describe(layers);
  Driver driver(layers);
  const int rows = *rc::gen::inRange(1, 5);
  TraceRecord rec(rows, layers);
  auto batch = Build(layers, rows);
  driver.History(*batch, *rc::gen::inRange(0, 7), rec);
  std::vector<int32_t> keep;
  for (int r = 0; r < batch->rows(); ++r) {
    if (*rc::gen::arbitrary<bool>()) keep.push_back(r);
  }
  if (keep.empty()) keep.push_back(0);
  rec.Fork("f");
  auto filtered = batch->Copy();
  rec.Use("f");
  rec.Filter(keep);
  RC_ASSERT(filtered->Filter(keep).ok());
  const ForwardColumns f = NextForward(batch->rows());
  rec.Use("main");
  rec.Forward(f, 3);
  const auto all = driver.Forward(*batch, f, 3);
  const ForwardColumns fs = ForwardColumns::Dense(filtered->rows(), f.columns);
  rec.Use("f");
  rec.Forward(fs, 3);
  const auto some = driver.Forward(*filtered, fs, 3);
  RC_ASSERT(some.size() == keep.size());
  for (size_t i = 0; i < keep.size(); ++i) RC_ASSERT(some[i] == all[keep[i]]);
}

// Trace: `orig` is a fork of main taken before main's `reload`.
KVSPEC_RECORDED_PROP_P(LifecycleTargets, PersistenceRoundTripIsExact) {
  const auto layers = *GenLayers();
  RC_LOG() << Describe(layers);
  Driver driver(layers);
  const int rows = *rc::gen::inRange(1, 4);
  TraceRecord rec(rows, layers);
  auto layout = Build(layers, rows);
  driver.History(*layout, *rc::gen::inRange(0, 8), rec);
  // Sometimes persist in the middle of a round.
  const bool mid_round = *rc::gen::arbitrary<bool>();
  if (mid_round) {
    rec.Arm();
    RC_ASSERT(layout->Arm().ok());
    const ForwardColumns cols = ForwardColumns::Dense(layout->rows(), 3);
    rec.Forward(cols, 55);
    driver.Forward(*layout, cols, 55);
  }
  rec.Fork("orig");
  rec.Reload();
  rec.ExpectEqual("orig");
  std::string bytes;
  RC_ASSERT(EncodeLayout(*layout, &bytes).ok());
  std::unique_ptr<Layout> loaded;
  const Status s = DecodeLayout(bytes, &loaded);
  RC_ASSERT(s.ok());
  RC_ASSERT(loaded->StateHash() == layout->StateHash());
  if (mid_round) {
    std::vector<int32_t> keep{*rc::gen::inRange<int32_t>(0, 4)};
    rec.Use("orig");
    rec.Accept(keep);
    rec.Use("main");
    rec.Accept(keep);
    rec.ExpectEqual("orig");
    RC_ASSERT(layout->Accept(keep).ok() == loaded->Accept(keep).ok());
    RC_ASSERT(loaded->StateHash() == layout->StateHash());
  }
  SameNextForward(driver, *layout, *loaded, 21, rec, "orig", "main");
}

KVSPEC_RECORDED_PROP_P(LifecycleTargets, DamagedBytesAreRefusedCleanly) {
  const auto layers = *GenLayers();
  Driver driver(layers);
  auto layout = Build(layers, *rc::gen::inRange(1, 3));
  TraceRecord none(layout->rows(), layers, /*write=*/false);  // damaged bytes: no trace
  driver.History(*layout, *rc::gen::inRange(0, 5), none);
  std::string bytes;
  RC_ASSERT(EncodeLayout(*layout, &bytes).ok());
  std::string damaged = bytes;
  const int how = *rc::gen::inRange(0, 3);
  if (how == 0) {
    damaged.resize(*rc::gen::inRange<size_t>(0, bytes.size()));
  } else {
    const int flips = *rc::gen::inRange(1, 4);
    for (int i = 0; i < flips; ++i) {
      const size_t at = *rc::gen::inRange<size_t>(0, bytes.size());
      damaged[at] = static_cast<char>(damaged[at] ^ (1 << *rc::gen::inRange(0, 8)));
    }
  }
  std::unique_ptr<Layout> loaded;
  const Status s = DecodeLayout(damaged, &loaded);
  RC_CLASSIFY(s.ok(), "damage still decodes (e.g. a flipped float)");
  if (!s.ok()) {
    RC_ASSERT(!s.message().empty());
    return;
  }
  // Whatever decodes must be usable: a forward either runs or is refused.
  // Contents are sized by the decoded layout's own configuration (a flipped
  // byte may have changed a shape consistently).
  std::vector<LayerConfig> decoded;
  for (size_t l = 0; l < loaded->size(); ++l) decoded.push_back(loaded->config(l));
  Driver(decoded).Forward(*loaded, ForwardColumns::Dense(loaded->rows(), 1, true), 1);
}

// A cache whose kind string is not one we know, and one that lies.
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
  void HashState(Hasher*) const override {}
  std::unique_ptr<Cache> Copy() const override { return std::make_unique<MysteryCache>(*this); }

 private:
  std::string kind_;
  std::vector<int32_t> positions_{0};
};

TEST(LifecycleProps, UnknownAndLyingKindsAreRefused) {
  KvCache real(1, 4);
  for (const char* kind : {"mystery", "", "persisted(kv)", "kv", "batched_rotating", "ssm"}) {
    MysteryCache fake(kind);
    std::unique_ptr<Cache> out;
    std::string bytes;
    EXPECT_FALSE(FilterRows(fake, {0}, &out).ok()) << kind;
    EXPECT_FALSE(ExtractRow(fake, 0, &out).ok()) << kind;
    EXPECT_FALSE(JoinRows(real, fake, &out).ok()) << kind;
    EXPECT_FALSE(JoinRows(fake, real, &out).ok()) << kind;
    EXPECT_FALSE(MergeRows({&fake}, &out).ok()) << kind;
    EXPECT_FALSE(EncodeCache(fake, &bytes).ok()) << kind;
    EXPECT_EQ(out, nullptr);
  }
  EXPECT_FALSE(HasCodec("mystery"));
  EXPECT_FALSE(HasCodec(""));
  EXPECT_TRUE(HasCodec("batched_ssm"));
  // A decoded kind string that no codec knows.
  std::string bytes;
  ASSERT_TRUE(EncodeCache(real, &bytes).ok());
  std::string renamed = bytes;
  const size_t at = renamed.find("kv");
  ASSERT_NE(at, std::string::npos);
  renamed[at] = 'q';
  std::unique_ptr<Cache> out;
  const Status s = DecodeCache(renamed, &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("qv"), std::string::npos) << s.message();
}

KVSPEC_FOR_EACH_TARGET(LifecycleTargets);

}  // namespace
}  // namespace kvspec

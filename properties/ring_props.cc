// Properties of rotating (ring) caches beyond the model-based sequence test.
// Every statement of the recorded property also runs on the trace model
// (testing/trace_model.h), which says what each forward's real queries see,
// the positions and whether the ring is still trimmable; both rings are
// checked against it as well as against each other.
//
// - Trim bypass and accept on a ring equal never having written the rejected
//   tips: after a prefix (any padding, any wrap), a verify window of S real
//   tokens, then dropping the last n (trim n bypass, or arm + accept S-n,
//   ragged across rows), the ring behaves exactly like a fresh ring fed the
//   prefix and only the accepted tokens: the same visible sets and the same
//   attention outputs, bit for bit, for every later query, and the same
//   trimmability, including rounds that cross the window boundary.
// - Phase independence: a row's outputs do not depend on the ring's phase
//   or capacity (rings of capacity W .. W+5 agree bit for bit with a plain
//   cache holding every token).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kvspec/core/layout.h"
#include "kvspec/runner/runner.h"
#include "kvspec/trace/values.h"
#include "kvspec/properties/regression_writer.h"
#include "kvspec/testing/generators.h"
#include "kvspec/testing/rc_choices.h"
#include "kvspec/testing/shape_generators.h"
#include "kvspec/testing/trace_model.h"

namespace kvspec {
namespace {

using testing::StatementOf;
using trace::ContentIndex;
using trace::SeenItem;
using trace::Tag;

// One forward of a scripted run: L columns, per-row padding, and an id
// offset (rejected drafts get ids the accepted tokens never use).
struct Step {
  int32_t columns = 1;
  std::vector<int32_t> left, right;
  int32_t id_offset = 0;
};

// The trace statement of a step: `window` with its padding and, for drafts,
// the ids of each row's real tokens (positions from `next` on).
trace::Statement Window(const Step& s, const std::vector<int32_t>& next) {
  trace::WindowOp w;
  w.columns = s.columns;
  w.has_left = w.has_right = true;
  w.left = s.left;
  w.right = s.right;
  if (s.id_offset) {
    w.has_ids = true;
    for (size_t r = 0; r < s.left.size(); ++r) {
      const int32_t real = s.columns - s.left[r] - s.right[r];
      w.ids.emplace_back();
      for (int32_t j = 0; j < real; ++j) w.ids.back().push_back(next[r] + j + s.id_offset);
    }
  }
  return StatementOf(w);
}

std::string Statement(const Step& s, const std::vector<int32_t>& next) {
  return testing::StatementText(Window(s, next));
}

// What one forward showed: per row and real query, the tags seen and the
// outputs.
struct Seen {
  std::vector<std::vector<Tag>> tags;
  std::vector<std::vector<float>> outs;
  bool operator==(const Seen& o) const {
    if (tags != o.tags || outs.size() != o.outs.size()) return false;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (outs[i].size() != o.outs[i].size() ||
          std::memcmp(outs[i].data(), o.outs[i].data(), outs[i].size() * 4) != 0) {
        return false;
      }
    }
    return true;
  }
};

// The one layer of these properties: a ring named `ring` (capacity 0: a
// plain cache with the same window).
LayerConfig RingLayer(int32_t window, int32_t capacity, int heads, int dim) {
  LayerConfig c;
  c.name = "ring";
  c.kind = capacity ? CacheKind::kRotating : CacheKind::kKv;
  c.heads = heads;
  c.dim = dim;
  c.window = window;
  c.capacity = capacity;
  return c;
}

class RingRun {
 public:
  RingRun(int rows, int32_t window, int32_t capacity, int heads, int dim)
      : rows_(rows), heads_(heads), dim_(dim) {
    RC_ASSERT(Layout::Create(rows, {RingLayer(window, capacity, heads, dim)}, &layout_).ok());
  }

  Layout& layout() { return *layout_; }

  Seen Forward(const Step& step) {
    ForwardColumns cols = ForwardColumns::Dense(rows_, step.columns);
    cols.left = step.left;
    cols.right = step.right;
    const std::vector<int32_t> next = layout_->positions();
    const size_t L = static_cast<size_t>(step.columns);
    const size_t hd = static_cast<size_t>(heads_) * dim_;
    std::vector<float> q(rows_ * L * hd, ContentIndex::PadValue());
    std::vector<float> k(q), v(q), o(q.size());
    for (int r = 0; r < rows_; ++r) {
      for (int32_t j = 0; j < cols.Real(r); ++j) {
        const size_t at = (r * L + static_cast<size_t>(cols.left[r] + j)) * hd;
        const int32_t pos = next[r] + j;
        ContentIndex::AttentionToken(0, pos + step.id_offset, pos, heads_, heads_, dim_, &q[at],
                                     &k[at], &v[at]);
        index_.Remember(0, pos + step.id_offset, pos, &k[at], &v[at], hd, KvType::kF32, dim_);
      }
    }
    RC_ASSERT(layout_->Forward(cols, {AttentionIO{q.data(), k.data(), v.data(), o.data()}}).ok());
    Seen seen;
    const Mask* mask = layout_->LastMask(0);
    const KvView view = layout_->attention(0)->View();
    for (int r = 0; r < rows_; ++r) {
      for (int32_t j = 0; j < cols.Real(r); ++j) {
        const int32_t col = cols.left[r] + j;
        std::vector<Tag> tags;
        for (int32_t s = 0; s < mask->slots; ++s) {
          if (mask->Admits(r, col, s)) tags.push_back(index_.Recover(0, view, r, s));
        }
        std::sort(tags.begin(), tags.end());
        seen.tags.push_back(tags);
        const float* ov = &o[(r * L + static_cast<size_t>(col)) * hd];
        seen.outs.emplace_back(ov, ov + hd);
      }
    }
    return seen;
  }

 private:
  int rows_, heads_, dim_;
  std::unique_ptr<Layout> layout_;
  ContentIndex index_;
};

// The case as it runs: every statement goes to the regression recorder and
// to the trace model. After a forward the recording states what every real
// query sees, and after a forward, trim or accept the positions and the
// ring's trimmability, all as the model says.
class Script {
 public:
  Script(int rows, const LayerConfig& layer)
      : rules_(rows, {layer}, /*print=*/false), rec_(regress::Recorder::Get()) {
    rec_.Begin(testing::TraceHeader(rows, {layer}));
  }

  const testing::TraceModel& rules() const { return rules_; }
  regress::Recorder& rec() { return rec_; }

  // Records and applies `st`, which the model must accept.
  void Run(const trace::Statement& st) {
    const trace::Op op = st.op();
    const bool forward = op == trace::Op::kWindow || op == trace::Op::kDecode;
    rec_.Statement(testing::StatementText(st), forward);
    RC_ASSERT(rules_.Apply(st).done());
    if (forward) {
      for (int r = 0; r < rules_.rows(); ++r) {
        for (int32_t j = 0; j < rules_.LastForwardReal()[static_cast<size_t>(r)]; ++j) {
          const int32_t p = rules_.LastForwardFirst()[static_cast<size_t>(r)] + j;
          std::string line = "expect sees ring r" + std::to_string(r) + " p" + std::to_string(p) + ":";
          for (const SeenItem& item : *rules_.Sees(0, r, p)) {
            line += " " + std::to_string(item.pos);
            if (item.id != item.pos) line += ":" + std::to_string(item.id);
          }
          rec_.Expect(line);
        }
      }
    }
    if (forward || op == trace::Op::kTrim || op == trace::Op::kAccept) {
      rec_.Expect("expect positions " + testing::JoinInts(rules_.Positions()));
      ExpectTrimmable();
    }
  }
  void ExpectTrimmable() {
    rec_.Expect(std::string("expect trimmable ring ") + (rules_.Trimmable(0) ? "yes" : "no"));
  }

  // The current layout's ring (`run`) against the model: positions,
  // trimmability, kind and, when `seen` is what its last forward showed,
  // every real query's visible set.
  void Check(RingRun& run, const Seen* seen) const {
    const Layout& layout = run.layout();
    RC_ASSERT(layout.positions() == rules_.Positions());
    RC_ASSERT(layout.cache(0).isTrimmable() == rules_.Trimmable(0));
    RC_ASSERT(layout.cache(0).kind() == rules_.KindString(0));
    if (!seen) return;
    size_t query = 0;
    for (int r = 0; r < rules_.rows(); ++r) {
      for (int32_t j = 0; j < rules_.LastForwardReal()[static_cast<size_t>(r)]; ++j) {
        const int32_t p = rules_.LastForwardFirst()[static_cast<size_t>(r)] + j;
        std::vector<Tag> want;
        for (const SeenItem& item : *rules_.Sees(0, r, p)) {
          want.push_back(Tag{Tag::kToken, item.pos, item.id});
        }
        RC_ASSERT(query < seen->tags.size());
        RC_ASSERT(seen->tags[query++] == want);
      }
    }
    RC_ASSERT(query == seen->tags.size());
  }

 private:
  testing::TraceModel rules_;
  regress::Recorder& rec_;
};

rc::Gen<Step> GenStep(int rows, const std::vector<int32_t>& real_so_far, bool allow_pads) {
  return rc::gen::exec([=] {
    testing::RcChoices choices;
    const std::vector<int32_t> held(real_so_far.begin(), real_so_far.begin() + rows);
    const testing::PaddedColumns p = testing::DrawPaddedColumns(choices, 6, held, allow_pads);
    Step s;
    s.columns = p.columns;
    s.left = p.left;
    s.right = p.right;
    return s;
  });
}

// Applies `steps` to both runs, comparing every forward.
void Continue(RingRun& a, RingRun& b, const std::vector<Step>& steps, bool same_kind) {
  for (const Step& s : steps) {
    RC_LOG() << "  then " << Statement(s, a.layout().positions()) << "\n";
    RC_ASSERT(a.Forward(s) == b.Forward(s));
    if (same_kind) {
      RC_ASSERT(a.layout().cache(0).isTrimmable() == b.layout().cache(0).isTrimmable());
    }
    RC_ASSERT(a.layout().positions() == b.layout().positions());
  }
}

// Runs on every Highway target this CPU has (test names end in the target).
class RingTargets : public ::testing::TestWithParam<int64_t> {};

// Recorded as a trace (regression_writer.h) when it fails: the prefix, a
// fork `fresh`, the round on `main`, the accepted tokens written on
// `fresh`, then each later window on both, with what the model says after
// each statement (Script), `expect equal main` and both rings' `expect
// trimmable` after each round of `fresh`, and the oracle's `expect out`
// values after every window.
KVSPEC_RECORDED_PROP_P(RingTargets, DroppedTipsEqualNeverWritingThem) {
  const int rows = *rc::gen::inRange(1, 4);
  const int32_t window = *rc::gen::inRange<int32_t>(1, 9);
  const int32_t capacity = window + *rc::gen::element<int32_t>(0, 0, 1, 2, 5);
  const int heads = *rc::gen::inRange(1, 3);
  const int dim = *rc::gen::inRange(1, 9);
  const bool use_accept = *rc::gen::arbitrary<bool>();
  RC_LOG() << "rows " << rows << ", layer ring rotating window=" << window
           << " capacity=" << capacity << " heads=" << heads << " dim=" << dim << "\n";
  Script script(rows, RingLayer(window, capacity, heads, dim));
  regress::Recorder& rec = script.rec();

  RingRun tipped(rows, window, capacity, heads, dim);
  RingRun fresh(rows, window, capacity, heads, dim);
  // A prefix, any padding, possibly wrapping the ring.
  std::vector<int32_t> real(static_cast<size_t>(rows), 0);
  const int prefix = *rc::gen::inRange(0, 6);
  for (int i = 0; i < prefix; ++i) {
    const Step s = *GenStep(rows, real, true);
    RC_LOG() << "  prefix " << Statement(s, real) << "\n";
    script.Run(Window(s, real));
    for (int r = 0; r < rows; ++r) real[r] += s.columns - s.left[r] - s.right[r];
    const Seen seen = tipped.Forward(s);
    script.Check(tipped, &seen);
    RC_ASSERT(seen == fresh.Forward(s));
  }
  script.Run(StatementOf(trace::ForkOp{"fresh"}));
  // The verify window: S real tokens per row, drafts with their own ids.
  Step verify;
  verify.columns = *rc::gen::inRange<int32_t>(1, 2 * window + 3);
  verify.left.assign(static_cast<size_t>(rows), 0);
  verify.right.assign(static_cast<size_t>(rows), 0);
  verify.id_offset = 1000;
  std::vector<int32_t> keep(static_cast<size_t>(rows));
  const bool ragged = use_accept && *rc::gen::arbitrary<bool>();
  const int32_t uniform = *rc::gen::inRange<int32_t>(0, verify.columns + 1);
  for (int r = 0; r < rows; ++r) {
    keep[r] = ragged ? *rc::gen::inRange<int32_t>(0, verify.columns + 1) : uniform;
  }
  const int32_t common_drop = verify.columns - *std::max_element(keep.begin(), keep.end());
  const bool wrapped_before = !tipped.layout().cache(0).isTrimmable();
  if (use_accept) {
    script.Run(StatementOf(trace::ArmOp{}));
    RC_ASSERT(tipped.layout().Arm().ok());
  }
  script.Run(Window(verify, real));
  const Seen verified = tipped.Forward(verify);
  script.Check(tipped, &verified);
  RC_CLASSIFY(!wrapped_before && !tipped.layout().cache(0).isTrimmable(),
              "round crosses the wrap boundary");
  RC_CLASSIFY(wrapped_before, "ring already wrapped");
  if (use_accept) {
    script.Run(StatementOf(trace::AcceptOp{keep}));
    RC_ASSERT(tipped.layout().Accept(keep).ok());
  } else {
    script.Run(StatementOf(trace::TrimOp{verify.columns - uniform, /*bypass=*/true}));
    RC_ASSERT(tipped.layout().Trim(verify.columns - uniform, /*bypass=*/true).ok());
  }
  script.Check(tipped, nullptr);
  RC_LOG() << "  verify " << Statement(verify, real)
           << (use_accept ? " then accept " : " then trim bypass to ") << "keep " << keep[0]
           << (ragged ? " (ragged)" : "") << "\n";
  // The fresh ring writes only the accepted tokens (as one window; rows
  // that keep fewer than others carry the difference as padding).
  script.Run(StatementOf(trace::UseOp{"fresh"}));
  const int32_t kept_columns = verify.columns - common_drop;
  if (kept_columns > 0) {
    Step accepted;
    accepted.columns = kept_columns;
    accepted.id_offset = verify.id_offset;  // the accepted drafts themselves
    accepted.left.assign(static_cast<size_t>(rows), 0);
    for (int r = 0; r < rows; ++r) accepted.right.push_back(kept_columns - keep[r]);
    script.Run(Window(accepted, real));
    const Seen seen = fresh.Forward(accepted);
    script.Check(fresh, &seen);
  }
  script.Check(fresh, nullptr);
  for (int r = 0; r < rows; ++r) real[r] += keep[r];
  // Both layouts: the same contents, and trimmable as the model says.
  rec.Expect("expect equal main");
  script.ExpectTrimmable();
  script.Run(StatementOf(trace::UseOp{"main"}));
  script.ExpectTrimmable();
  RC_ASSERT(tipped.layout().positions() == fresh.layout().positions());
  RC_ASSERT(tipped.layout().cache(0).isTrimmable() == fresh.layout().cache(0).isTrimmable());
  // Whatever comes next sees the same things.
  const int more = *rc::gen::inRange(1, 6);
  for (int i = 0; i < more; ++i) {
    const Step s = *GenStep(rows, real, false);
    RC_LOG() << "  then " << Statement(s, real) << "\n";
    std::vector<Seen> seen;
    for (RingRun* run : {&tipped, &fresh}) {
      script.Run(StatementOf(trace::UseOp{run == &tipped ? "main" : "fresh"}));
      script.Run(Window(s, real));
      seen.push_back(run->Forward(s));
      script.Check(*run, &seen.back());
    }
    for (int r = 0; r < rows; ++r) real[r] += s.columns;
    rec.Expect("expect equal main");
    script.ExpectTrimmable();
    script.Run(StatementOf(trace::UseOp{"main"}));
    script.ExpectTrimmable();
    RC_ASSERT(seen[0] == seen[1]);
    RC_ASSERT(tipped.layout().cache(0).isTrimmable() == fresh.layout().cache(0).isTrimmable());
    RC_ASSERT(tipped.layout().positions() == fresh.layout().positions());
  }
}

KVSPEC_RECORDED_PROP_P(RingTargets, OutputsDoNotDependOnPhaseOrCapacity) {
  const int32_t window = *rc::gen::inRange<int32_t>(1, 9);
  const int heads = *rc::gen::inRange(1, 3);
  const int dim = *rc::gen::inRange(1, 17);
  const int32_t extra = *rc::gen::inRange<int32_t>(0, 6);
  RingRun ring(1, window, window + extra, heads, dim);
  RingRun plain(1, window, 0, heads, dim);  // a plain cache with the same window
  std::vector<Step> steps;
  const int n = *rc::gen::inRange(1, 12);
  std::vector<int32_t> real(1, 0);
  for (int i = 0; i < n; ++i) {
    Step s = *GenStep(1, real, false);
    if (*rc::gen::arbitrary<bool>()) s.columns = 1;  // decodes wrap in place
    steps.push_back(s);
    real[0] += s.columns;
  }
  Continue(ring, plain, steps, /*same_kind=*/false);
}

KVSPEC_FOR_EACH_TARGET(RingTargets);

}  // namespace
}  // namespace kvspec

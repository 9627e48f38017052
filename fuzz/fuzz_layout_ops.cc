// Differential fuzz target: random trace programs on kv, ring and ssm
// (recurrent) layers, run by the real runner (runner/runner.h: layouts,
// caches, masks, kernels) and by the independent model (testing/trace_model.h). Any
// difference in standard output, exit status, the refusal line or the
// failed expectations prints the trace and both outputs and traps.
//
// Input: byte 0 picks the Highway target (among the supported and compiled
// ones), so a crash file replays on its own ISA; the rest drives a
// FuzzedDataProvider that writes the trace text: a header (1..4 rows, 1..3
// layers, kv or rotating, heads and dim 1..4, a window 1..8, optional for
// kv, a ring capacity up to window + 4; in about a third of the layouts
// one or more `ssm` layers, heads 1..2, kheads 1 or heads, dk, dv and
// conv 1..4, alone or mixed with attention layers) and up to 40
// statements (windows with left and right padding and ids, decodes, trims
// with and without bypass, speculative rounds with uniform and ragged
// accepts, fork, use, join, filter, extract, reload, expectations, and
// `expect error` around operations that should be refused, or sometimes
// not; with an ssm layer every trim is written inside `expect error`). A
// statement may also be a twin pattern (Generator::Twins): two forks reach
// the same tokens, one through a round that rejects a tail, the other
// writing only the kept tokens in other chunks or through a round with other
// drafts, then `expect equal`: bit-exact rollback replay and tail
// independence as invariants inside the trace. A small shadow of the state
// steers the choices towards valid operations; it decides nothing about the
// outcome: the model does.
//
// What is compared: the model predicts everything but values: `sees`
// lines, when `state` lines are printed (not their hashes), refusals, exit
// status and failed expectations, `expect equal` of ssm rows included
// (testing/trace_model.h; a few it leaves undecided). Programs with an ssm layer run
// with values on, and once more with the scalar reference kernels: the two
// runs must agree (kvspec::fuzz::CompareKernelSets: identical lines,
// refusals and exit status, `out` values within 1e-4 * (1 + |reference|),
// state hashes not compared across kernel sets).
//
// Set KVSPEC_FUZZ_PRINT_TRACE=1 to print every generated trace to standard
// error (for instance with the replay binary on one crash file), followed by
// the same trace annotated with expectations: the model's `sees` lines after
// every forward, and, when the Highway kernels differ from the reference
// ones, the reference run's `sees`, `positions` and `out` lines (`====
// annotated trace (...), exit N` blocks; fuzz/overnight stores the last one
// as the finding's regression trace).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "kvspec/trace/program.h"
#include "kvspec/fuzz/differential.h"
#include "kvspec/fuzz/known_issues.h"
#include "kvspec/testing/trace_model.h"
#include "hwy/targets.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVSPEC_FUZZ_SANITIZED 1
#endif
#elif defined(__SANITIZE_ADDRESS__)
#define KVSPEC_FUZZ_SANITIZED 1
#endif
#ifdef KVSPEC_FUZZ_SANITIZED
#include <sanitizer/common_interface_defs.h>
#endif

namespace {

constexpr size_t kMaxBytes = size_t{64} << 20;
constexpr int kMaxStatements = 40;
constexpr int kMaxColumns = 8;  // L of a window
// Columns all forwards together may write: the runner's cost grows with the
// square of the columns a row holds, and small states find the bugs.
constexpr int kColumnBudget = 64;
constexpr char kTraceName[] = "fuzz_layout_ops.trace";

std::string JoinInts(const std::vector<int32_t>& v, const char* sep = ",") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += sep;
    s += std::to_string(v[i]);
  }
  return s;
}

// What the generator believes about one layout: enough to pick mostly
// valid arguments. Never consulted for the verdict.
struct Shadow {
  std::vector<std::vector<int32_t>> ids;  // [row] ids of the real tokens, by position
  bool written = false;  // a forward ran
  bool batched = false;  // the caches are the batched kinds (README "Cache kinds")
  bool armed = false;
  bool verified = false;
  std::vector<int32_t> verify_real;
  bool after_window = false;  // the last change was a window
  std::vector<int32_t> window_real;
  // Columns per row now, at most ever, and before the last forward (ring
  // wrap: TRACE.md precise rule 1).
  int32_t columns = 0, peak = 0, peak_before = 0;
  // The last forward: each row's first query position and query count, and
  // the row's ids right after it.
  bool has_last = false;
  std::vector<int32_t> last_first, last_count;
  std::vector<std::vector<int32_t>> last_ids;

  int32_t Count(size_t r) const { return static_cast<int32_t>(ids[r].size()); }
  int32_t MinCount() const {
    int32_t m = INT32_MAX;
    for (size_t r = 0; r < ids.size(); ++r) m = std::min(m, Count(r));
    return m;
  }
  std::vector<int32_t> Positions() const {
    std::vector<int32_t> p;
    for (size_t r = 0; r < ids.size(); ++r) p.push_back(Count(r));
    return p;
  }
  void DropLast(size_t r, int32_t n) {
    ids[r].resize(ids[r].size() - static_cast<size_t>(std::min(n, Count(r))));
  }
};

struct LayerShape {
  std::string name;
  bool ring = false;  // `rotating`
  bool ssm = false;   // `ssm`; neither: `kv`
  int heads = 1, dim = 1, window = 0, capacity = 0;
};

class Generator {
 public:
  explicit Generator(FuzzedDataProvider* fdp) : fdp_(*fdp) {}

  std::string Generate() {
    Header();
    for (int i = 0; i < kMaxStatements && fdp_.remaining_bytes() > 0 && !stopped_; ++i) {
      OneStatement();
    }
    return text_;
  }

 private:
  Shadow& Cur() { return layouts_[current_]; }
  int Rows() { return static_cast<int>(Cur().ids.size()); }
  void Line(const std::string& s) {
    text_ += (wrap_next_ ? "expect error " : "") + s + "\n";
    wrap_next_ = false;
  }
  bool Chance(int percent) { return fdp_.ConsumeIntegralInRange<int>(0, 99) < percent; }
  int32_t Range(int32_t lo, int32_t hi) { return fdp_.ConsumeIntegralInRange<int32_t>(lo, hi); }

  void Header() {
    rows_ = Range(1, 4);
    Line("trace 1");
    Line("rows " + std::to_string(rows_));
    const int layers = Range(1, 3);
    // About a third of the layouts hold a recurrent layer, alone or among
    // attention layers (hybrid).
    const int ssm_at = Chance(35) ? Range(0, layers - 1) : -1;
    for (int l = 0; l < layers; ++l) {
      LayerShape shape;
      if (l == ssm_at || (ssm_at >= 0 && Chance(15))) {
        SsmLayer(l, &shape);
        continue;
      }
      shape.ring = Chance(40);
      shape.name = (shape.ring ? "s" : "k") + std::to_string(l);
      shape.heads = Range(1, 4);
      shape.dim = Range(1, 4);
      shape.window = shape.ring || Chance(50) ? Range(1, kMaxColumns) : 0;
      std::string line = "layer " + shape.name + (shape.ring ? " rotating" : " kv") +
                         " heads=" + std::to_string(shape.heads) +
                         " dim=" + std::to_string(shape.dim);
      if (shape.window) line += " window=" + std::to_string(shape.window);
      shape.capacity = shape.window;
      if (shape.ring && Chance(30)) {
        shape.capacity += Range(0, 4);
        line += " capacity=" + std::to_string(shape.capacity);
      }
      Line(line);
      layers_.push_back(shape);
    }
    for (size_t l = 0; l < layers_.size(); ++l) {
      has_ssm_ = has_ssm_ || layers_[l].ssm;
      if (!layers_[l].ssm) attention_.push_back(l);
    }
    Shadow main;
    main.ids.resize(static_cast<size_t>(rows_));
    main.batched = rows_ > 1;
    layouts_["main"] = main;
    current_ = "main";
  }

  // `layer rL ssm ...`: small shapes (the fuzzer's speed), value heads a
  // multiple of the key heads, conv kernels from 1 (no conv state) to 4.
  void SsmLayer(int l, LayerShape* shape) {
    shape->ssm = true;
    shape->name = "r" + std::to_string(l);
    shape->heads = Range(1, 2);
    const int kheads = Chance(50) ? 1 : shape->heads;
    const int dk = Range(1, 4), dv = Range(1, 4), conv = Range(1, 4);
    std::string line = "layer " + shape->name + " ssm heads=" + std::to_string(shape->heads);
    if (kheads != shape->heads || Chance(30)) line += " kheads=" + std::to_string(kheads);
    line += " dk=" + std::to_string(dk) + " dv=" + std::to_string(dv) +
            " conv=" + std::to_string(conv);
    Line(line);
    layers_.push_back(*shape);
  }

  void OneStatement() {
    Shadow& s = Cur();
    // Steer rounds to completion: an armed round wants its verify forward,
    // a verified one its accept.
    if (s.armed && !s.verified && Chance(70)) return Chance(75) ? Window() : Decode();
    if (s.armed && s.verified && Chance(60)) return Accept();
    if (Chance(has_ssm_ ? 12 : 4)) return Twins();
    switch (Range(0, 17)) {
      case 0:
      case 1:
      case 2:
        return Window();
      case 3:
        return Decode();
      case 4:
        return Trim();
      case 5:
      case 6:
        return Arm();
      case 7:
        return Accept();
      case 8:
        return Fork();
      case 9:
        return Use();
      case 10:
        return ExpectPositions();
      case 11:
        return ExpectSees();
      case 12:
        return ExpectOther();
      case 13:
      case 14:
        return ExpectError();
      case 15:
        return Reload();
      case 16:
        return Batch();
      default:
        return Refused();
    }
  }

  // ---- Valid operations (as far as the shadow knows).

  // Whether a ring of the current layout has wrapped.
  bool Wrapped() {
    for (const LayerShape& layer : layers_) {
      if (layer.ring && Cur().peak > layer.capacity) return true;
    }
    return false;
  }
  // The shadow's peak after dropping tokens of the last forward.
  void PeakAsIfNotWritten(Shadow* s) { s->peak = std::max(s->peak_before, s->columns); }

  // Per-row real counts and the option text of a window of L columns.
  std::string WindowText(int32_t L, std::vector<int32_t>* real, bool* any_ids,
                         std::vector<std::vector<int32_t>>* ids) {
    Shadow& s = Cur();
    std::vector<int32_t> left(static_cast<size_t>(Rows()), 0), right(left);
    bool any_left = false, any_right = false;
    for (size_t r = 0; r < left.size(); ++r) {
      if (s.Count(r) == 0 && Chance(40)) left[r] = Range(0, L);
      if (Chance(30)) right[r] = Range(0, L - left[r]);
      any_left |= left[r] > 0;
      any_right |= right[r] > 0;
      (*real)[r] = L - left[r] - right[r];
    }
    std::string text = "window " + std::to_string(L);
    if (any_left || Chance(5)) text += " left=" + JoinInts(left);
    if (any_right || Chance(5)) text += " right=" + JoinInts(right);
    *any_ids = Chance(50);
    ids->assign(left.size(), {});
    for (size_t r = 0; r < left.size(); ++r) {
      for (int32_t j = 0; j < (*real)[r]; ++j) {
        (*ids)[r].push_back(*any_ids ? Range(0, 40) : s.Count(r) + j);
      }
    }
    if (*any_ids) {
      std::string g;
      for (size_t r = 0; r < ids->size(); ++r) {
        if (r) g += "/";
        g += JoinInts((*ids)[r]);
      }
      text += " ids=" + g;
    }
    return text;
  }

  // Shadow update of a forward that was not refused.
  void Forwarded(int32_t columns, const std::vector<int32_t>& real,
                 const std::vector<std::vector<int32_t>>& ids, bool decode) {
    Shadow& s = Cur();
    s.last_first = s.Positions();
    s.last_count = real;
    for (size_t r = 0; r < ids.size(); ++r) {
      s.ids[r].insert(s.ids[r].end(), ids[r].begin(), ids[r].end());
    }
    s.last_ids = s.ids;
    s.has_last = true;
    s.written = true;
    if (s.armed) {
      s.verified = true;
      s.verify_real = real;
    }
    s.after_window = !decode;
    s.window_real = real;
    s.peak_before = s.peak;
    s.columns += columns;
    s.peak = std::max(s.peak, s.columns);
  }

  void Window() {
    if (Cur().armed && Cur().verified) return Accept();
    if (budget_ < 1) return Cur().armed ? void() : Trim();
    const int32_t L = Range(1, std::min(kMaxColumns, budget_));
    budget_ -= L;
    std::vector<int32_t> real(static_cast<size_t>(Rows()));
    std::vector<std::vector<int32_t>> ids;
    bool any_ids = false;
    const std::string text = WindowText(L, &real, &any_ids, &ids);
    Line(text);
    Forwarded(L, real, ids, false);
  }

  void Decode() {
    if (Cur().armed && Cur().verified) return Accept();
    if (budget_ < 1) return Cur().armed ? void() : Trim();
    budget_ -= 1;
    std::vector<std::vector<int32_t>> ids(static_cast<size_t>(Rows()));
    std::string text = "decode";
    const bool any_ids = Chance(50);
    for (size_t r = 0; r < ids.size(); ++r) {
      ids[r].push_back(any_ids ? Range(0, 40) : Cur().Count(r));
    }
    if (any_ids) {
      std::string g;
      for (size_t r = 0; r < ids.size(); ++r) g += (r ? "/" : "") + std::to_string(ids[r][0]);
      text += " ids=" + g;
    }
    Line(text);
    Forwarded(1, std::vector<int32_t>(ids.size(), 1), ids, true);
  }

  void Trim() {
    Shadow& s = Cur();
    if (s.armed) return Accept();
    if (!s.written) return budget_ > 0 ? Window() : void();
    if (has_ssm_) {
      // Recurrent layers are never trimmed (TRACE.md precise rules 2, 3):
      // refused, with or without bypass, whatever the count.
      const std::string op = "trim " + std::to_string(Range(0, s.MinCount())) +
                             (s.after_window && Chance(50) ? " bypass" : "");
      return Line(wrap_next_ ? op : "expect error " + op);
    }
    int32_t bound = s.MinCount();
    const bool wrapped = Wrapped();
    const bool bypass = s.after_window && (wrapped || Chance(60));
    if (wrapped && !bypass) {  // not trimmable: say so, unless inside `expect error`
      return wrap_next_ ? void() : Line("expect error trim 0");
    }
    if (bypass) {
      for (int32_t real : s.window_real) bound = std::min(bound, real);
    }
    const int32_t n = Range(0, bound);
    Line("trim " + std::to_string(n) + (bypass ? " bypass" : ""));
    for (size_t r = 0; r < s.ids.size(); ++r) s.DropLast(r, n);
    s.columns -= n;
    if (bypass) PeakAsIfNotWritten(&s);
    s.after_window = false;
  }

  void Arm() {
    Shadow& s = Cur();
    if (s.armed) return s.verified ? Accept() : Window();
    Line("arm");
    s.armed = true;
    s.verified = false;
    s.after_window = false;
  }

  void Accept() {
    Shadow& s = Cur();
    if (!s.armed) return Arm();
    if (!s.verified) return Window();
    std::vector<int32_t> keep;
    if (Chance(40)) {
      int32_t bound = INT32_MAX;
      for (int32_t real : s.verify_real) bound = std::min(bound, real);
      keep.push_back(Range(0, bound));
    } else {
      for (int32_t real : s.verify_real) keep.push_back(Range(0, real));
    }
    Accepted(keep);
  }

  // Writes `accept KEEP` and updates the shadow.
  void Accepted(const std::vector<int32_t>& keep) {
    Shadow& s = Cur();
    Line("accept " + JoinInts(keep));
    int32_t common = INT32_MAX;
    for (size_t r = 0; r < s.ids.size(); ++r) {
      const int32_t k = keep.size() == 1 ? keep[0] : keep[r];
      s.DropLast(r, s.verify_real[r] - k);
      common = std::min(common, s.verify_real[r] - k);
    }
    s.columns -= common;
    PeakAsIfNotWritten(&s);
    s.armed = false;
    s.verified = false;
    s.after_window = false;
  }

  // Writes one forward of L columns with these pads and real ids per row
  // (a decode when `decode`: L = 1, no pads) and updates the shadow.
  void Forward(int32_t L, const std::vector<int32_t>& left, const std::vector<int32_t>& right,
               const std::vector<std::vector<int32_t>>& ids, bool decode) {
    std::string text = decode ? "decode" : "window " + std::to_string(L);
    bool any_left = false, any_right = false;
    std::vector<int32_t> real(ids.size());
    std::string g;
    for (size_t r = 0; r < ids.size(); ++r) {
      any_left |= left[r] > 0;
      any_right |= right[r] > 0;
      real[r] = static_cast<int32_t>(ids[r].size());
      g += (r ? "/" : "") + JoinInts(ids[r]);
    }
    if (any_left) text += " left=" + JoinInts(left);
    if (any_right) text += " right=" + JoinInts(right);
    text += " ids=" + g;
    Line(text);
    Forwarded(L, real, ids, decode);
  }

  // Tail independence and bit-exact rollback, as an invariant inside the
  // trace: two forks of the current layout reach the same tokens, fork A
  // through a speculative round that rejects a tail (uniform or ragged
  // keeps, possibly all or none), fork B through other chunks that write
  // only the kept tokens (windows with right or left pads, decodes), or
  // through a round of its own with other rejected drafts. Then `expect
  // equal`: attention tokens and recurrent states must be bit-identical.
  // Sometimes B's last kept token gets another id, and the expectation must
  // fail. The model decides; this only makes the expectation meaningful.
  void Twins() {
    if (Cur().armed) return Accept();
    if (twins_ >= 5 || budget_ < 2) return ExpectOther();
    ++twins_;
    const std::string a = "t" + std::to_string(forks_++);
    const std::string b = "t" + std::to_string(forks_++);
    Line("fork " + a);
    layouts_[a] = Cur();
    Line("fork " + b);
    layouts_[b] = Cur();
    const size_t rows = static_cast<size_t>(Rows());

    // A: arm, verify forward of drafts, accept.
    Line("use " + a);
    current_ = a;
    Line("arm");
    Cur().armed = true;
    Cur().verified = false;
    Cur().after_window = false;
    const int32_t L = Range(1, std::min(kMaxColumns, budget_ / 2));
    budget_ -= L;
    const bool decode = L == 1 && Chance(50);
    std::vector<int32_t> left(rows, 0), right(rows, 0);
    std::vector<std::vector<int32_t>> ids(rows);
    for (size_t r = 0; r < rows && !decode; ++r) {
      const int32_t pads = Chance(30) ? Range(0, L) : 0;
      (Cur().Count(r) == 0 && Chance(50) ? left : right)[r] = pads;
    }
    for (size_t r = 0; r < rows; ++r) {
      for (int32_t j = left[r]; j < L - right[r]; ++j) ids[r].push_back(Range(0, 40));
    }
    Forward(L, left, right, ids, decode);
    std::vector<int32_t> keep(rows);
    for (size_t r = 0; r < rows; ++r) {
      keep[r] = Range(0, static_cast<int32_t>(ids[r].size()));
    }
    if (Chance(40)) keep.assign(1, *std::min_element(keep.begin(), keep.end()));
    Accepted(keep);
    std::vector<std::vector<int32_t>> kept(rows);
    for (size_t r = 0; r < rows; ++r) {
      const size_t k = static_cast<size_t>(keep.size() == 1 ? keep[0] : keep[r]);
      kept[r].assign(ids[r].begin(), ids[r].begin() + static_cast<std::ptrdiff_t>(k));
    }
    const bool differ = Chance(10);
    if (differ) {  // B's last kept token of one row gets another id
      for (auto& row : kept) {
        if (!row.empty()) {
          row.back() += 41;
          break;
        }
      }
    }

    // B: the kept tokens only.
    Line("use " + b);
    current_ = b;
    int32_t most = 0;
    for (const auto& row : kept) most = std::max(most, static_cast<int32_t>(row.size()));
    if (Chance(35) && budget_ >= std::max(most, 1)) {
      // A round of its own: the kept tokens, then other drafts, then accept.
      Line("arm");
      Cur().armed = true;
      Cur().verified = false;
      Cur().after_window = false;
      const int32_t L2 = Range(std::max(most, 1), std::min(kMaxColumns, budget_));
      budget_ -= L2;
      std::vector<std::vector<int32_t>> drafts(rows);
      std::vector<int32_t> keep2(rows), zero(rows, 0), pads(rows, 0);
      for (size_t r = 0; r < rows; ++r) {
        drafts[r] = kept[r];
        const int32_t room = L2 - static_cast<int32_t>(kept[r].size());
        pads[r] = Chance(30) ? Range(0, room) : 0;
        for (int32_t j = 0; j < room - pads[r]; ++j) drafts[r].push_back(Range(0, 40));
        keep2[r] = static_cast<int32_t>(kept[r].size());
      }
      Forward(L2, zero, pads, drafts, false);
      Accepted(keep2);
    } else {
      // Chunks: row r writes its next min(c, remaining) kept tokens, padded
      // to c columns (left pads while the row is empty, else right pads).
      std::vector<size_t> done(rows, 0);
      for (int32_t rest = most; rest > 0 && budget_ > 0;) {
        const int32_t c = Range(1, std::min(rest, budget_));
        budget_ -= c;
        rest -= c;
        std::vector<int32_t> l(rows, 0), rt(rows, 0);
        std::vector<std::vector<int32_t>> chunk(rows);
        bool all_full = true;
        for (size_t r = 0; r < rows; ++r) {
          const size_t n = std::min(static_cast<size_t>(c), kept[r].size() - done[r]);
          chunk[r].assign(kept[r].begin() + static_cast<std::ptrdiff_t>(done[r]),
                          kept[r].begin() + static_cast<std::ptrdiff_t>(done[r] + n));
          done[r] += n;
          const int32_t pad = c - static_cast<int32_t>(n);
          all_full = all_full && pad == 0;
          (Cur().Count(r) == 0 && Chance(50) ? l : rt)[r] = pad;
        }
        Forward(c, l, rt, chunk, c == 1 && all_full && Chance(50));
      }
    }
    Line("expect equal " + a);
    if (Chance(30)) {
      Line("use " + a);
      current_ = a;
      Line("expect equal " + b);
    }
  }

  // join, filter or extract, mostly valid.
  void Batch() {
    Shadow& s = Cur();
    if (s.armed) return Accept();
    switch (Range(0, 2)) {
      case 0: {  // join another layout, not growing past 8 rows
        std::vector<std::string> names;
        for (const auto& entry : layouts_) {
          if (entry.first != current_ && !entry.second.armed &&
              entry.second.ids.size() + s.ids.size() <= 8) {
            names.push_back(entry.first);
          }
        }
        if (names.empty()) return Fork();
        const std::string name =
            names[static_cast<size_t>(Range(0, static_cast<int32_t>(names.size()) - 1))];
        const Shadow b = layouts_[name];
        Line("join " + name);
        s.ids.insert(s.ids.end(), b.ids.begin(), b.ids.end());
        s.columns = std::max(s.columns, b.columns);
        s.peak = std::max(s.peak, b.peak);
        s.written = s.written || b.written;
        s.batched = true;
        break;
      }
      case 1: {  // filter: each row kept with probability 1/2, at least one
        std::vector<int32_t> keep;
        std::vector<std::vector<int32_t>> ids;
        for (int32_t r = 0; r < Rows(); ++r) {
          if (Chance(50)) {
            keep.push_back(r);
            ids.push_back(s.ids[static_cast<size_t>(r)]);
          }
        }
        if (keep.empty()) {
          keep.push_back(Rows() - 1);
          ids.push_back(s.ids.back());
        }
        Line("filter " + JoinInts(keep));
        s.ids = ids;
        break;
      }
      default: {  // extract: a single-row layout fed only that row's tokens
        const int32_t r = Range(0, Rows() - 1);
        const std::string name = "x" + std::to_string(forks_++);
        Line("extract " + std::to_string(r) + " as " + name);
        Shadow e;
        e.ids.push_back(s.ids[static_cast<size_t>(r)]);
        e.written = s.written;
        e.columns = e.peak = e.peak_before = e.Count(0);
        layouts_[name] = e;
        return;
      }
    }
    s.has_last = false;
    s.after_window = false;
  }

  // Through the persistence codec and back: a change, nothing else.
  void Reload() {
    Line("reload");
    Cur().after_window = false;
  }

  void Fork() {
    const std::string name = "f" + std::to_string(forks_++);
    Line("fork " + name);
    layouts_[name] = Cur();
  }

  void Use() {
    std::vector<std::string> names;
    for (const auto& entry : layouts_) names.push_back(entry.first);
    current_ = names[static_cast<size_t>(Range(0, static_cast<int32_t>(names.size()) - 1))];
    Line("use " + current_);
  }

  // ---- Expectations.

  void ExpectPositions() {
    std::vector<int32_t> p = Cur().Positions();
    if (Chance(15)) p[static_cast<size_t>(Range(0, Rows() - 1))] += Range(1, 2);
    Line("expect positions " + JoinInts(p));
  }

  void ExpectSees() {
    const Shadow& s = Cur();
    if (!s.has_last || attention_.empty()) return ExpectPositions();
    const size_t l = attention_[static_cast<size_t>(
        Range(0, static_cast<int32_t>(attention_.size()) - 1))];
    const size_t r = static_cast<size_t>(Range(0, Rows() - 1));
    if (s.last_count[r] == 0) return ExpectPositions();
    const int32_t p = s.last_first[r] + Range(0, s.last_count[r] - 1);
    const int32_t W = layers_[l].window;
    const int32_t lo = W ? std::max(0, p - W + 1) : 0;
    std::vector<std::string> items;
    for (int32_t q = lo; q <= p && q < static_cast<int32_t>(s.last_ids[r].size()); ++q) {
      const int32_t id = s.last_ids[r][static_cast<size_t>(q)];
      items.push_back(id == q ? std::to_string(q) : std::to_string(q) + ":" + std::to_string(id));
    }
    switch (Range(0, 9)) {  // mostly right; sometimes wrong in one item
      case 0:
        if (!items.empty()) items.pop_back();
        break;
      case 1:
        items.push_back(std::to_string(p + 1));
        break;
      case 2:  // a wrong id (generated ids are at most 40)
        if (!items.empty()) items.front() = std::to_string(lo) + ":99";
        break;
      case 3:
        std::reverse(items.begin(), items.end());  // order-free
        break;
      default:
        break;
    }
    std::string line = "expect sees " + layers_[l].name + " r" + std::to_string(r) + " p" +
                       std::to_string(p) + ":";
    const char* sep = Chance(30) ? ", " : " ";
    for (size_t i = 0; i < items.size(); ++i) line += (i ? sep : " ") + items[i];
    Line(line);
  }

  void ExpectOther() {
    const LayerShape& layer =
        layers_[static_cast<size_t>(Range(0, static_cast<int32_t>(layers_.size()) - 1))];
    switch (Range(0, 4)) {
      case 0:
        Line("expect trimmable " + layer.name +
             ((layer.ssm || (layer.ring && Cur().peak > layer.capacity)) != Chance(90)
                  ? " yes"
                  : " no"));
        return;
      case 1: {
        const std::string kind = layer.ssm ? "ssm" : layer.ring ? "rotating" : "kv";
        Line("expect kind " + layer.name + " " +
             (!Cur().batched != Chance(10) ? kind : "batched_" + kind));
        return;
      }
      case 2:
        Line("expect bytes_per_token " + layer.name + " " +
             std::to_string((layer.ssm ? 0 : layer.heads * layer.dim * 8) +
                            (Chance(10) ? 4 : 0)));
        return;
      default: {
        std::vector<std::string> names;
        for (const auto& entry : layouts_) names.push_back(entry.first);
        Line("expect equal " +
             names[static_cast<size_t>(Range(0, static_cast<int32_t>(names.size()) - 1))]);
        return;
      }
    }
  }

  // ---- Operations that should be refused.

  // The text of an operation the rules refuse in the current state, or ""
  // when the chosen kind of refusal is not available here.
  std::string RefusedOperation() {
    const Shadow& s = Cur();
    const std::string rows_list = JoinInts(std::vector<int32_t>(static_cast<size_t>(Rows()), 0));
    switch (Range(0, 19)) {
      case 0:  // trim more than a row holds
        return "trim " + std::to_string(s.MinCount() + Range(1, 3));
      case 1:  // bypass when the last change was not a window, or beyond it
        if (s.after_window) {
          int32_t bound = INT32_MAX;
          for (int32_t real : s.window_real) bound = std::min(bound, real);
          return "trim " + std::to_string(bound + 1) + " bypass";
        }
        return "trim " + std::to_string(Range(0, s.MinCount())) + " bypass";
      case 2:  // trim while armed
        return s.armed ? "trim 0" : "";
      case 3:  // arm twice
        return s.armed ? "arm" : "";
      case 4:  // accept without a round, before its verify forward, too many
        if (!s.armed || !s.verified) return "accept " + std::to_string(Range(0, 2));
        return "accept " + std::to_string(*std::max_element(s.verify_real.begin(),
                                                            s.verify_real.end()) + 1);
      case 5:  // accept list of the wrong length
        if (Rows() == 1) return "";
        return "accept " + JoinInts(std::vector<int32_t>(static_cast<size_t>(Rows()) + 1, 0));
      case 6:  // a second forward while armed
        return s.armed && s.verified ? (Chance(50) ? "decode" : "window 2") : "";
      case 7: {  // left padding on a row that holds tokens
        for (size_t r = 0; r < s.ids.size(); ++r) {
          if (s.Count(r)) {
            std::vector<int32_t> left(s.ids.size(), 0);
            left[r] = 1;
            return "window 2 left=" + JoinInts(left);
          }
        }
        return "";
      }
      case 8:  // left + right > L
        return "window 2 left=" + rows_list + " right=" +
               JoinInts(std::vector<int32_t>(static_cast<size_t>(Rows()), 3));
      case 9:  // list lengths against rows
        return Chance(50) ? "window 2 right=" + rows_list + ",0"
                          : "window 2 left=" + rows_list + ",0";
      case 10: {  // ids: wrong count in a row, or wrong number of groups
        std::string g;
        for (int r = 0; r < Rows(); ++r) g += (r ? "/" : "") + std::string("1,2,3");
        return Chance(50) ? "window 2 ids=" + g : "decode ids=" + g + "/4";
      }
      case 11:  // fork onto an existing name
        return "fork " + std::string(Chance(50) ? "main" : current_);
      case 12:  // use of an unknown name
        return "use nowhere";
      case 13:  // join of an unknown name, or of the layout into itself
        return Chance(50) ? "join nowhere" : "join " + current_;
      case 14:  // join, filter or extract while armed
        if (!s.armed) return "";
        return Chance(33) ? "filter 0" : Chance(50) ? "extract 0 as xa" : "join nowhere";
      case 15:  // filter of a row that does not exist
        return "filter " + std::to_string(Rows());
      case 16:  // filter rows not strictly ascending
        return Rows() >= 2 && Chance(50) ? "filter 1,0" : "filter 0,0";
      case 17:  // extract of a row that does not exist
        return "extract " + std::to_string(Rows() + Range(0, 2)) + " as xb";
      case 18:  // extract onto an existing name
        return "extract 0 as " + current_;
      default:  // expect equal of an unknown name (a refusal, not a failure)
        return "";
    }
  }

  void ExpectError() {
    const std::string op = RefusedOperation();
    if (!op.empty()) return Line("expect error " + op);
    if (!Chance(30)) return;
    // A valid operation: it runs (the shadow follows), and the expectation
    // fails. The generators below write operations only, or nothing.
    wrap_next_ = true;
    switch (Range(0, 5)) {
      case 0: Window(); break;
      case 1: Decode(); break;
      case 2: Trim(); break;
      case 3: Arm(); break;
      case 4: Fork(); break;
      default: Use(); break;
    }
    wrap_next_ = false;
  }

  // A refused operation outside `expect error`: the run stops there.
  void Refused() {
    if (!Chance(25)) return ExpectError();
    std::string op = RefusedOperation();
    if (op.empty()) op = Chance(50) ? "expect equal nowhere" : "expect positions " +
                             JoinInts(std::vector<int32_t>(static_cast<size_t>(Rows()) + 1, 0));
    Line(op);
    stopped_ = true;
  }

  FuzzedDataProvider& fdp_;
  std::string text_;
  int rows_ = 1;
  std::vector<LayerShape> layers_;
  std::vector<size_t> attention_;  // indices of the kv and rotating layers
  bool has_ssm_ = false;
  int twins_ = 0;                  // Twins() patterns written
  std::map<std::string, Shadow> layouts_;
  std::string current_;
  int forks_ = 0;
  int budget_ = kColumnBudget;
  bool wrap_next_ = false;  // the next line is an operation inside `expect error`
  bool stopped_ = false;
};

// The trace being run, printed when a sanitizer stops the process.
const std::string* g_running_trace = nullptr;

[[maybe_unused]] void PrintRunningTrace() {
  if (g_running_trace) {
    std::fprintf(stderr, "==== the generated trace that was running\n%s====\n",
                 g_running_trace->c_str());
  }
}

// Every target the CPU supports and the core was compiled for.
const std::vector<int64_t>& Targets() {
  static const std::vector<int64_t> targets = [] {
    hwy::SetSupportedTargetsForTest(0);
    return hwy::SupportedAndGeneratedTargets();
  }();
  return targets;
}

// Makes dynamic dispatch pick `target` from now on.
void UseTarget(int64_t target) {
  hwy::SetSupportedTargetsForTest(target);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

// The program with the model's view of every forward written in after it
// as `expect sees` lines: a trace a correct runner passes (or fails) as the
// model says, and one whose masks differ fails, for fuzz/overnight to store
// as a regression. The lines a statement adds are those its prefix of the
// program adds to the model's output.
std::string ModelAnnotatedTrace(const kvspec::trace::Program& program) {
  std::map<int, std::string> after;  // by 1-based line
  kvspec::trace::Program prefix = program;
  std::string previous;
  for (size_t k = 0; k < program.body.size(); ++k) {
    prefix.body.assign(program.body.begin(), program.body.begin() + static_cast<long>(k) + 1);
    const kvspec::testing::ModelOutcome m = kvspec::testing::RunModel(prefix);
    if (!m.supported || m.out.compare(0, previous.size(), previous) != 0) break;
    for (const std::string& line : kvspec::fuzz::SplitLines(m.out.substr(previous.size()))) {
      if (line.rfind("sees ", 0) == 0) after[program.body[k].line] += "expect " + line + "\n";
    }
    previous = m.out;
    if (m.exit_status != 0) break;  // the run stops here
  }
  std::string text;
  for (size_t i = 0; i < program.lines.size(); ++i) {
    text += program.lines[i] + "\n";
    const auto it = after.find(static_cast<int>(i) + 1);
    if (it != after.end()) text += it->second;
  }
  return text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::vector<int64_t>& targets = Targets();
  const int64_t target = targets[data[0] % targets.size()];
  UseTarget(target);

  FuzzedDataProvider fdp(data + 1, size - 1);
  const std::string text = Generator(&fdp).Generate();
#ifdef KVSPEC_FUZZ_SANITIZED
  static const bool registered = [] {
    __sanitizer_set_death_callback(PrintRunningTrace);
    return true;
  }();
  (void)registered;
#endif
  g_running_trace = &text;
  struct Forget {
    ~Forget() { g_running_trace = nullptr; }
  } forget;
  static const bool print = std::getenv("KVSPEC_FUZZ_PRINT_TRACE") != nullptr;
  if (print) std::fprintf(stderr, "# target %s\n%s", hwy::TargetName(target), text.c_str());

  kvspec::trace::Program program;
  kvspec::trace::SyntaxError error;
  if (!kvspec::trace::ParseTrace(text, kTraceName, &program, &error)) {
    std::fprintf(stderr, "generator bug: the generated trace does not parse: %s\n%s",
                 error.ToString().c_str(), text.c_str());
    __builtin_trap();
  }
  std::string issue;
  if (kvspec::fuzz::MayReachKnownIssue(program, &issue)) return 0;
  const kvspec::testing::ModelOutcome model = kvspec::testing::RunModel(program);
  if (!model.supported) {
    std::fprintf(stderr, "generator bug: the model does not cover %s\n%s",
                 model.unsupported.c_str(), text.c_str());
    __builtin_trap();
  }
  if (print && model.undecided_lines.empty()) {
    std::fprintf(stderr, "==== annotated trace (model), exit %d\n%s====\n", model.exit_status,
                 ModelAnnotatedTrace(program).c_str());
  }
  bool has_ssm = false;
  for (const kvspec::LayerConfig& d : program.layers) {
    has_ssm = has_ssm || d.kind == kvspec::CacheKind::kSsm;
  }
  // With a recurrent layer, values on: the same run serves the model (which
  // ignores `out` lines and state hashes) and the kernel comparison.
  const kvspec::fuzz::RunnerOutcome runner = kvspec::fuzz::RunRunner(program, kMaxBytes, has_ssm);
  const std::string difference = kvspec::fuzz::Compare(runner, model);
  if (!difference.empty()) {
    std::fprintf(stderr, "Highway target: %s\n%s", hwy::TargetName(target),
                 kvspec::fuzz::DivergenceReport(text, runner, model, difference).c_str());
    __builtin_trap();
  }
  if (has_ssm) {
    const kvspec::fuzz::RunnerOutcome ref =
        kvspec::fuzz::RunRunner(program, kMaxBytes, true, /*reference_kernels=*/true);
    const std::string kernels = kvspec::fuzz::CompareKernelSets(runner, ref, model.undecided_lines);
    if (!kernels.empty()) {
      if (print) {
        // The program as the runner emits it with the reference kernels and
        // values: `expect sees`, `positions` and `out` lines by that run.
        const kvspec::fuzz::RunnerOutcome annotated =
            kvspec::fuzz::RunRunner(program, kMaxBytes, true, true, /*emit=*/true);
        std::fprintf(stderr, "==== annotated trace (reference kernels), exit %d\n%s====\n",
                     annotated.exit_status, annotated.out.c_str());
      }
      std::fprintf(stderr, "Highway target: %s\n%s", hwy::TargetName(target),
                   kvspec::fuzz::KernelReport("fuzz_layout_ops", text, runner, ref, kernels)
                       .c_str());
      __builtin_trap();
    }
  }
  return 0;
}

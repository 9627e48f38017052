// The trace model: TRACE.md's rules for kv, ring and ssm layers, as plainly
// as possible. Every operation first decides whether it is refused, from the
// rules alone, and only then changes anything, so a refusal never changes
// the model.
#include "testing/trace_model.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace kvspec::fuzz {
namespace {

using trace::Op;
using trace::Program;
using trace::SeenItem;
using trace::Statement;

// One column of a row: padding, or a real token.
struct Column {
  bool real = false;
  int32_t pos = 0;  // real tokens only
  int32_t id = 0;   // real tokens only
};

// One row of a layout. Every attention layer holds the same columns (the
// same tokens, each layer with its own contents), so one list serves them
// all; a ring differs only in what it must still hold and when it is
// trimmable, both decided by its window and the layout's column peak.
struct Row {
  std::vector<Column> columns;

  // Real tokens held: also the row's next position.
  int32_t Count() const {
    int32_t n = 0;
    for (const Column& c : columns) n += c.real ? 1 : 0;
    return n;
  }
  // Removes the last n real tokens with their columns; pads stay.
  void RemoveLastTokens(int32_t n) {
    for (size_t i = columns.size(); n > 0 && i-- > 0;) {
      if (columns[i].real) {
        columns.erase(columns.begin() + static_cast<std::ptrdiff_t>(i));
        --n;
      }
    }
  }
  // Turns the last n real tokens into pads; the columns stay.
  void PadLastTokens(int32_t n) {
    for (size_t i = columns.size(); n > 0 && i-- > 0;) {
      if (columns[i].real) {
        columns[i] = Column{};
        --n;
      }
    }
  }
  // The real tokens at positions lo..hi, in position order.
  std::vector<SeenItem> Tokens(int32_t lo, int32_t hi) const {
    std::vector<SeenItem> items;
    for (const Column& c : columns) {
      if (c.real && c.pos >= lo && c.pos <= hi) items.push_back(SeenItem{c.pos, c.id});
    }
    return items;
  }
};

using QueryKey = std::tuple<int, int, int32_t>;  // layer, row, position

// One named layout: its rows, its round, what its last change was and what
// its last forward saw.
struct LayoutState {
  std::vector<Row> rows;

  // Columns held per row, at most ever (a ring of capacity M is wrapped once
  // this exceeds M: precise rule 1), and before the last forward (a bypass
  // trim or an accept leaves it as if only the kept tokens were written).
  int64_t peak = 0;
  int64_t peak_before_forward = 0;
  // Whether the caches are the batched kinds (README "Cache kinds": built
  // batched for more than one row; a join gives the batched kinds, a filter
  // keeps them, an extract gives the single-row kinds).
  bool batched = false;

  // Speculative round (TRACE.md precise rule 4).
  bool armed = false;
  bool verified = false;               // the verify forward has run
  std::vector<int32_t> verify_real;    // real tokens per row of that forward

  // Whether the last change was a `window`, and its real tokens per row:
  // the bound of `trim N bypass` (precise rule 3).
  bool last_change_was_window = false;
  std::vector<int32_t> window_real;

  // The last forward (precise rule 6): every real query's visible set.
  bool has_last_forward = false;
  std::map<QueryKey, std::vector<SeenItem>> last_forward;

  std::vector<int32_t> Positions() const {
    std::vector<int32_t> p;
    for (const Row& r : rows) p.push_back(r.Count());
    return p;
  }
  // Columns per row (the batch is rectangular).
  int64_t Columns() const { return static_cast<int64_t>(rows[0].columns.size()); }
  // After dropping tokens of the last forward: as if never written.
  void PeakAsIfNotWritten() { peak = std::max(peak_before_forward, Columns()); }
};

// What one statement did.
struct Result {
  enum Kind { kDone, kRefused, kLimit, kUnsupported } kind = kDone;
  std::string reason;
  static Result Done() { return {}; }
  static Result Refused(std::string why) { return {kRefused, std::move(why)}; }
  static Result Limit(std::string why) { return {kLimit, std::move(why)}; }
  static Result Unsupported(std::string what) { return {kUnsupported, std::move(what)}; }
};

std::string ItemText(const SeenItem& item) {
  return item.pos == item.id ? std::to_string(item.pos)
                             : std::to_string(item.pos) + ":" + std::to_string(item.id);
}

class Model {
 public:
  explicit Model(const Program& program) : program_(program) {}

  ModelOutcome Run() {
    for (const LayerConfig& layer : program_.layers) {
      has_ssm_ = has_ssm_ || layer.kind == CacheKind::kSsm;
    }
    LayoutState main;
    main.rows.resize(static_cast<size_t>(program_.rows));
    main.batched = program_.rows > 1;
    layouts_["main"] = main;
    current_ = "main";
    for (const Statement& st : program_.body) {
      const Result r = Execute(st);
      switch (r.kind) {
        case Result::kDone:
          break;
        case Result::kUnsupported:
          outcome_.supported = false;
          outcome_.unsupported = r.reason;
          return outcome_;
        case Result::kRefused:
          outcome_.exit_status = std::max(outcome_.exit_status, 1);
          outcome_.stop_line = st.line;
          outcome_.stop_reason = r.reason;
          return outcome_;
        case Result::kLimit:
          outcome_.exit_status = 2;
          outcome_.stop_line = st.line;
          outcome_.stop_reason = r.reason;
          return outcome_;
      }
    }
    return outcome_;
  }

 private:
  LayoutState& Cur() { return layouts_[current_]; }
  int Rows() { return static_cast<int>(Cur().rows.size()); }

  static bool IsSsm(const LayerConfig& layer) { return layer.kind == CacheKind::kSsm; }

  // A ring whose columns ever exceeded its capacity (precise rule 1).
  static bool Wrapped(const LayerConfig& layer, const LayoutState& s) {
    return layer.kind == CacheKind::kRotating && s.peak > layer.capacity;
  }

  void Failed(const Statement& st) {
    outcome_.failed_lines.push_back(st.line);
    outcome_.exit_status = std::max(outcome_.exit_status, 1);
  }

  Result Execute(const Statement& st) {
    switch (st.op()) {
      case Op::kWindow:
        return Forward(st.Get<trace::WindowOp>(), false);
      case Op::kDecode:
        return Forward(st.Get<trace::DecodeOp>().AsWindow(), true);
      case Op::kTrim:
        return Trim(st.Get<trace::TrimOp>());
      case Op::kArm:
        return Arm();
      case Op::kAccept:
        return Accept(st.Get<trace::AcceptOp>());
      case Op::kFork: {
        const std::string& name = st.Get<trace::ForkOp>().name;
        if (layouts_.count(name)) return Result::Refused("fork onto an existing name");
        layouts_[name] = Cur();
        return Result::Done();
      }
      case Op::kUse: {
        const std::string& name = st.Get<trace::UseOp>().name;
        if (!layouts_.count(name)) return Result::Refused("use of an unknown name");
        current_ = name;
        return Result::Done();
      }
      case Op::kReload:
        // Through the codec and back: everything stays (round, columns,
        // peak, last forward), but it is a change (precise rule 3).
        Cur().last_change_was_window = false;
        Cur().window_real.clear();
        return Result::Done();
      case Op::kJoin:
        return Join(st.Get<trace::JoinOp>());
      case Op::kFilter:
        return Filter(st.Get<trace::FilterOp>());
      case Op::kExtract:
        return Extract(st.Get<trace::ExtractOp>());
      case Op::kExpectSees:
        return ExpectSees(st);
      case Op::kExpectOut:
        // TODO(model): attention outputs (TRACE.md "Values").
        return Result::Unsupported("expect out");
      case Op::kExpectPositions: {
        const std::vector<int32_t>& positions = st.Get<trace::ExpectPositions>().positions;
        if (positions.size() != static_cast<size_t>(Rows())) {
          return Result::Refused("expect positions: list length is not the row count");
        }
        if (positions != Cur().Positions()) Failed(st);
        return Result::Done();
      }
      case Op::kExpectError:
        return ExpectError(st);
      case Op::kExpectEqual:
        return ExpectEqual(st);
      case Op::kExpectTrimmable: {
        // A kv layer always is; a ring until it wraps; an ssm layer never.
        const trace::ExpectTrimmable& e = st.Get<trace::ExpectTrimmable>();
        const LayerConfig& layer = program_.layers[static_cast<size_t>(e.layer)];
        if (e.yes == (IsSsm(layer) || Wrapped(layer, Cur()))) Failed(st);
        return Result::Done();
      }
      case Op::kExpectKind: {
        const trace::ExpectKind& e = st.Get<trace::ExpectKind>();
        const std::string base =
            std::string(KindName(program_.layers[static_cast<size_t>(e.layer)].kind));
        if (e.kind_string != (Cur().batched ? "batched_" + base : base)) Failed(st);
        return Result::Done();
      }
      case Op::kExpectBytesPerToken: {
        // kv heads * (key dim + value dim) * sizeof(float); 0 for a
        // recurrent layer (its state does not grow).
        const trace::ExpectBytesPerToken& e = st.Get<trace::ExpectBytesPerToken>();
        const LayerConfig& d = program_.layers[static_cast<size_t>(e.layer)];
        if (e.bytes != (IsSsm(d) ? 0 : int64_t{d.heads} * 2 * d.dim * 4)) Failed(st);
        return Result::Done();
      }
    }
    return Result::Unsupported("an unknown statement");
  }

  // `window L ...` and `decode ...`.
  Result Forward(const trace::WindowOp& st, bool decode) {
    LayoutState& s = Cur();
    const int32_t L = decode ? 1 : st.columns;
    const size_t rows = static_cast<size_t>(Rows());

    if (s.armed && s.verified) return Result::Refused("a second forward while armed");
    std::vector<int32_t> left(rows, 0), right(rows, 0);
    if (st.has_left) {
      if (st.left.size() != rows) return Result::Refused("left= length is not the row count");
      left = st.left;
    }
    if (st.has_right) {
      if (st.right.size() != rows) return Result::Refused("right= length is not the row count");
      right = st.right;
    }
    std::vector<int32_t> real(rows);
    for (size_t r = 0; r < rows; ++r) {
      if (int64_t{left[r]} + right[r] > L) return Result::Refused("left + right > L");
      if (left[r] > 0 && s.rows[r].Count() > 0) {
        return Result::Refused("left padding on a row that holds tokens");
      }
      real[r] = L - left[r] - right[r];
    }
    if (st.has_ids) {
      if (st.ids.size() != rows) return Result::Refused("ids= groups are not the row count");
      for (size_t r = 0; r < rows; ++r) {
        if (st.ids[r].size() != static_cast<size_t>(real[r])) {
          return Result::Refused("ids= count is not the row's real count");
        }
      }
    }
    for (size_t r = 0; r < rows; ++r) {
      if (int64_t{s.rows[r].Count()} + real[r] > trace::kMaxTokensPerRow) {
        return Result::Limit("more than the tokens allowed per row");
      }
    }

    // Write the columns: left pads, real tokens, right pads.
    s.peak_before_forward = s.peak;
    for (size_t r = 0; r < rows; ++r) {
      Row& row = s.rows[r];
      const int32_t first = row.Count();
      for (int32_t i = 0; i < left[r]; ++i) row.columns.push_back(Column{});
      for (int32_t j = 0; j < real[r]; ++j) {
        const int32_t pos = first + j;
        const int32_t id = st.has_ids ? st.ids[r][static_cast<size_t>(j)] : pos;
        row.columns.push_back(Column{true, pos, id});
      }
      for (int32_t i = 0; i < right[r]; ++i) row.columns.push_back(Column{});
    }
    s.peak = std::max(s.peak, s.Columns());
    if (s.armed) {
      s.verified = true;
      s.verify_real = real;
    }
    s.last_change_was_window = !decode;
    s.window_real = decode ? std::vector<int32_t>{} : real;

    // What every real query saw: attention layers in header order, rows
    // ascending, positions ascending; then the recurrent layers' states.
    s.has_last_forward = true;
    s.last_forward.clear();
    for (size_t l = 0; l < program_.layers.size(); ++l) {
      const LayerConfig& layer = program_.layers[l];
      if (IsSsm(layer)) continue;
      for (size_t r = 0; r < rows; ++r) {
        const int32_t end = s.rows[r].Count();
        for (int32_t p = end - real[r]; p < end; ++p) {
          const int32_t lo = layer.window == 0 ? 0 : std::max(0, p - layer.window + 1);
          std::vector<SeenItem> seen = s.rows[r].Tokens(lo, p);
          std::string line = "sees " + layer.name + " r" + std::to_string(r) + " p" +
                             std::to_string(p) + ":";
          for (const SeenItem& item : seen) line += " " + ItemText(item);
          outcome_.out += line + "\n";
          s.last_forward[QueryKey{static_cast<int>(l), static_cast<int>(r), p}] =
              std::move(seen);
        }
      }
    }
    PrintStates();
    return Result::Done();
  }

  // `state LAYER rR` per recurrent layer and row of the current layout, after
  // every forward and accept; the hash is the runner's business.
  void PrintStates() {
    for (const LayerConfig& layer : program_.layers) {
      if (!IsSsm(layer)) continue;
      for (size_t r = 0; r < Cur().rows.size(); ++r) {
        outcome_.out += "state " + layer.name + " r" + std::to_string(r) + "\n";
      }
    }
  }

  // `trim N [bypass]` (precise rules 2 and 3).
  Result Trim(const trace::TrimOp& st) {
    LayoutState& s = Cur();
    const int32_t n = st.count;
    if (s.armed) return Result::Refused("trim while armed");
    if (has_ssm_) return Result::Refused("trim of a layout with an ssm layer");
    if (!st.bypass) {
      for (const LayerConfig& layer : program_.layers) {
        if (Wrapped(layer, s)) return Result::Refused("trim of a wrapped ring");
      }
    } else {
      if (!s.last_change_was_window) {
        return Result::Refused("trim bypass: the last change was not a window");
      }
      for (int32_t real : s.window_real) {
        if (real < n) return Result::Refused("trim bypass: a row's last window has fewer tokens");
      }
    }
    for (const Row& row : s.rows) {
      if (row.Count() < n) return Result::Refused("trim more than a row holds");
    }
    for (Row& row : s.rows) row.RemoveLastTokens(n);
    if (st.bypass) s.PeakAsIfNotWritten();
    s.last_change_was_window = false;
    s.window_real.clear();
    return Result::Done();
  }

  Result Arm() {
    LayoutState& s = Cur();
    if (s.armed) return Result::Refused("arm while armed");
    s.armed = true;
    s.verified = false;
    s.verify_real.clear();
    s.last_change_was_window = false;
    s.window_real.clear();
    return Result::Done();
  }

  // `accept K` or `accept K0,K1,..` (precise rule 4). Row r keeps K_r of
  // its verify tokens. A ragged accept removes the columns of the tokens
  // every row drops (the common minimum) and turns the other rows' further
  // rejected tips into pads, so the batch stays rectangular. A recurrent
  // row then holds the state of its kept tokens (rows are token lists here).
  Result Accept(const trace::AcceptOp& st) {
    LayoutState& s = Cur();
    const size_t rows = static_cast<size_t>(Rows());
    if (!s.armed) return Result::Refused("accept without arm");
    if (!s.verified) return Result::Refused("accept before the verify forward");
    if (st.keep.size() != 1 && st.keep.size() != rows) {
      return Result::Refused("accept list length is not 1 or the row count");
    }
    std::vector<int32_t> drop(rows);
    for (size_t r = 0; r < rows; ++r) {
      const int32_t keep = st.keep.size() == 1 ? st.keep[0] : st.keep[r];
      if (keep > s.verify_real[r]) return Result::Refused("accept more than the verify forward wrote");
      drop[r] = s.verify_real[r] - keep;
    }
    const int32_t common = *std::min_element(drop.begin(), drop.end());
    for (size_t r = 0; r < rows; ++r) {
      s.rows[r].RemoveLastTokens(common);
      s.rows[r].PadLastTokens(drop[r] - common);
    }
    s.PeakAsIfNotWritten();
    s.armed = false;
    s.verified = false;
    s.verify_real.clear();
    s.last_change_was_window = false;
    s.window_real.clear();
    PrintStates();
    return Result::Done();
  }

  // `join NAME` (precise rules 1, 4-6): NAME's rows follow the current
  // ones; the side with fewer columns is right-justified behind left pads.
  Result Join(const trace::JoinOp& st) {
    const auto it = layouts_.find(st.name);
    if (it == layouts_.end()) return Result::Refused("join of an unknown name");
    if (st.name == current_) return Result::Refused("join of a layout into itself");
    LayoutState& a = Cur();
    const LayoutState& b = it->second;
    if (a.armed || b.armed) return Result::Refused("join while a side is armed");
    if (a.rows.size() + b.rows.size() > static_cast<size_t>(trace::kMaxRows)) {
      return Result::Refused("join beyond the row limit");
    }
    const int64_t columns = std::max(a.Columns(), b.Columns());
    std::vector<Row> rows = a.rows;
    rows.insert(rows.end(), b.rows.begin(), b.rows.end());
    for (size_t r = 0; r < rows.size(); ++r) {
      const int64_t pads = columns - (r < a.rows.size() ? a.Columns() : b.Columns());
      rows[r].columns.insert(rows[r].columns.begin(), static_cast<size_t>(pads), Column{});
    }
    a.rows = std::move(rows);
    a.peak = std::max(a.peak, b.peak);
    a.batched = true;
    ChangedRows(&a);
    return Result::Done();
  }

  // `filter R0,R1,..`: a non-empty, strictly ascending list of rows.
  Result Filter(const trace::FilterOp& st) {
    LayoutState& s = Cur();
    if (s.armed) return Result::Refused("filter while armed");
    for (size_t i = 0; i < st.rows.size(); ++i) {
      if (st.rows[i] >= Rows()) return Result::Refused("filter of a row that does not exist");
      if (i > 0 && st.rows[i] <= st.rows[i - 1]) {
        return Result::Refused("filter rows not strictly ascending");
      }
    }
    if (st.rows.empty()) return Result::Refused("filter of no rows");
    std::vector<Row> rows;
    for (int32_t r : st.rows) rows.push_back(s.rows[static_cast<size_t>(r)]);
    s.rows = std::move(rows);
    ChangedRows(&s);
    return Result::Done();
  }

  // `extract R as NAME`: NAME is a new one-row layout that behaves as a
  // single-row cache fed only row R's tokens (precise rule 1): no pads, its
  // peak is its token count (README: an extracted ring row is trimmable
  // exactly like a fresh single-row ring), no round, no last forward. The
  // current layout does not change.
  Result Extract(const trace::ExtractOp& st) {
    if (layouts_.count(st.name)) return Result::Refused("extract onto an existing name");
    const LayoutState& s = Cur();
    if (s.armed) return Result::Refused("extract while armed");
    if (st.row >= Rows()) return Result::Refused("extract of a row that does not exist");
    LayoutState e;
    e.rows.emplace_back();
    for (const Column& c : s.rows[static_cast<size_t>(st.row)].columns) {
      if (c.real) e.rows[0].columns.push_back(c);
    }
    e.peak = e.peak_before_forward = e.Columns();
    e.batched = false;
    layouts_[st.name] = std::move(e);
    return Result::Done();
  }

  // After join or filter: no last forward, and a change (precise rules 3, 6).
  static void ChangedRows(LayoutState* s) {
    s->has_last_forward = false;
    s->last_forward.clear();
    s->last_change_was_window = false;
    s->window_real.clear();
  }

  Result ExpectSees(const Statement& st) {
    const trace::ExpectSees& e = st.Get<trace::ExpectSees>();
    const LayoutState& s = Cur();
    std::vector<SeenItem> want = e.items;
    std::sort(want.begin(), want.end());
    const auto it = s.last_forward.find(QueryKey{e.layer, e.row, e.pos});
    if (!s.has_last_forward || it == s.last_forward.end() || it->second != want) Failed(st);
    return Result::Done();
  }

  // `expect error OP`: OP must be refused. A refusal changes nothing in the
  // model; an OP that is not refused has run, and the expectation failed.
  Result ExpectError(const Statement& st) {
    const Result r = Execute(*st.Get<trace::ExpectError>().inner);
    switch (r.kind) {
      case Result::kRefused:
        return Result::Done();
      case Result::kDone:
        Failed(st);
        return Result::Done();
      case Result::kLimit:
      case Result::kUnsupported:
        return r;
    }
    return r;
  }

  // `expect equal NAME` (precise rule 9): rows, positions, every token of
  // a kv layer and the last min(count, window - 1) of a ring (a token's
  // bytes are a function of its layer, id and position), and the states of
  // an ssm layer's rows: equal for the same tokens; different when the
  // tokens differ in the last max(conv - 1, 2) positions; undecided when
  // only older tokens differ (model.h).
  Result ExpectEqual(const Statement& st) {
    const auto it = layouts_.find(st.Get<trace::ExpectEqual>().name);
    if (it == layouts_.end()) return Result::Refused("expect equal of an unknown name");
    const LayoutState& a = Cur();
    const LayoutState& b = it->second;
    bool same = a.rows.size() == b.rows.size() && a.Positions() == b.Positions();
    bool undecided = false;
    for (size_t r = 0; same && r < a.rows.size(); ++r) {
      const int32_t count = a.rows[r].Count();
      for (const LayerConfig& layer : program_.layers) {
        if (IsSsm(layer)) {
          const std::vector<SeenItem> ta = a.rows[r].Tokens(0, INT32_MAX);
          const std::vector<SeenItem> tb = b.rows[r].Tokens(0, INT32_MAX);
          if (ta == tb) continue;
          // Same positions: the same count; the ids differ somewhere.
          size_t last = ta.size();
          while (last-- > 0 && ta[last] == tb[last]) {
          }
          const int64_t newer = static_cast<int64_t>(ta.size()) - 1 - static_cast<int64_t>(last);
          if (newer < std::max<int64_t>(layer.conv - 1, 2)) {
            same = false;
          } else {
            undecided = true;
          }
          continue;
        }
        const int32_t from = layer.kind == CacheKind::kRotating
                                 ? count - std::min(count, layer.window - 1)
                                 : 0;
        same = same && a.rows[r].Tokens(from, INT32_MAX) == b.rows[r].Tokens(from, INT32_MAX);
      }
    }
    if (!same) {
      Failed(st);
    } else if (undecided) {
      outcome_.undecided_lines.push_back(st.line);
    }
    return Result::Done();
  }

  const Program& program_;
  std::map<std::string, LayoutState> layouts_;
  std::string current_;
  ModelOutcome outcome_;
  bool has_ssm_ = false;  // the layouts hold a recurrent layer
};

}  // namespace

ModelOutcome RunModel(const Program& program) { return Model(program).Run(); }

}  // namespace kvspec::fuzz

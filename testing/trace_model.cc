// The trace model: TRACE.md's rules for kv, ring and ssm layers, as plainly
// as possible. Every operation first decides whether it is refused, from the
// rules alone, and only then changes anything, so a refusal never changes
// the model.
#include "kvspec/testing/trace_model.h"

#include <algorithm>
#include <cstdlib>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvspec::testing {
namespace {

using trace::Op;
using trace::Program;
using trace::SeenItem;
using trace::Statement;

std::string ItemText(const SeenItem& item) {
  return item.pos == item.id ? std::to_string(item.pos)
                             : std::to_string(item.pos) + ":" + std::to_string(item.id);
}

bool IsSsm(const LayerConfig& layer) { return layer.kind == CacheKind::kSsm; }

}  // namespace

int32_t TraceModel::Row::Count() const {
  int32_t n = 0;
  for (const Column& c : columns) n += c.real ? 1 : 0;
  return n;
}

void TraceModel::Row::RemoveLastTokens(int32_t n) {
  for (size_t i = columns.size(); n > 0 && i-- > 0;) {
    if (columns[i].real) {
      columns.erase(columns.begin() + static_cast<std::ptrdiff_t>(i));
      --n;
    }
  }
}

void TraceModel::Row::PadLastTokens(int32_t n) {
  for (size_t i = columns.size(); n > 0 && i-- > 0;) {
    if (columns[i].real) {
      columns[i] = Column{};
      --n;
    }
  }
}

std::vector<SeenItem> TraceModel::Row::Tokens(int32_t lo, int32_t hi) const {
  std::vector<SeenItem> items;
  const int64_t span = std::max<int64_t>(0, int64_t{hi} - lo + 1);
  items.reserve(std::min(columns.size(), static_cast<size_t>(span)));
  for (const Column& c : columns) {
    if (c.real && c.pos >= lo && c.pos <= hi) items.push_back(SeenItem{c.pos, c.id});
  }
  return items;
}

std::vector<int32_t> TraceModel::LayoutState::Positions() const {
  std::vector<int32_t> p;
  for (const Row& r : rows) p.push_back(r.Count());
  return p;
}

void TraceModel::LayoutState::PeakAsIfNotWritten() {
  peak = std::max(peak_before_forward, Columns());
}

void TraceModel::LayoutState::ChangedRows() {
  has_last_forward = false;
  forward_first.clear();
  forward_real.clear();
  last_forward.clear();
  last_change_was_window = false;
  window_real.clear();
}

TraceModel::TraceModel(int rows, std::vector<LayerConfig> layers, bool print)
    : layers_(std::move(layers)), print_(print) {
  for (const LayerConfig& layer : layers_) has_ssm_ = has_ssm_ || IsSsm(layer);
  LayoutState main;
  main.rows.resize(static_cast<size_t>(rows));
  main.batched = rows > 1;
  layouts_["main"] = main;
  current_ = "main";
}

StepResult TraceModel::Apply(const Statement& st) {
  const StepResult r = Execute(st);
  CheckInvariants();
  switch (r.kind) {
    case StepResult::kDone:
      break;
    case StepResult::kUnsupported:
      outcome_.supported = false;
      outcome_.unsupported = r.reason;
      break;
    case StepResult::kRefused:
      outcome_.exit_status = std::max(outcome_.exit_status, 1);
      outcome_.stop_line = st.line;
      outcome_.stop_reason = r.reason;
      break;
    case StepResult::kLimit:
      outcome_.exit_status = 2;
      outcome_.stop_line = st.line;
      outcome_.stop_reason = r.reason;
      break;
  }
  return r;
}

bool TraceModel::Refuses(const Statement& st) const {
  TraceModel copy = *this;
  return copy.Execute(st).refused();
}

TraceModel::LayoutState& TraceModel::Cur() { return layouts_.at(current_); }
const TraceModel::LayoutState& TraceModel::Cur() const { return layouts_.at(current_); }

int TraceModel::rows() const { return static_cast<int>(Cur().rows.size()); }
std::vector<int32_t> TraceModel::Positions() const { return Cur().Positions(); }
std::vector<SeenItem> TraceModel::Tokens(int row) const {
  return Cur().rows[static_cast<size_t>(row)].Tokens(0, INT32_MAX);
}
bool TraceModel::Trimmable(int layer) const {
  const LayerConfig& config = layers_[static_cast<size_t>(layer)];
  return !IsSsm(config) && !Wrapped(config, Cur());
}
std::string TraceModel::KindString(int layer) const {
  return std::string(kvspec::KindString(layers_[static_cast<size_t>(layer)].kind, Cur().batched));
}
bool TraceModel::armed() const { return Cur().armed; }
bool TraceModel::verified() const { return Cur().verified; }
const std::vector<int32_t>& TraceModel::VerifyReal() const { return Cur().verify_real; }
bool TraceModel::has_last_forward() const { return Cur().has_last_forward; }
const std::vector<int32_t>& TraceModel::LastForwardFirst() const { return Cur().forward_first; }
const std::vector<int32_t>& TraceModel::LastForwardReal() const { return Cur().forward_real; }
const std::vector<SeenItem>* TraceModel::Sees(int layer, int row, int32_t pos) const {
  const LayoutState& s = Cur();
  const auto it = s.last_forward.find(QueryKey{layer, row, pos});
  return s.has_last_forward && it != s.last_forward.end() ? &it->second : nullptr;
}

void TraceModel::CheckInvariants() const {
  const auto check = [](bool ok) {
    if (!ok) std::abort();
  };
  check(layouts_.count(current_) == 1);
  for (const auto& [name, s] : layouts_) {
    check(!s.rows.empty());
    for (const Row& row : s.rows) {
      check(static_cast<int64_t>(row.columns.size()) == s.Columns());
      int32_t next = 0;
      for (const Column& c : row.columns) {
        if (c.real) check(c.pos == next++);
      }
    }
    check(!s.verified || s.armed);
    check(s.peak >= s.Columns());
  }
}

// A ring whose columns ever exceeded its capacity (precise rule 1).
bool TraceModel::Wrapped(const LayerConfig& layer, const LayoutState& s) const {
  return layer.kind == CacheKind::kRotating && s.peak > layer.RingCapacity();
}

void TraceModel::Failed(const Statement& st) {
  outcome_.failed_lines.push_back(st.line);
  outcome_.exit_status = std::max(outcome_.exit_status, 1);
}

StepResult TraceModel::Execute(const Statement& st) {
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
      if (layouts_.count(name)) return StepResult::Refused("fork onto an existing name");
      layouts_[name] = Cur();
      return StepResult::Done();
    }
    case Op::kUse: {
      const std::string& name = st.Get<trace::UseOp>().name;
      if (!layouts_.count(name)) return StepResult::Refused("use of an unknown name");
      current_ = name;
      return StepResult::Done();
    }
    case Op::kReload:
      // Through the codec and back: everything stays (round, columns,
      // peak, last forward), but it is a change (precise rule 3).
      Cur().last_change_was_window = false;
      Cur().window_real.clear();
      return StepResult::Done();
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
      return StepResult::Unsupported("expect out");
    case Op::kExpectPositions: {
      const std::vector<int32_t>& positions = st.Get<trace::ExpectPositions>().positions;
      if (positions.size() != static_cast<size_t>(rows())) {
        return StepResult::Refused("expect positions: list length is not the row count");
      }
      if (positions != Cur().Positions()) Failed(st);
      return StepResult::Done();
    }
    case Op::kExpectError:
      return ExpectError(st);
    case Op::kExpectEqual:
      return ExpectEqual(st);
    case Op::kExpectTrimmable: {
      const trace::ExpectTrimmable& e = st.Get<trace::ExpectTrimmable>();
      if (e.yes != Trimmable(e.layer)) Failed(st);
      return StepResult::Done();
    }
    case Op::kExpectKind: {
      const trace::ExpectKind& e = st.Get<trace::ExpectKind>();
      if (e.kind_string != KindString(e.layer)) Failed(st);
      return StepResult::Done();
    }
    case Op::kExpectBytesPerToken: {
      // kv heads * (a stored key row + a stored value row); 0 for a
      // recurrent layer (its state does not grow).
      const trace::ExpectBytesPerToken& e = st.Get<trace::ExpectBytesPerToken>();
      const LayerConfig& d = layers_[static_cast<size_t>(e.layer)];
      const int64_t row = static_cast<int64_t>(KvRowBytes(d.kv, d.dim));
      if (e.bytes != (IsSsm(d) ? 0 : int64_t{d.heads} * 2 * row)) Failed(st);
      return StepResult::Done();
    }
  }
  return StepResult::Unsupported("an unknown statement");
}

// `window L ...` and `decode ...`.
StepResult TraceModel::Forward(const trace::WindowOp& st, bool decode) {
  LayoutState& s = Cur();
  const int32_t L = decode ? 1 : st.columns;
  const size_t rows = s.rows.size();

  if (s.armed && s.verified) return StepResult::Refused("a second forward while armed");
  std::vector<int32_t> left(rows, 0), right(rows, 0);
  if (st.has_left) {
    if (st.left.size() != rows) return StepResult::Refused("left= length is not the row count");
    left = st.left;
  }
  if (st.has_right) {
    if (st.right.size() != rows) return StepResult::Refused("right= length is not the row count");
    right = st.right;
  }
  std::vector<int32_t> real(rows);
  for (size_t r = 0; r < rows; ++r) {
    if (int64_t{left[r]} + right[r] > L) return StepResult::Refused("left + right > L");
    if (left[r] > 0 && s.rows[r].Count() > 0) {
      return StepResult::Refused("left padding on a row that holds tokens");
    }
    real[r] = L - left[r] - right[r];
  }
  if (st.has_ids) {
    if (st.ids.size() != rows) return StepResult::Refused("ids= groups are not the row count");
    for (size_t r = 0; r < rows; ++r) {
      if (st.ids[r].size() != static_cast<size_t>(real[r])) {
        return StepResult::Refused("ids= count is not the row's real count");
      }
    }
  }
  for (size_t r = 0; r < rows; ++r) {
    if (int64_t{s.rows[r].Count()} + real[r] > trace::kMaxTokensPerRow) {
      return StepResult::Limit("more than the tokens allowed per row");
    }
  }

  // Write the columns: left pads, real tokens, right pads.
  s.peak_before_forward = s.peak;
  s.forward_first = s.Positions();
  s.forward_real = real;
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
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerConfig& layer = layers_[l];
    if (IsSsm(layer)) continue;
    for (size_t r = 0; r < rows; ++r) {
      const int32_t end = s.rows[r].Count();
      for (int32_t p = end - real[r]; p < end; ++p) {
        const int32_t lo = layer.window == 0 ? 0 : std::max(0, p - layer.window + 1);
        std::vector<SeenItem> seen = s.rows[r].Tokens(lo, p);
        if (print_) {  // appended in place: no temporaries per item
          std::string& out = outcome_.out;
          out += "sees ";
          out += layer.name;
          out += " r";
          out += std::to_string(r);
          out += " p";
          out += std::to_string(p);
          out += ':';
          for (const SeenItem& item : seen) {
            out += ' ';
            out += ItemText(item);
          }
          out += '\n';
        }
        s.last_forward[QueryKey{static_cast<int>(l), static_cast<int>(r), p}] =
            std::move(seen);
      }
    }
  }
  PrintStates();
  return StepResult::Done();
}

// `state LAYER rR` per recurrent layer and row of the current layout, after
// every forward and accept; the hash is the runner's business.
void TraceModel::PrintStates() {
  if (!print_) return;
  for (const LayerConfig& layer : layers_) {
    if (!IsSsm(layer)) continue;
    for (size_t r = 0; r < Cur().rows.size(); ++r) {
      outcome_.out += "state " + layer.name + " r" + std::to_string(r) + "\n";
    }
  }
}

// `trim N [bypass]` (precise rules 2 and 3).
StepResult TraceModel::Trim(const trace::TrimOp& st) {
  LayoutState& s = Cur();
  const int32_t n = st.count;
  if (s.armed) return StepResult::Refused("trim while armed");
  if (has_ssm_) return StepResult::Refused("trim of a layout with an ssm layer");
  if (!st.bypass) {
    for (const LayerConfig& layer : layers_) {
      if (Wrapped(layer, s)) return StepResult::Refused("trim of a wrapped ring");
    }
  } else {
    if (!s.last_change_was_window) {
      return StepResult::Refused("trim bypass: the last change was not a window");
    }
    for (int32_t real : s.window_real) {
      if (real < n) return StepResult::Refused("trim bypass: a row's last window has fewer tokens");
    }
  }
  for (const Row& row : s.rows) {
    if (row.Count() < n) return StepResult::Refused("trim more than a row holds");
  }
  for (Row& row : s.rows) row.RemoveLastTokens(n);
  if (st.bypass) s.PeakAsIfNotWritten();
  s.last_change_was_window = false;
  s.window_real.clear();
  return StepResult::Done();
}

StepResult TraceModel::Arm() {
  LayoutState& s = Cur();
  if (s.armed) return StepResult::Refused("arm while armed");
  s.armed = true;
  s.verified = false;
  s.verify_real.clear();
  s.last_change_was_window = false;
  s.window_real.clear();
  return StepResult::Done();
}

// `accept K` or `accept K0,K1,..` (precise rule 4). Row r keeps K_r of
// its verify tokens. A ragged accept removes the columns of the tokens
// every row drops (the common minimum) and turns the other rows' further
// rejected tips into pads, so the batch stays rectangular. A recurrent
// row then holds the state of its kept tokens (rows are token lists here).
StepResult TraceModel::Accept(const trace::AcceptOp& st) {
  LayoutState& s = Cur();
  const size_t rows = s.rows.size();
  if (!s.armed) return StepResult::Refused("accept without arm");
  if (!s.verified) return StepResult::Refused("accept before the verify forward");
  if (st.keep.size() != 1 && st.keep.size() != rows) {
    return StepResult::Refused("accept list length is not 1 or the row count");
  }
  std::vector<int32_t> drop(rows);
  for (size_t r = 0; r < rows; ++r) {
    const int32_t keep = st.keep.size() == 1 ? st.keep[0] : st.keep[r];
    if (keep > s.verify_real[r]) return StepResult::Refused("accept more than the verify forward wrote");
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
  return StepResult::Done();
}

// `join NAME` (precise rules 1, 4-6): NAME's rows follow the current
// ones; the side with fewer columns is right-justified behind left pads.
StepResult TraceModel::Join(const trace::JoinOp& st) {
  const auto it = layouts_.find(st.name);
  if (it == layouts_.end()) return StepResult::Refused("join of an unknown name");
  if (st.name == current_) return StepResult::Refused("join of a layout into itself");
  LayoutState& a = Cur();
  const LayoutState& b = it->second;
  if (a.armed || b.armed) return StepResult::Refused("join while a side is armed");
  if (a.rows.size() + b.rows.size() > static_cast<size_t>(trace::kMaxRows)) {
    return StepResult::Refused("join beyond the row limit");
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
  a.ChangedRows();
  return StepResult::Done();
}

// `filter R0,R1,..`: a non-empty, strictly ascending list of rows.
StepResult TraceModel::Filter(const trace::FilterOp& st) {
  LayoutState& s = Cur();
  if (s.armed) return StepResult::Refused("filter while armed");
  for (size_t i = 0; i < st.rows.size(); ++i) {
    if (st.rows[i] >= rows()) return StepResult::Refused("filter of a row that does not exist");
    if (i > 0 && st.rows[i] <= st.rows[i - 1]) {
      return StepResult::Refused("filter rows not strictly ascending");
    }
  }
  if (st.rows.empty()) return StepResult::Refused("filter of no rows");
  std::vector<Row> rows;
  for (int32_t r : st.rows) rows.push_back(s.rows[static_cast<size_t>(r)]);
  s.rows = std::move(rows);
  s.ChangedRows();
  return StepResult::Done();
}

// `extract R as NAME`: NAME is a new one-row layout that behaves as a
// single-row cache fed only row R's tokens (precise rule 1): no pads, its
// peak is its token count (docs/trace-runner.md: an extracted ring row is trimmable
// exactly like a fresh single-row ring), no round, no last forward. The
// current layout does not change.
StepResult TraceModel::Extract(const trace::ExtractOp& st) {
  if (layouts_.count(st.name)) return StepResult::Refused("extract onto an existing name");
  const LayoutState& s = Cur();
  if (s.armed) return StepResult::Refused("extract while armed");
  if (st.row >= rows()) return StepResult::Refused("extract of a row that does not exist");
  LayoutState e;
  e.rows.emplace_back();
  for (const Column& c : s.rows[static_cast<size_t>(st.row)].columns) {
    if (c.real) e.rows[0].columns.push_back(c);
  }
  e.peak = e.peak_before_forward = e.Columns();
  e.batched = false;
  layouts_[st.name] = std::move(e);
  return StepResult::Done();
}

StepResult TraceModel::ExpectSees(const Statement& st) {
  const trace::ExpectSees& e = st.Get<trace::ExpectSees>();
  const LayoutState& s = Cur();
  std::vector<SeenItem> want = e.items;
  std::sort(want.begin(), want.end());
  const auto it = s.last_forward.find(QueryKey{e.layer, e.row, e.pos});
  if (!s.has_last_forward || it == s.last_forward.end() || it->second != want) Failed(st);
  return StepResult::Done();
}

// `expect error OP`: OP must be refused. A refusal changes nothing in the
// model; an OP that is not refused has run, and the expectation failed.
StepResult TraceModel::ExpectError(const Statement& st) {
  const StepResult r = Execute(*st.Get<trace::ExpectError>().inner);
  switch (r.kind) {
    case StepResult::kRefused:
      return StepResult::Done();
    case StepResult::kDone:
      Failed(st);
      return StepResult::Done();
    case StepResult::kLimit:
    case StepResult::kUnsupported:
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
StepResult TraceModel::ExpectEqual(const Statement& st) {
  const auto it = layouts_.find(st.Get<trace::ExpectEqual>().name);
  if (it == layouts_.end()) return StepResult::Refused("expect equal of an unknown name");
  const LayoutState& a = Cur();
  const LayoutState& b = it->second;
  bool same = a.rows.size() == b.rows.size() && a.Positions() == b.Positions();
  bool undecided = false;
  for (size_t r = 0; same && r < a.rows.size(); ++r) {
    const int32_t count = a.rows[r].Count();
    for (const LayerConfig& layer : layers_) {
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
  return StepResult::Done();
}

ModelOutcome RunModel(const Program& program) {
  TraceModel model(program);
  for (const Statement& st : program.body) {
    if (!model.Apply(st).done()) break;
  }
  return model.outcome();
}

}  // namespace kvspec::testing

// An independent model of the trace semantics (docs/TRACE.md): what
// `kvspec trace` must print on standard output and which status it must
// return, computed from the rules alone.
//
// The model shares nothing with the core but the parsed Program: no caches,
// masks, kernels or content hashes. A layout is a list of rows, a row a list
// of columns (padding, or a real token with its position and id), and a
// query sees the real tokens of its row whose positions lie in its window.
// fuzz_layout_ops runs the model and the real runner on the same program
// and traps on any difference; the stateful properties (layout_props,
// ring_props) drive it one statement at a time through TraceModel and
// check the caches against its refusals, visible sets, positions,
// trimmability and kinds; the double-precision oracle
// (testing/values_oracle.h) takes from it which tokens each query sees.
//
// Coverage: `kv`, `rotating` and `ssm` layers (a ring sees what a kv layer
// of its window sees; its capacity only decides when it wraps and stops
// being trimmable), every operation, and every expectation but `expect out`.
// Where TRACE.md leaves room the model follows docs/trace-runner.md (kinds
// after join, filter and extract; an extracted ring row).
//
// Recurrent layers: the model cannot compute fp32 states, but it knows when
// `state` lines are printed (after every window, decode and accept, per ssm
// layer and row: it prints them without the hash; Compare drops the
// runner's hash), that a layout with an ssm layer refuses every trim, and
// what `expect equal` says of ssm rows: DESIGN.md makes a row's conv and
// recurrent state a function of its real tokens only (identical arithmetic
// per token whatever the window length, batch, padding or position, and a
// rollback replays the kept tokens bit-exactly), so rows with the same
// tokens must compare equal. Rows whose tokens differ in the last
// max(conv - 1, 2) positions differ for sure (the conv state holds the
// raw inputs, and the newest token's contribution is not decayed yet);
// an older difference may have decayed below fp32 resolution, so the model
// leaves that expectation undecided.
//
// A program that reaches `expect out` is reported as not supported, and
// nothing else in the outcome means anything then; callers skip the
// comparison (fuzz_trace_parse compares Highway with the scalar reference
// kernels instead). It has one place in trace_model.cc to grow into.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kvspec/base/layer_config.h"
#include "kvspec/trace/program.h"

namespace kvspec::testing {

struct ModelOutcome {
  // False when the run reached something the model does not cover.
  bool supported = true;
  std::string unsupported;  // what it was, when !supported

  // Standard output: the `sees LAYER rR pP: ITEMS` lines of every forward
  // and the `state LAYER rR` lines (without the hash) of every forward and
  // accept, each ending in '\n'.
  std::string out;
  // 0 all expectations met, 1 a refusal or a failed expectation, 2 a limit.
  int exit_status = 0;
  // The line of the refusal (or limit) that stopped the run; 0: none.
  int stop_line = 0;
  std::string stop_reason;  // the model's wording, for reports
  // Lines of failed expectations, in the order they failed.
  std::vector<int> failed_lines;
  // Lines of `expect equal` whose outcome the model cannot decide (ssm rows
  // that differ only in old tokens): the runner may fail them or not; the
  // exit status above counts them as met.
  std::vector<int> undecided_lines;
};

// What one statement did on the model.
struct StepResult {
  enum Kind { kDone, kRefused, kLimit, kUnsupported } kind = kDone;
  std::string reason;  // kRefused, kLimit: the model's wording; kUnsupported: what
  static StepResult Done() { return {}; }
  static StepResult Refused(std::string why) { return {kRefused, std::move(why)}; }
  static StepResult Limit(std::string why) { return {kLimit, std::move(why)}; }
  static StepResult Unsupported(std::string what) { return {kUnsupported, std::move(what)}; }
  bool done() const { return kind == kDone; }
  bool refused() const { return kind == kRefused; }
};

// The model's state after any prefix of a program, for callers that run
// one statement at a time and ask what the rules say in between.
//
// Invariants (CheckInvariants): the current layout exists; every layout
// has at least one row and all its rows the same number of columns
// (rectangular batch); a row's real tokens have positions 0, 1, .. in
// column order; a verified round is armed; the column peak is at least the
// columns held.
class TraceModel {
 public:
  // `print`: whether Apply appends the `sees` and `state` lines to
  // outcome().out (RunModel); callers that only query the state turn it
  // off, so that copies of the model stay small.
  TraceModel(int rows, std::vector<LayerConfig> layers, bool print = true);
  explicit TraceModel(const trace::Program& program, bool print = true)
      : TraceModel(program.rows, program.layers, print) {}

  // Runs one statement. A refused (or limited, or unsupported) statement
  // changes nothing; a failed expectation is counted in outcome().
  StepResult Apply(const trace::Statement& st);
  // Whether Apply(st) would refuse it (the model stays as it is).
  bool Refuses(const trace::Statement& st) const;

  // The current layout.
  int rows() const;
  const std::vector<LayerConfig>& layers() const { return layers_; }
  // Every row's next position (= its real tokens).
  std::vector<int32_t> Positions() const;
  // Row r's real tokens (position, id) in position order (positions 0..n-1).
  std::vector<trace::SeenItem> Tokens(int row) const;
  // isTrimmable() of layer l: a kv layer always, a ring until it wrapped,
  // an ssm layer never.
  bool Trimmable(int layer) const;
  // The kind string of layer l's cache (docs/trace-runner.md, "Cache kinds").
  std::string KindString(int layer) const;
  bool armed() const;
  bool verified() const;                    // the round's verify forward ran
  const std::vector<int32_t>& VerifyReal() const;  // its real tokens per row

  // The last forward of the current layout (none after join or filter).
  bool has_last_forward() const;
  // Per row: the first position it wrote and its real tokens.
  const std::vector<int32_t>& LastForwardFirst() const;
  const std::vector<int32_t>& LastForwardReal() const;
  // What the real query of attention layer `layer`, row `row` at `pos` of
  // the last forward saw, ascending positions; null when there was none.
  const std::vector<trace::SeenItem>* Sees(int layer, int row, int32_t pos) const;

  // What the statements applied so far printed and which expectations failed.
  const ModelOutcome& outcome() const { return outcome_; }

  // Aborts when an invariant of the class comment does not hold.
  void CheckInvariants() const;

 private:
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
    int32_t Count() const;
    // Removes the last n real tokens with their columns; pads stay.
    void RemoveLastTokens(int32_t n);
    // Turns the last n real tokens into pads; the columns stay.
    void PadLastTokens(int32_t n);
    // The real tokens at positions lo..hi, in position order.
    std::vector<trace::SeenItem> Tokens(int32_t lo, int32_t hi) const;
  };

  using QueryKey = std::tuple<int, int, int32_t>;  // layer, row, position

  // One named layout: its rows, its round, what its last change was and what
  // its last forward saw.
  struct LayoutState {
    std::vector<Row> rows;

    // Columns held per row, at most ever (a ring of capacity M is wrapped
    // once this exceeds M: precise rule 1), and before the last forward (a
    // bypass trim or an accept leaves it as if only the kept tokens were
    // written).
    int64_t peak = 0;
    int64_t peak_before_forward = 0;
    // Whether the caches are the batched kinds (docs/trace-runner.md, "Cache kinds": built
    // batched for more than one row; a join gives the batched kinds, a
    // filter keeps them, an extract gives the single-row kinds).
    bool batched = false;

    // Speculative round (TRACE.md precise rule 4).
    bool armed = false;
    bool verified = false;             // the verify forward has run
    std::vector<int32_t> verify_real;  // real tokens per row of that forward

    // Whether the last change was a `window`, and its real tokens per row:
    // the bound of `trim N bypass` (precise rule 3).
    bool last_change_was_window = false;
    std::vector<int32_t> window_real;

    // The last forward (precise rule 6): where each row started, its real
    // tokens and every real query's visible set.
    bool has_last_forward = false;
    std::vector<int32_t> forward_first, forward_real;
    std::map<QueryKey, std::vector<trace::SeenItem>> last_forward;

    std::vector<int32_t> Positions() const;
    // Columns per row (the batch is rectangular).
    int64_t Columns() const { return static_cast<int64_t>(rows[0].columns.size()); }
    // After dropping tokens of the last forward: as if never written.
    void PeakAsIfNotWritten();
    // After join or filter: no last forward, and a change (precise rules 3, 6).
    void ChangedRows();
  };

  LayoutState& Cur();
  const LayoutState& Cur() const;
  bool Wrapped(const LayerConfig& layer, const LayoutState& s) const;
  void Failed(const trace::Statement& st);
  StepResult Execute(const trace::Statement& st);
  StepResult Forward(const trace::WindowOp& st, bool decode);
  void PrintStates();
  StepResult Trim(const trace::TrimOp& st);
  StepResult Arm();
  StepResult Accept(const trace::AcceptOp& st);
  StepResult Join(const trace::JoinOp& st);
  StepResult Filter(const trace::FilterOp& st);
  StepResult Extract(const trace::ExtractOp& st);
  StepResult ExpectSees(const trace::Statement& st);
  StepResult ExpectError(const trace::Statement& st);
  StepResult ExpectEqual(const trace::Statement& st);

  std::vector<LayerConfig> layers_;
  bool print_ = true;
  bool has_ssm_ = false;  // the layouts hold a recurrent layer
  std::map<std::string, LayoutState> layouts_;
  std::string current_;
  ModelOutcome outcome_;
};

// Runs `program` on the model. Deterministic; memory and time are linear in
// the tokens the program writes.
ModelOutcome RunModel(const trace::Program& program);

}  // namespace kvspec::testing

// The runner of runner/runner.h, shared by its files (not a public header):
//   runner.cc          setup, the statement dispatch, trim / arm / accept and
//                      the public entry points;
//   runner_layouts.cc  names and budgets: fork, use, join, filter, extract,
//                      reload and the memory budget;
//   runner_forward.cc  forwards and read-back: running `window` / `decode`
//                      and recovering what each query saw from the bytes;
//   runner_budget.cc   the memory and work budgets;
//   runner_expect.cc   expectations;
//   runner_emit.cc     `sees` / `out` / `state` lines and --emit.
// Token contents are trace/values.h's; tags are content_index.cc's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kvspec/core/layout.h"
#include "kvspec/trace/program.h"
#include "kvspec/runner/runner.h"

namespace kvspec::trace::runner_internal {

using QueryKey = std::tuple<int, int, int32_t>;  // layer, row, pos

// What every query of a layout's last forward saw and computed.
struct LastForward {
  bool valid = false;
  std::map<QueryKey, std::vector<Tag>> sees;
  std::map<QueryKey, std::vector<float>> outs;
  // What `outs` would hold when no `expect out` reads them and they are not
  // kept (Runner::keep_outs_): the memory budget counts them all the same
  // (runner_budget.cc), so a run stops at the same limit either way.
  uint64_t unkept_out_bytes = 0;
};

struct NamedLayout {
  std::unique_ptr<Layout> layout;
  LastForward last;
};

// The outcome of one statement.
struct Outcome {
  int code = 0;  // 0 done, 1 refused, 2 limit exceeded
  std::string message;
  static Outcome Refused(std::string m) { return {1, std::move(m)}; }
  static Outcome Limit(std::string m) { return {2, std::move(m)}; }
};

// Inputs and outputs of one forward, per layer: q/k/v/o of an attention
// layer ([rows][L][heads][dim]) or x/gate/beta/o of a recurrent one.
struct ForwardBuffers {
  std::vector<std::vector<float>> q, k, v, o, x, gate, beta;
  std::vector<AttentionIO> io;
};

// The lines a forward prints, in order, each ended by '\n': the `sees`
// lines, then the `out` lines (one string each, not one per line: this runs
// for every query).
struct ForwardLines {
  std::string sees, outs;
};

// "%.9g" of v: what `out` lines print.
std::string FormatValue(float v);
// Appends FormatValue(v) to *s.
void AppendValue(std::string* s, float v);
// " t0 t1 ..": each tag preceded by a blank.
std::string JoinTags(const std::vector<Tag>& tags);
// Appends JoinTags(tags) to *s.
void AppendTags(std::string* s, const std::vector<Tag>& tags);
// Appends the decimal digits of v to *s (as std::to_string).
void AppendInt(std::string* s, int32_t v);
std::string JoinInts(const std::vector<int32_t>& v, char sep = ',');

// Runs one program statement by statement against the real core. Layouts
// are kept by name ("main" first); `current_` names the one statements
// act on. Output is printed as it is produced, or collected for --emit.
//
// Invariants, once the header's layout exists (checked after every
// statement in builds without NDEBUG):
// - `current_` names a layout of `layouts_`, and every layout is non-null,
//   has the header's layers and 1..kMaxRows rows;
// - conv_weights_ has one entry per layer, [K][C] floats for an ssm layer
//   and none for an attention layer; packed_conv_weights_ holds the same
//   weights packed (PackConvWeights);
// - status_ is 0, 1 or 2, and top_level_ is true between statements.
class Runner {
 public:
  Runner(const Program& program, const RunOptions& options, std::ostream& out,
         std::ostream& err);
  int Run();
  Status CheckInvariants() const;

 private:
  // runner/self_check_test.cc runs statements one at a time and
  // injects a faulty cache into a layout.
  friend struct RunnerTestAccess;

  Layout& Cur() { return *layouts_[current_].layout; }
  LastForward& Last() { return layouts_[current_].last; }

  // runner.cc
  Outcome Execute(const Statement& st);
  Outcome Trim(const Statement& st, const TrimOp& trim);
  Outcome Arm();
  Outcome Accept(const Statement& st, const AcceptOp& accept);

  // runner_layouts.cc
  Outcome Fork(const ForkOp& fork);
  Outcome Use(const UseOp& use);
  Outcome Join(const JoinOp& join);
  Outcome Filter(const FilterOp& filter);
  Outcome Extract(const ExtractOp& extract);
  Outcome Reload(const Statement& st);

  // runner_budget.cc
  // Whether `more` bytes on top of everything held fit the memory budget.
  Outcome Budget(uint64_t more, const char* what) const;
  // Whether Layout::Create's storage fits; *line: the layer line to blame.
  Outcome CreateBudget(int* line) const;
  Outcome ForwardBudget(const ForwardColumns& cols);
  // Every layout's storage and last forward, and the content index.
  uint64_t HeldBytes() const;
  Outcome MemoryLimit(uint64_t needed, const std::string& what) const;

  // runner_forward.cc
  Outcome Forward(const Statement& st, const WindowOp& w, bool decode);
  Outcome PlanColumns(const WindowOp& w, bool decode, ForwardColumns* cols);
  Outcome TokenIds(const WindowOp& w, const ForwardColumns& cols,
                   const std::vector<int32_t>& before,
                   std::vector<std::vector<int32_t>>* ids);
  void FillInputs(const ForwardColumns& cols, const std::vector<int32_t>& before,
                  const std::vector<std::vector<int32_t>>& ids, ForwardBuffers* buffers);
  void RememberWritten(const ForwardColumns& cols, const std::vector<int32_t>& before,
                       const std::vector<std::vector<int32_t>>& ids,
                       const ForwardBuffers& buffers);
  LastForward ReadBack(const ForwardColumns& cols, const std::vector<int32_t>& before,
                       const ForwardBuffers& buffers, ForwardLines* lines);
  // Frees buffers_, lines_ and slot_tags_ when they hold more than a MiB.
  void ReleaseLargeBuffers();

  // runner_expect.cc
  Outcome CheckSees(const Statement& st, const ExpectSees& e);
  Outcome CheckOut(const Statement& st, const ExpectOut& e);
  Outcome CheckPositions(const Statement& st, const ExpectPositions& e);
  Outcome CheckError(const Statement& st, const ExpectError& e);
  Outcome CheckEqual(const Statement& st, const ExpectEqual& e);
  Outcome CheckTrimmable(const Statement& st, const ExpectTrimmable& e);
  Outcome CheckKind(const Statement& st, const ExpectKind& e);
  Outcome CheckBytesPerToken(const Statement& st, const ExpectBytesPerToken& e);
  void Failed(const Statement& st, const std::string& expected, const std::string& got);

  // runner_emit.cc
  void Refusal(int line, const std::string& message);
  // Writes the emitted trace (lines up to `last_line`) when emitting.
  int Finish(int last_line);
  // Normal output, or nothing while emitting.
  void Print(const std::string& line);
  void EmitAfter(const Statement& st, std::string line);
  void EmitPositions(const Statement& st);
  // `state LAYER rR HASH` per recurrent layer and row.
  void PrintStates();
  void PrintForward(const Statement& st, const ForwardLines& lines);

  const Program& p_;
  RunOptions opt_;
  std::ostream& out_;
  std::ostream& err_;
  std::map<std::string, NamedLayout> layouts_;
  std::string current_;
  ContentIndex index_;
  std::vector<std::vector<float>> conv_weights_;  // per ssm layer, [K][C]
  std::vector<std::vector<float>> packed_conv_weights_;  // the same, PackConvWeights
  int status_ = 0;
  uint64_t work_ = 0;  // operations so far (runner_budget.cc)
  bool top_level_ = true;  // false while running the OP of `expect error`
  std::set<int> drop_lines_;  // --emit: expectations the run regenerates
  // Whether any `expect sees` reads a last forward: otherwise the visible
  // sets are printed but not kept.
  bool keep_sees_ = false;
  // The same for `expect out` and the outputs (counted, not kept, when
  // nothing reads them: LastForward::unkept_out_bytes).
  bool keep_outs_ = false;
  // One forward's inputs and outputs, reused from forward to forward (their
  // sizes change, their allocations mostly do not).
  ForwardBuffers buffers_;
  ForwardLines lines_;  // the same for a forward's lines
  SlotTags::Rows slot_tags_;  // and for the read-back's SlotTags
  std::map<int, std::vector<std::string>> emit_after_;  // --emit: line -> lines
};

// The first observable difference between two layouts, or "". Both must
// have the header's layer list, as every layout of a run has (Create,
// fork, extract, join, filter and reload keep it).
std::string Difference(const Layout& a, const Layout& b);

}  // namespace kvspec::trace::runner_internal

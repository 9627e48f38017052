// An independent model of the trace semantics (../shared/TRACE.md): what
// `kvspec trace` must print on standard output and which status it must
// return, computed from the rules alone.
//
// The model shares nothing with the core but the parsed Program: no caches,
// masks, kernels or content hashes. A layout is a list of rows, a row a list
// of columns (padding, or a real token with its position and id), and a
// query sees the real tokens of its row whose positions lie in its window.
// fuzz_layout_ops runs the model and the real runner on the same program
// and traps on any difference.
//
// Coverage: `kv`, `rotating` and `ssm` layers (a ring sees what a kv layer
// of its window sees; its capacity only decides when it wraps and stops
// being trimmable), every operation, and every expectation but `expect out`.
// Where TRACE.md leaves room the model follows the project's README (kinds
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
// kernels instead). It has one place in model.cc to grow into.
#pragma once

#include <string>
#include <vector>

#include "trace/program.h"

namespace kvspec::fuzz {

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

// Runs `program` on the model. Deterministic; memory and time are linear in
// the tokens the program writes.
ModelOutcome RunModel(const trace::Program& program);

}  // namespace kvspec::fuzz

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
// Coverage: `kv` and `rotating` layers (a ring sees what a kv layer of its
// window sees; its capacity only decides when it wraps and stops being
// trimmable), every operation, and every expectation but `expect out`.
// Where TRACE.md leaves room the model follows the project's README (kinds
// after join, filter and extract; an extracted ring row). A program that
// reaches an ssm layer or `expect out` is reported as not supported, and
// nothing else in the outcome means anything then; callers skip the
// comparison. Each has one place in model.cc to grow into.
#pragma once

#include <string>
#include <vector>

#include "core/trace_program.h"

namespace kvspec::fuzz {

struct ModelOutcome {
  // False when the run reached something the model does not cover.
  bool supported = true;
  std::string unsupported;  // what it was, when !supported

  // Standard output: the `sees LAYER rR pP: ITEMS` lines of every forward,
  // each ending in '\n'.
  std::string out;
  // 0 all expectations met, 1 a refusal or a failed expectation, 2 a limit.
  int exit_status = 0;
  // The line of the refusal (or limit) that stopped the run; 0: none.
  int stop_line = 0;
  std::string stop_reason;  // the model's wording, for reports
  // Lines of failed expectations, in the order they failed.
  std::vector<int> failed_lines;
};

// Runs `program` on the model. Deterministic; memory and time are linear in
// the tokens the program writes.
ModelOutcome RunModel(const trace::Program& program);

}  // namespace kvspec::fuzz

// Runs a parsed trace on the real runner and on the model (fuzz/model.h)
// and compares what a user of `kvspec trace` would see: standard output,
// the exit status, the line that stopped the run and the lines of failed
// expectations.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/trace_program.h"
#include "fuzz/model.h"

namespace kvspec::fuzz {

// What the real runner did, with its standard error read back into lines.
struct RunnerOutcome {
  std::string out;
  std::string err;
  int exit_status = 0;
  int stop_line = 0;               // `FILE:LINE: error:` or a limit; 0: none
  std::vector<int> failed_lines;   // `FILE:LINE: expected ...`, in order
  std::vector<std::string> other;  // standard error lines of no known form
};

// Runs `program` with kvspec::trace::RunProgram (no values, no emit) under a
// storage budget of `max_bytes`.
RunnerOutcome RunRunner(const trace::Program& program, size_t max_bytes);

// Empty when the two agree; otherwise the first difference, one line.
std::string Compare(const RunnerOutcome& runner, const ModelOutcome& model);

// A report for standard error: the trace, the difference, both outputs and
// the first differing output line.
std::string DivergenceReport(std::string_view trace_text, const RunnerOutcome& runner,
                             const ModelOutcome& model, const std::string& difference);

}  // namespace kvspec::fuzz

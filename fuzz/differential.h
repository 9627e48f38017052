// Runs a parsed trace on the real runner and on the model (testing/trace_model.h)
// and compares what a user of `kvspec trace` would see: standard output,
// the exit status, the line that stopped the run and the lines of failed
// expectations. Also compares two runs of the runner, one with the Highway
// kernels and one with the scalar reference kernels, where the model cannot
// compute the values (`out` lines, recurrent states).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kvspec/trace/program.h"
#include "kvspec/testing/trace_model.h"

namespace kvspec::fuzz {

// What the real runner did, with its standard error read back into lines.
struct RunnerOutcome {
  std::string out;
  std::string err;
  int exit_status = 0;
  int stop_line = 0;               // `FILE:LINE: error:` or a limit; 0: none
  std::vector<int> failed_lines;   // `FILE:LINE: expected ...`, in order
  std::string file;                // the program's file name, as in those lines
  std::vector<std::string> other;  // standard error lines of no known form
};

// Upper bounds of what running a parsed program can cost (estimates for the
// caps of fuzz_trace_parse and fuzz_targets, which run without the
// runner's budgets).
struct Cost {
  // Peak bytes of every buffer the run allocates: stored columns of all
  // layouts, both recurrent state buffers of ssm caches, round records, a
  // forward's inputs and outputs and its read-back, and the rings a
  // rotating layer allocates whole.
  double storage = 0;
  double work = 0;  // attention, recurrence and read-back steps
};
Cost EstimateCost(const trace::Program& program);

// Whether a fuzz target should run `program`: false, with the reason in
// *why, when it has more than max_statements statements, may cost more than
// max_storage bytes or max_work steps (EstimateCost), or may reach a known
// core issue (fuzz/known_issues.h).
bool WorthRunning(const trace::Program& program, size_t max_statements, double max_storage,
                  double max_work, std::string* why);

// The lines of `text`, without their line ends.
std::vector<std::string> SplitLines(const std::string& text);

// Runs `program` with kvspec::trace::RunProgram under a storage budget of
// `max_bytes`; `values` prints `out` lines, `reference_kernels` runs the
// scalar reference kernels instead of the Highway ones, `emit` makes `out`
// the trace with its expectations filled in (RunOptions::emit).
RunnerOutcome RunRunner(const trace::Program& program, size_t max_bytes, bool values = false,
                        bool reference_kernels = false, bool emit = false);

// Empty when the two agree; otherwise the first difference, one line.
// The runner's `out` lines are ignored and the hash of its `state` lines
// (16 hex digits) is dropped: the model prints `state LAYER rR`. Lines the
// model leaves undecided (testing::ModelOutcome::undecided_lines) may fail or not.
std::string Compare(const RunnerOutcome& runner, const testing::ModelOutcome& model);

// Compares a run with the Highway kernels (`fast`) and one with the scalar
// reference kernels (`ref`) of the same program, both with values: the
// exit status and every output line must be the same, except the hash of
// `state` lines (different fp32 arithmetic; compare states within one
// kernel set, e.g. with `expect equal`) and the values of `out` lines,
// which must agree within TRACE.md's 1e-4 * (1 + |reference|); standard
// error must be the same but for the values printed after `got` on failed
// `expect out` lines. `undecided` lists the lines of expectations whose
// verdict the fp32 arithmetic decides (testing::ModelOutcome::undecided_lines:
// `expect equal` of ssm rows whose tokens differ only where the difference
// may have decayed below fp32 resolution): their failure lines are left out
// of standard error and, for exit statuses 0 and 1, of the exit status.
// Empty when they agree; otherwise the first difference, one line.
std::string CompareKernelSets(const RunnerOutcome& fast, const RunnerOutcome& ref,
                              const std::vector<int>& undecided = {});

// A report for standard error: `who` (the fuzz target), the difference,
// the trace and both runs' outputs.
std::string KernelReport(std::string_view who, std::string_view trace_text,
                         const RunnerOutcome& fast, const RunnerOutcome& ref,
                         const std::string& difference);

// A report for standard error: the trace, the difference, both outputs and
// the first differing output line.
std::string DivergenceReport(std::string_view trace_text, const RunnerOutcome& runner,
                             const testing::ModelOutcome& model, const std::string& difference);

}  // namespace kvspec::fuzz

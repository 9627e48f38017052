// Fuzz target of the trace parser (kvspec::trace::ParseTrace) and, on the
// programs it accepts, of the runner.
//
// Any bytes: the parser must return a program or one well-formed error
// (line and column >= 1, a message), never crash, hang or over-allocate.
// When the input parses and the program is small (at most 64 statements and
// a bounded amount of storage and attention work), it also runs with
// kvspec::trace::RunProgram under a small storage budget, so the runner
// meets arbitrary programs: odd ids, empty groups, stray refusals, names.
// When the model (fuzz/model.h) covers the program, the two must agree as in
// fuzz_layout_ops; a difference prints both and traps. Programs that may
// reach a known, unfixed core bug (fuzz/known_issues.h) are not run.
// KVSPEC_FUZZ_VERBOSE=1 prints, per input, whether it ran and was compared.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <cmath>
#include <sstream>

#include "core/trace_runner.h"

#include "core/trace_program.h"
#include "fuzz/differential.h"
#include "fuzz/known_issues.h"
#include "fuzz/model.h"

namespace {

using kvspec::trace::LayerDecl;
using kvspec::trace::LayerKind;
using kvspec::trace::Op;
using kvspec::trace::Program;
using kvspec::trace::Statement;

constexpr size_t kMaxBytes = size_t{64} << 20;     // the runner's storage budget
constexpr size_t kMaxStatements = 64;
constexpr double kMaxStorage = double(kMaxBytes) / 4;  // estimate; far from the budget
constexpr double kMaxWork = 2e7;                       // multiply-adds, roughly

// Upper bounds of what running `program` can cost.
struct Cost {
  double storage = 0;  // bytes over all layouts
  double work = 0;     // attention and read-back steps
};

Cost EstimateCost(const Program& program) {
  double columns = 0;  // every column ever written, per row
  double layouts = 1;
  for (const Statement& outer : program.body) {
    const Statement& st = outer.op == Op::kExpectError && outer.inner ? *outer.inner : outer;
    if (st.op == Op::kWindow) columns += st.columns;
    if (st.op == Op::kDecode) columns += 1;
    if (st.op == Op::kFork || st.op == Op::kExtract) layouts += 1;
    if (st.op == Op::kJoin) layouts *= 2;  // joins can double a batch
  }
  double bytes_per_column = 0, state_bytes = 0, lanes = 0;
  for (const LayerDecl& d : program.layers) {
    if (d.kind == LayerKind::kSsm) {
      state_bytes += 4.0 * d.heads * (d.dv * d.dk + 1) + 4.0 * d.conv * (2 * d.kheads * d.dk + d.heads * d.dv);
      lanes += double(d.heads) * d.dv * d.dk;
    } else {
      bytes_per_column += 8.0 * d.heads * d.dim + 4;
      lanes += double(d.heads) * d.dim;
    }
  }
  const double rows = program.rows;
  Cost cost;
  // Growth by 1.5x from at least 16 columns; a ring holds at most as much.
  const double held = columns > 0 ? (columns + 16) * 1.5 : 0;
  cost.storage = layouts * rows * (held * bytes_per_column + state_bytes);
  cost.work = layouts * rows * held * held * (lanes + 8);
  return cost;
}

}  // namespace

// Runs `program` with the Highway kernels and with the scalar references
// (--values): everything must agree but `state` hashes (different fp32
// arithmetic) and `out` values, which must agree within TRACE.md's
// 1e-4 * (1 + |reference|). A difference prints both and traps.
void CompareWithReference(std::string_view text, const Program& program) {
  kvspec::trace::RunOptions options;
  options.values = true;
  options.max_bytes = kMaxBytes;
  std::ostringstream fast_out, fast_err, ref_out, ref_err;
  const int fast = kvspec::trace::RunProgram(program, options, fast_out, fast_err);
  options.reference_kernels = true;
  const int ref = kvspec::trace::RunProgram(program, options, ref_out, ref_err);
  std::istringstream a(fast_out.str()), b(ref_out.str());
  std::string la, lb, problem;
  int line = 0;
  while (problem.empty()) {
    const bool more_a = static_cast<bool>(std::getline(a, la));
    const bool more_b = static_cast<bool>(std::getline(b, lb));
    ++line;
    if (!more_a && !more_b) break;
    if (more_a != more_b) {
      problem = "different numbers of output lines";
    } else if (la.rfind("state ", 0) == 0 && lb.rfind("state ", 0) == 0) {
      if (la.substr(0, la.rfind(' ')) != lb.substr(0, lb.rfind(' '))) problem = "state lines";
    } else if (la.rfind("out ", 0) == 0 && lb.rfind("out ", 0) == 0) {
      const size_t colon = la.find(':');
      if (colon == std::string::npos || la.substr(0, colon) != lb.substr(0, lb.find(':'))) {
        problem = "out lines name different queries";
      } else {
        std::istringstream va(la.substr(colon + 1)), vb(lb.substr(lb.find(':') + 1));
        double x, y;
        while (va >> x) {
          if (!(vb >> y) || !(std::fabs(x - y) <= 1e-4 * (1 + std::fabs(y)))) {
            problem = "out values beyond 1e-4 * (1 + |reference|)";
            break;
          }
        }
        if (problem.empty() && (vb >> y)) problem = "out value counts";
      }
    } else if (la != lb) {
      problem = "a line differs";
    }
  }
  if (problem.empty() && fast != ref) problem = "exit status";
  // A failed `expect out` prints the values it got, which may differ within
  // the tolerance; the rest of standard error must be the same.
  const auto without_got_values = [](const std::string& err) {
    std::istringstream in(err);
    std::string err_line, kept;
    while (std::getline(in, err_line)) {
      const size_t got = err_line.find(" got ");
      if (err_line.find(": expected out ") != std::string::npos && got != std::string::npos) {
        err_line.resize(got);
      }
      kept += err_line + "\n";
    }
    return kept;
  };
  if (problem.empty() && without_got_values(fast_err.str()) != without_got_values(ref_err.str())) {
    problem = "standard error";
  }
  if (problem.empty()) return;
  std::fprintf(stderr,
               "fuzz_trace_parse: Highway and reference kernels disagree (%s, output line %d)\n"
               "--- trace\n%.*s\n--- Highway (exit %d)\n%s%s--- reference (exit %d)\n%s%s",
               problem.c_str(), line, static_cast<int>(text.size()), text.data(), fast,
               fast_out.str().c_str(), fast_err.str().c_str(), ref, ref_out.str().c_str(),
               ref_err.str().c_str());
  __builtin_trap();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Program program;
  kvspec::trace::SyntaxError error;
  if (!kvspec::trace::ParseTrace(text, "fuzz_trace_parse.trace", &program, &error)) {
    if (error.line < 1 || error.col < 1 || error.message.empty()) {
      std::fprintf(stderr, "malformed syntax error: '%s'\n", error.ToString().c_str());
      __builtin_trap();
    }
    return 0;
  }
  // What the runner relies on.
  if (program.rows < 1 || program.rows > kvspec::trace::kMaxRows || program.layers.empty() ||
      program.layers.size() > static_cast<size_t>(kvspec::trace::kMaxLayers)) {
    std::fprintf(stderr, "parsed a program out of the header limits\n");
    __builtin_trap();
  }
  for (const Statement& st : program.body) {
    if (st.line < 1 || static_cast<size_t>(st.line) > program.lines.size() ||
        (st.op == Op::kExpectError && !st.inner)) {
      std::fprintf(stderr, "parsed a malformed statement on line %d\n", st.line);
      __builtin_trap();
    }
  }

  static const bool verbose = std::getenv("KVSPEC_FUZZ_VERBOSE") != nullptr;
  const auto note = [&](const std::string& what) {
    if (verbose) std::fprintf(stderr, "fuzz_trace_parse: %s\n", what.c_str());
  };
  if (program.body.size() > kMaxStatements) {
    note("not run: more than " + std::to_string(kMaxStatements) + " statements");
    return 0;
  }
  const Cost cost = EstimateCost(program);
  if (cost.storage > kMaxStorage || cost.work > kMaxWork) {
    note("not run: too large");
    return 0;
  }
  std::string issue;
  if (kvspec::fuzz::MayReachKnownIssue(program, &issue)) {
    note("not run: may reach a known issue: " + issue);
    return 0;
  }

  const kvspec::fuzz::RunnerOutcome runner = kvspec::fuzz::RunRunner(program, kMaxBytes);
  const kvspec::fuzz::ModelOutcome model = kvspec::fuzz::RunModel(program);
  if (!model.supported) {
    // Recurrent layers: the Highway kernels against the scalar references.
    note("run; compared with the scalar reference kernels (the model does not cover " +
         model.unsupported + ")");
    CompareWithReference(text, program);
    return 0;
  }
  note("run and compared with the model: exit " + std::to_string(runner.exit_status));
  const std::string difference = kvspec::fuzz::Compare(runner, model);
  if (!difference.empty()) {
    std::fprintf(stderr, "%s",
                 kvspec::fuzz::DivergenceReport(text, runner, model, difference).c_str());
    __builtin_trap();
  }
  return 0;
}

// Fuzz target of the trace parser (kvspec::trace::ParseTrace) and, on the
// programs it accepts, of the runner.
//
// Any bytes: the parser must return a program or one well-formed error
// (line and column >= 1, a message), never crash, hang or over-allocate.
// When the input parses and the program is small (at most 64 statements and
// a bounded amount of storage and attention work), it also runs with
// kvspec::trace::RunProgram under a small storage budget, so the runner
// meets arbitrary programs: odd ids, empty groups, stray refusals, names.
// When the model (testing/trace_model.h) covers the program, the two must agree as in
// fuzz_layout_ops; a difference prints both and traps. When it does not
// (`expect out`), or the program has an ssm layer (whose values and states
// the model cannot compute), the Highway kernels must also agree with the
// scalar reference kernels (kvspec::fuzz::CompareKernelSets). Programs that may
// reach a known, unfixed core bug (fuzz/known_issues.h) are not run.
// KVSPEC_FUZZ_VERBOSE=1 prints, per input, whether it ran and was compared.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "kvspec/trace/program.h"
#include "kvspec/fuzz/differential.h"
#include "kvspec/fuzz/known_issues.h"
#include "kvspec/testing/trace_model.h"

namespace {

using kvspec::trace::Op;
using kvspec::trace::Program;
using kvspec::trace::Statement;

constexpr size_t kMaxBytes = size_t{64} << 20;     // the runner's storage budget
constexpr size_t kMaxStatements = 64;
constexpr double kMaxStorage = double(kMaxBytes) / 4;  // estimate; far from the budget
constexpr double kMaxWork = 2e7;                       // multiply-adds, roughly

}  // namespace

// Runs `program` with the scalar reference kernels (values on) and compares
// with `fast`, its run with the Highway kernels and values on: they must
// agree as kvspec::fuzz::CompareKernelSets says (everything but `state`
// hashes; `out` values within TRACE.md's 1e-4 * (1 + |reference|); the
// expectations on `undecided` lines, whose verdict the fp32 arithmetic
// decides, may differ). A difference prints both and traps.
void CompareWithReference(std::string_view text, const Program& program,
                          const kvspec::fuzz::RunnerOutcome& fast,
                          const std::vector<int>& undecided) {
  const kvspec::fuzz::RunnerOutcome ref = kvspec::fuzz::RunRunner(program, kMaxBytes, true, true);
  const std::string difference = kvspec::fuzz::CompareKernelSets(fast, ref, undecided);
  if (difference.empty()) return;
  std::fprintf(stderr, "%s",
               kvspec::fuzz::KernelReport("fuzz_trace_parse", text, fast, ref, difference).c_str());
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
        (st.op() == Op::kExpectError && !st.Get<kvspec::trace::ExpectError>().inner)) {
      std::fprintf(stderr, "parsed a malformed statement on line %d\n", st.line);
      __builtin_trap();
    }
  }

  static const bool verbose = std::getenv("KVSPEC_FUZZ_VERBOSE") != nullptr;
  const auto note = [&](const std::string& what) {
    if (verbose) std::fprintf(stderr, "fuzz_trace_parse: %s\n", what.c_str());
  };
  std::string why;
  if (!kvspec::fuzz::WorthRunning(program, kMaxStatements, kMaxStorage, kMaxWork, &why)) {
    note("not run: " + why);
    return 0;
  }

  const kvspec::testing::ModelOutcome model = kvspec::testing::RunModel(program);
  bool has_ssm = false;
  for (const kvspec::LayerConfig& d : program.layers) {
    has_ssm = has_ssm || d.kind == kvspec::CacheKind::kSsm;
  }
  // Values on when they are compared with the reference kernels; the model
  // comparison ignores `out` lines.
  const bool values = !model.supported || has_ssm;
  const kvspec::fuzz::RunnerOutcome runner = kvspec::fuzz::RunRunner(program, kMaxBytes, values);
  if (values) {
    // Values the model cannot compute: the Highway kernels against the
    // scalar references.
    note("run; compared with the scalar reference kernels" +
         (model.supported ? std::string(" (ssm layers)")
                          : " (the model does not cover " + model.unsupported + ")"));
    // The model's undecided lines when it covers the program; when it does
    // not (`expect out`), none: such a program is compared strictly.
    CompareWithReference(text, program, runner,
                         model.supported ? model.undecided_lines : std::vector<int>());
    if (!model.supported) return 0;
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

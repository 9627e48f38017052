// Differential fuzz target: random trace programs on kv, ring and ssm
// (recurrent) layers, run by the real runner (runner/runner.h: layouts,
// caches, masks, kernels) and by the independent model
// (testing/trace_model.h). Any difference in standard output, exit status,
// the refusal line or the failed expectations prints the trace and both
// outputs and traps.
//
// Input: byte 0 picks the Highway target (among the supported and compiled
// ones), so a crash file replays on its own ISA; the rest drives a
// FuzzedDataProvider from which testing/ops_generator.h writes the trace
// (every operation, valid or refused, expectations, `expect error` and
// twin patterns of rollback replay; see there).
//
// What is compared: the model predicts everything but values: `sees`
// lines, when `state` lines are printed (not their hashes), refusals, exit
// status and failed expectations, `expect equal` of ssm rows included
// (testing/trace_model.h; a few it leaves undecided). Programs with an ssm layer run
// with values on, and once more with the scalar reference kernels: the two
// runs must agree (kvspec::fuzz::CompareKernelSets: identical lines,
// refusals and exit status, `out` values within 1e-4 * (1 + |reference|),
// state hashes not compared across kernel sets).
//
// Set KVSPEC_FUZZ_PRINT_TRACE=1 to print every generated trace to standard
// error (for instance with the replay binary on one crash file), followed by
// the same trace annotated with expectations: the model's `sees` lines after
// every forward, and, when the Highway kernels differ from the reference
// ones, the reference run's `sees`, `positions` and `out` lines (`====
// annotated trace (...), exit N` blocks; fuzz/overnight stores the last one
// as the finding's regression trace).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "kvspec/fuzz/differential.h"
#include "kvspec/fuzz/known_issues.h"
#include "kvspec/testing/fdp_choices.h"
#include "kvspec/testing/ops_generator.h"
#include "kvspec/testing/trace_model.h"
#include "kvspec/trace/program.h"
#include "hwy/targets.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVSPEC_FUZZ_SANITIZED 1
#endif
#elif defined(__SANITIZE_ADDRESS__)
#define KVSPEC_FUZZ_SANITIZED 1
#endif
#ifdef KVSPEC_FUZZ_SANITIZED
#include <sanitizer/common_interface_defs.h>
#endif

namespace {

constexpr size_t kMaxBytes = size_t{64} << 20;
constexpr char kTraceName[] = "fuzz_layout_ops.trace";

// The trace being run, printed when a sanitizer stops the process.
const std::string* g_running_trace = nullptr;

[[maybe_unused]] void PrintRunningTrace() {
  if (g_running_trace) {
    std::fprintf(stderr, "==== the generated trace that was running\n%s====\n",
                 g_running_trace->c_str());
  }
}

// Every target the CPU supports and the core was compiled for.
const std::vector<int64_t>& Targets() {
  static const std::vector<int64_t> targets = [] {
    hwy::SetSupportedTargetsForTest(0);
    return hwy::SupportedAndGeneratedTargets();
  }();
  return targets;
}

// Makes dynamic dispatch pick `target` from now on.
void UseTarget(int64_t target) {
  hwy::SetSupportedTargetsForTest(target);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

// The program with the model's view of every forward written in after it
// as `expect sees` lines: a trace a correct runner passes (or fails) as the
// model says, and one whose masks differ fails, for fuzz/overnight to store
// as a regression. The lines a statement adds are those its prefix of the
// program adds to the model's output.
std::string ModelAnnotatedTrace(const kvspec::trace::Program& program) {
  std::map<int, std::string> after;  // by 1-based line
  kvspec::trace::Program prefix = program;
  std::string previous;
  for (size_t k = 0; k < program.body.size(); ++k) {
    prefix.body.assign(program.body.begin(), program.body.begin() + static_cast<long>(k) + 1);
    const kvspec::testing::ModelOutcome m = kvspec::testing::RunModel(prefix);
    if (!m.supported || m.out.compare(0, previous.size(), previous) != 0) break;
    for (const std::string& line : kvspec::fuzz::SplitLines(m.out.substr(previous.size()))) {
      if (line.rfind("sees ", 0) == 0) after[program.body[k].line] += "expect " + line + "\n";
    }
    previous = m.out;
    if (m.exit_status != 0) break;  // the run stops here
  }
  std::string text;
  for (size_t i = 0; i < program.lines.size(); ++i) {
    text += program.lines[i] + "\n";
    const auto it = after.find(static_cast<int>(i) + 1);
    if (it != after.end()) text += it->second;
  }
  return text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::vector<int64_t>& targets = Targets();
  const int64_t target = targets[data[0] % targets.size()];
  UseTarget(target);

  FuzzedDataProvider fdp(data + 1, size - 1);
  kvspec::testing::FdpChoices choices(&fdp);
  const std::string text = kvspec::testing::OpsGenerator(&choices).Generate();
#ifdef KVSPEC_FUZZ_SANITIZED
  static const bool registered = [] {
    __sanitizer_set_death_callback(PrintRunningTrace);
    return true;
  }();
  (void)registered;
#endif
  g_running_trace = &text;
  struct Forget {
    ~Forget() { g_running_trace = nullptr; }
  } forget;
  static const bool print = std::getenv("KVSPEC_FUZZ_PRINT_TRACE") != nullptr;
  if (print) std::fprintf(stderr, "# target %s\n%s", hwy::TargetName(target), text.c_str());

  kvspec::trace::Program program;
  kvspec::trace::SyntaxError error;
  if (!kvspec::trace::ParseTrace(text, kTraceName, &program, &error)) {
    std::fprintf(stderr, "generator bug: the generated trace does not parse: %s\n%s",
                 error.ToString().c_str(), text.c_str());
    __builtin_trap();
  }
  std::string issue;
  if (kvspec::fuzz::MayReachKnownIssue(program, &issue)) return 0;
  const kvspec::testing::ModelOutcome model = kvspec::testing::RunModel(program);
  if (!model.supported) {
    std::fprintf(stderr, "generator bug: the model does not cover %s\n%s",
                 model.unsupported.c_str(), text.c_str());
    __builtin_trap();
  }
  if (print && model.undecided_lines.empty()) {
    std::fprintf(stderr, "==== annotated trace (model), exit %d\n%s====\n", model.exit_status,
                 ModelAnnotatedTrace(program).c_str());
  }
  bool has_ssm = false;
  for (const kvspec::LayerConfig& d : program.layers) {
    has_ssm = has_ssm || d.kind == kvspec::CacheKind::kSsm;
  }
  // With a recurrent layer, values on: the same run serves the model (which
  // ignores `out` lines and state hashes) and the kernel comparison.
  const kvspec::fuzz::RunnerOutcome runner = kvspec::fuzz::RunRunner(program, kMaxBytes, has_ssm);
  const std::string difference = kvspec::fuzz::Compare(runner, model);
  if (!difference.empty()) {
    std::fprintf(stderr, "Highway target: %s\n%s", hwy::TargetName(target),
                 kvspec::fuzz::DivergenceReport(text, runner, model, difference).c_str());
    __builtin_trap();
  }
  if (has_ssm) {
    const kvspec::fuzz::RunnerOutcome ref =
        kvspec::fuzz::RunRunner(program, kMaxBytes, true, /*reference_kernels=*/true);
    const std::string kernels = kvspec::fuzz::CompareKernelSets(runner, ref, model.undecided_lines);
    if (!kernels.empty()) {
      if (print) {
        // The program as the runner emits it with the reference kernels and
        // values: `expect sees`, `positions` and `out` lines by that run.
        const kvspec::fuzz::RunnerOutcome annotated =
            kvspec::fuzz::RunRunner(program, kMaxBytes, true, true, /*emit=*/true);
        std::fprintf(stderr, "==== annotated trace (reference kernels), exit %d\n%s====\n",
                     annotated.exit_status, annotated.out.c_str());
      }
      std::fprintf(stderr, "Highway target: %s\n%s", hwy::TargetName(target),
                   kvspec::fuzz::KernelReport("fuzz_layout_ops", text, runner, ref, kernels)
                       .c_str());
      __builtin_trap();
    }
  }
  return 0;
}

// Cross-target differential fuzz target: one trace, every Highway target.
//
// The input is trace text (as for fuzz_trace_parse). A program that parses
// and is small (at most kMaxStatements statements and a bounded amount of
// storage and attention work, so that the runs together stay cheap) runs
// once per Highway target this CPU supports (hwy::SupportedAndGeneratedTargets,
// forced with hwy::SetSupportedTargetsForTest as testing/target_scope.h does)
// and once with the scalar reference kernels (--reference), always with
// --values. Every run must give, compared with the reference run:
// - the same exit status;
// - the same standard output, line by line, except that
//   - `out` values may differ within the kernel tolerance of their layer,
//     |target - reference| <= tol * (1 + |reference|), tol =
//     kAttentionTolerance (kv, rotating) or kGatedDeltaTolerance (ssm), so
//     two targets differ by at most about twice that (DESIGN.md: each SIMD
//     kernel stays within its tolerance of the scalar reference on every
//     target);
//   - `state` lines must name the same layer and row, their hashes are not
//     compared (fp32 state bytes are only bit-exact within one target);
// - the same standard error (refusals, limits, failed expectations), line
//   by line, except for the values a failed `expect out` prints after
//   `got`, which compare like `out` values; and a failed `expect out` may
//   be missing from one run only when its values sit so close to the
//   1e-4 * (1 + |V|) bound of TRACE.md that another run within tolerance
//   can pass it.
// Sees sets, refusals, positions and `expect equal` results (bytes within
// one run) do not depend on the target, so they must be identical.
// A difference prints the trace and every run's full output, then traps.
// KVSPEC_FUZZ_VERBOSE=1 prints, per input, whether it ran and, per target,
// how many output lines differ from the reference's in text.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "kvspec/kernels/attention.h"
#include "kvspec/kernels/gated_delta.h"
#include "kvspec/trace/program.h"
#include "kvspec/runner/runner.h"
#include "kvspec/fuzz/differential.h"
#include "kvspec/fuzz/known_issues.h"
#include "hwy/targets.h"

namespace {

using kvspec::fuzz::SplitLines;

using kvspec::CacheKind;
using kvspec::trace::Op;
using kvspec::trace::Program;
using kvspec::trace::Statement;

constexpr size_t kMaxBytes = size_t{64} << 20;  // the runner's storage budget
constexpr size_t kMaxStatements = 48;
constexpr double kMaxStorage = double(kMaxBytes) / 8;
// Multiply-adds, roughly, per run (EstimateCost); the program runs about
// five times per input, so this is a tenth of fuzz_trace_parse's cap.
constexpr double kMaxWork = 2e6;
// TRACE.md: an `expect out` value V holds when |got - V| <= 1e-4 * (1 + |V|).
constexpr double kExpectOutTolerance = 1e-4;

struct TargetRun {
  std::string name;  // a Highway target name, or "reference"
  int exit_status = 0;
  std::string out;
  std::string err;
};

// target 0: the scalar reference kernels (no target forced).
TargetRun RunOn(const Program& program, int64_t target) {
  kvspec::trace::RunOptions options;
  options.values = true;
  options.max_bytes = kMaxBytes;
  options.reference_kernels = target == 0;
  TargetRun run;
  run.name = target == 0 ? "reference" : hwy::TargetName(target);
  std::ostringstream out, err;
  if (target != 0) hwy::SetSupportedTargetsForTest(target);
  run.exit_status = kvspec::trace::RunProgram(program, options, out, err);
  if (target != 0) hwy::SetSupportedTargetsForTest(0);
  run.out = out.str();
  run.err = err.str();
  return run;
}

// The kernel tolerance of layer `layer` (-1 or out of range: none, values
// must then match exactly).
double LayerTolerance(const Program& program, int layer) {
  if (layer < 0 || static_cast<size_t>(layer) >= program.layers.size()) return 0;
  return program.layers[static_cast<size_t>(layer)].kind == CacheKind::kSsm
             ? double{kvspec::kGatedDeltaTolerance}
             : double{kvspec::kAttentionTolerance};
}

// Reads the numbers of `text` (printed by %.9g: "nan", "-inf" included).
bool ParseValues(const std::string& text, std::vector<double>* values) {
  values->clear();
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    const double x = std::strtod(word.c_str(), &end);
    if (end != word.c_str() + word.size()) return false;
    values->push_back(x);
  }
  return true;
}

// A target's value against the reference's.
bool CloseTo(double got, double ref, double tol) {
  if (std::isnan(got) || std::isnan(ref)) return std::isnan(got) && std::isnan(ref);
  if (std::isinf(got) || std::isinf(ref)) return got == ref;
  return std::fabs(got - ref) <= tol * (1 + std::fabs(ref));
}

bool ValuesClose(const std::string& got_text, const std::string& ref_text, double tol) {
  if (got_text == ref_text) return true;
  std::vector<double> got, ref;
  if (!ParseValues(got_text, &got) || !ParseValues(ref_text, &ref) || got.size() != ref.size()) {
    return false;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!CloseTo(got[i], ref[i], tol)) return false;
  }
  return true;
}

// One standard output line of a target against the reference's; empty
// when they agree.
std::string CompareOutLine(const Program& program, const std::string& a, const std::string& b) {
  if (a == b) return "";
  if (a.rfind("state ", 0) == 0 && b.rfind("state ", 0) == 0) {
    return a.substr(0, a.rfind(' ')) == b.substr(0, b.rfind(' ')) ? "" : "state lines";
  }
  if (a.rfind("out ", 0) == 0 && b.rfind("out ", 0) == 0) {
    const size_t colon = a.find(':');
    if (colon == std::string::npos || a.compare(0, colon + 1, b, 0, colon + 1) != 0) {
      return "out lines name different queries";
    }
    // "out NAME rR pP:"
    const size_t name_end = a.rfind(" r", colon);
    const int layer =
        name_end > 4 && name_end != std::string::npos
            ? kvspec::trace::FindLayer(program, std::string_view(a).substr(4, name_end - 4))
            : -1;
    const double tol = LayerTolerance(program, layer);
    return ValuesClose(a.substr(colon + 1), b.substr(colon + 1), tol)
               ? ""
               : "out values beyond the layer's kernel tolerance of the reference";
  }
  return "a line differs";
}

// A failed `expect out` on standard error: "FILE:LINE: expected out NAME rR
// pP: V.. got G..". Fills the statement and the text before " got ".
struct ExpectOutFailure {
  const kvspec::trace::ExpectOut* statement = nullptr;
  std::string head;  // up to " got "
  std::string got;   // after " got "
};

bool ReadExpectOutFailure(const Program& program, const std::string& line, ExpectOutFailure* f) {
  const std::string prefix = program.file + ":";
  if (line.compare(0, prefix.size(), prefix) != 0) return false;
  size_t i = prefix.size();
  int number = 0;
  size_t digits = 0;
  while (i < line.size() && line[i] >= '0' && line[i] <= '9' && digits < 9) {
    number = number * 10 + (line[i] - '0');
    ++i;
    ++digits;
  }
  if (digits == 0 || line.compare(i, 14, ": expected out") != 0) return false;
  const size_t got = line.find(" got ", i);
  if (got == std::string::npos) return false;
  for (const Statement& st : program.body) {
    if (st.line == number && st.op() == Op::kExpectOut) {
      f->statement = &st.Get<kvspec::trace::ExpectOut>();
    }
  }
  if (!f->statement) return false;
  f->head = line.substr(0, got);
  f->got = line.substr(got + 5);
  return true;
}

// True when `line` is a failed `expect out` whose values all lie within
// the cross-run tolerance of TRACE.md's bound, so that a run whose values
// differ from these within the kernel tolerance may pass it.
bool BorderlineExpectOut(const Program& program, const std::string& line) {
  ExpectOutFailure f;
  if (!ReadExpectOutFailure(program, line, &f)) return false;
  std::vector<double> got;
  if (!ParseValues(f.got, &got) || got.size() != f.statement->values.size()) return false;
  const double tol = LayerTolerance(program, f.statement->layer);
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = f.statement->values[i];
    if (!std::isfinite(got[i]) || !std::isfinite(want)) return false;
    // The other run's value r is within tol * (1 + |r|) of this run's (or of
    // the reference, counted twice); slack for the printed digits.
    const double reach = kExpectOutTolerance * (1 + std::fabs(want)) +
                         2.05 * tol * (1 + std::fabs(got[i])) + 1e-7 * (1 + std::fabs(want));
    if (!(std::fabs(got[i] - want) <= reach)) return false;
  }
  return true;
}

bool SameErrLine(const Program& program, const std::string& a, const std::string& b) {
  if (a == b) return true;
  ExpectOutFailure fa, fb;
  if (!ReadExpectOutFailure(program, a, &fa) || !ReadExpectOutFailure(program, b, &fb)) {
    return false;
  }
  return fa.head == fb.head &&
         ValuesClose(fa.got, fb.got, LayerTolerance(program, fa.statement->layer));
}

// A target's run against the reference run; empty when they agree.
std::string CompareRuns(const Program& program, const TargetRun& t, const TargetRun& ref) {
  const std::vector<std::string> ta = SplitLines(t.out), ra = SplitLines(ref.out);
  for (size_t i = 0; i < ta.size() || i < ra.size(); ++i) {
    if (i >= ta.size() || i >= ra.size()) {
      return "standard output: different numbers of lines (" + std::to_string(ta.size()) +
             " and " + std::to_string(ra.size()) + ")";
    }
    const std::string problem = CompareOutLine(program, ta[i], ra[i]);
    if (!problem.empty()) return "standard output line " + std::to_string(i + 1) + ": " + problem;
  }
  if (t.exit_status != ref.exit_status) return "exit status";
  const std::vector<std::string> te = SplitLines(t.err), re = SplitLines(ref.err);
  size_t i = 0, j = 0;
  while (i < te.size() || j < re.size()) {
    if (i < te.size() && j < re.size() && SameErrLine(program, te[i], re[j])) {
      ++i;
      ++j;
    } else if (i < te.size() && BorderlineExpectOut(program, te[i])) {
      ++i;
    } else if (j < re.size() && BorderlineExpectOut(program, re[j])) {
      ++j;
    } else {
      return "standard error line " + std::to_string(i + 1) + " (reference line " +
             std::to_string(j + 1) + ")";
    }
  }
  return "";
}

const std::vector<int64_t>& Targets() {
  static const std::vector<int64_t> targets = [] {
    hwy::SetSupportedTargetsForTest(0);
    return hwy::SupportedAndGeneratedTargets();
  }();
  return targets;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  static const bool verbose = std::getenv("KVSPEC_FUZZ_VERBOSE") != nullptr;
  const auto note = [&](const std::string& what) {
    if (verbose) std::fprintf(stderr, "fuzz_targets: %s\n", what.c_str());
  };
  Program program;
  kvspec::trace::SyntaxError error;
  if (!kvspec::trace::ParseTrace(text, "fuzz_targets.trace", &program, &error)) {
    note("not run: syntax error " + error.ToString());
    return 0;
  }
  std::string why;
  if (!kvspec::fuzz::WorthRunning(program, kMaxStatements, kMaxStorage, kMaxWork, &why)) {
    note("not run: " + why);
    return 0;
  }

  std::vector<TargetRun> runs;
  runs.push_back(RunOn(program, 0));
  for (int64_t target : Targets()) runs.push_back(RunOn(program, target));
  std::string problem, who;
  for (size_t k = 1; k < runs.size() && problem.empty(); ++k) {
    problem = CompareRuns(program, runs[k], runs[0]);
    who = runs[k].name;
  }
  if (problem.empty()) {
    if (verbose) {
      // Per target, the output lines that differ from the reference's text
      // (within tolerance): evidence that the targets really ran.
      std::string names;
      for (const TargetRun& run : runs) {
        names += " " + run.name;
        if (&run == &runs[0]) continue;
        const std::vector<std::string> a = SplitLines(run.out), b = SplitLines(runs[0].out);
        size_t differ = 0;
        for (size_t i = 0; i < a.size() && i < b.size(); ++i) differ += a[i] != b[i];
        names += "(" + std::to_string(differ) + ")";
      }
      note("run and compared:" + names + " (lines differing from the reference in text), exit " +
           std::to_string(runs[0].exit_status));
    }
    return 0;
  }
  std::fprintf(stderr,
               "fuzz_targets: target %s disagrees with the reference kernels (%s)\n"
               "--- trace\n%.*s\n",
               who.c_str(), problem.c_str(), static_cast<int>(text.size()), text.data());
  for (const TargetRun& run : runs) {
    std::fprintf(stderr, "--- %s (exit %d)\n%s%s", run.name.c_str(), run.exit_status,
                 run.out.c_str(), run.err.c_str());
  }
  __builtin_trap();
}

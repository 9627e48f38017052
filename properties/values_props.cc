// Traces that carry numbers: the kernels against a double-precision oracle.
//
// For random small trace programs (1-3 rows; 1-3 layers of kv, kv with a
// window, rotating and ssm with GQA and conv kernels 1-4; 1-12 operations:
// windows with left/right padding and ids, decodes, trims and bypass trims
// where valid, speculative rounds with uniform and per-row partial accepts,
// fork/use and reload), written as text, parsed with trace::ParseTrace and
// run with trace::RunProgram (values on) twice, with the Highway kernels and
// with the scalar reference kernels, every `out` value agrees with
// properties/values_oracle (TRACE.md "Values" evaluated in double, written
// independently of core/) within TRACE.md's contract, 1e-4 * (1 + |oracle|),
// and every `sees` line equals the oracle's visible set.
//
// Run once per Highway target (ValuesTargets/Targets.*/AVX2, ...). Each test
// prints the number of programs and the largest |got - oracle| / (1 +
// |oracle|) seen, for the Highway and the reference kernels. A failure
// prints the trace: save it to a file and rerun it with
// `build/dev/kvspec trace --values FILE` (add `--reference` for the scalar
// kernels).
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "kvspec/trace/program.h"
#include "kvspec/runner/runner.h"
#include "kvspec/properties/regression_writer.h"
#include "kvspec/testing/rc_choices.h"
#include "kvspec/testing/target_params.h"
#include "kvspec/testing/valid_program_generator.h"
#include "kvspec/testing/values_oracle.h"

namespace kvspec {
namespace {

// The contract of TRACE.md: |got - ref| <= 1e-4 * (1 + |ref|).
constexpr double kTolerance = 1e-4;

// One generated program; a counterexample shows as its text.
struct GeneratedProgram {
  std::string text;
  bool ssm = false, rotating = false, round = false, partial_accept = false, padding = false;
};

std::ostream& operator<<(std::ostream& os, const GeneratedProgram& p) {
  return os << "\n" << p.text;
}

rc::Gen<GeneratedProgram> GenProgram() {
  return rc::gen::exec([] {
    // Every range whole whatever RapidCheck's size (inRange alone scales
    // its range with the size); each draw shrinks towards its low end.
    testing::RcChoices choices(testing::RcChoices::Scale::kUniform);
    testing::ValidProgramGenerator generator(&choices);
    GeneratedProgram p;
    p.text = generator.Generate();
    p.ssm = generator.has_ssm();
    p.rotating = generator.has_rotating();
    p.round = generator.had_round();
    p.partial_accept = generator.had_partial_accept();
    p.padding = generator.had_padding();
    return p;
  });
}

// ---------------------------------------------------------------------------
// Comparing the runner's output with the oracle.

struct Stats {
  uint64_t programs = 0;
  uint64_t values = 0;
  double worst = 0;  // largest |got - ref| / (1 + |ref|)
  std::string worst_where;
};

// The runner's `out` and `sees` lines, in order.
void Collect(const std::string& output, std::vector<std::string>* outs,
             std::vector<std::string>* sees) {
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("out ", 0) == 0) outs->push_back(line);
    if (line.rfind("sees ", 0) == 0) sees->push_back(line);
  }
}

std::string Head(const char* what, const oracle::Query& q) {
  return std::string(what) + " " + q.layer_name + " r" + std::to_string(q.row) + " p" +
         std::to_string(q.pos) + ":";
}

// Empty when everything agrees; otherwise what differs. Updates `stats`.
std::string Compare(const oracle::Result& expected, const std::string& output, Stats* stats,
                    double* worst_here) {
  std::vector<std::string> outs, sees;
  Collect(output, &outs, &sees);
  size_t o = 0, s = 0;
  for (const oracle::Step& step : expected.steps) {
    for (const oracle::Query& q : step.queries) {
      if (q.attention) {
        const std::string want =
            Head("sees", q) + (q.sees.empty() ? "" : " ") + oracle::FormatSees(q.sees);
        if (s >= sees.size()) return "line " + std::to_string(step.line) + ": missing " + want;
        if (sees[s] != want) {
          return "line " + std::to_string(step.line) + ": expected " + want + " got " + sees[s];
        }
        ++s;
      }
      const std::string head = Head("out", q);
      if (o >= outs.size()) return "line " + std::to_string(step.line) + ": missing " + head;
      const std::string& got_line = outs[o++];
      if (got_line.compare(0, head.size(), head) != 0) {
        return "line " + std::to_string(step.line) + ": expected " + head + " ... got " + got_line;
      }
      std::istringstream in(got_line.substr(head.size()));
      std::vector<double> got;
      std::string word;
      while (in >> word) got.push_back(std::strtod(word.c_str(), nullptr));
      if (got.size() != q.values.size()) {
        return "line " + std::to_string(step.line) + ": " + head + " has " +
               std::to_string(got.size()) + " values, the oracle " +
               std::to_string(q.values.size());
      }
      for (size_t i = 0; i < got.size(); ++i) {
        const double ref = q.values[i];
        const double diff = std::fabs(got[i] - ref) / (1.0 + std::fabs(ref));
        ++stats->values;
        if (!(diff <= kTolerance)) {
          return "line " + std::to_string(step.line) + ": " + head + " value " + std::to_string(i) +
                 " is " + oracle::FormatValue(got[i]) + ", the oracle " + oracle::FormatValue(ref) +
                 ": |diff| / (1 + |ref|) = " + oracle::FormatValue(diff) + " > 1e-4";
        }
        *worst_here = std::max(*worst_here, diff);
        if (diff > stats->worst) {
          stats->worst = diff;
          stats->worst_where = head + " value " + std::to_string(i) + ": got " +
                               oracle::FormatValue(got[i]) + ", oracle " + oracle::FormatValue(ref);
        }
      }
    }
  }
  if (o != outs.size()) return std::to_string(outs.size() - o) + " `out` lines the oracle has not";
  if (s != sees.size()) return std::to_string(sees.size() - s) + " `sees` lines the oracle has not";
  return "";
}

std::string Rerun(const std::string& text) {
  return "\n--- trace (save as FILE; rerun: build/dev/kvspec trace --values [--reference] FILE)\n" +
         text + "---\n";
}

const char* Bucket(double worst) {
  if (worst == 0) return "largest diff 0";
  if (worst < 1e-7) return "largest diff < 1e-7";
  if (worst < 1e-6) return "largest diff < 1e-6";
  if (worst < 1e-5) return "largest diff < 1e-5";
  return "largest diff < 1e-4";
}

class ValuesTargets : public ::testing::TestWithParam<int64_t> {};

TEST_P(ValuesTargets, OutputsMatchDoublePrecisionOracle) {
  testing::TargetScope scope(GetParam());
  const std::string target = hwy::TargetName(GetParam());
  Stats highway, reference;
  // A failing program is written as a regression trace with the oracle's
  // `expect out` lines (properties/regression_writer.h).
  const bool ok = regress::Check("trace values on " + target + " vs double-precision oracle", target, [&] {
    const GeneratedProgram generated = *GenProgram();
    const std::string& text = generated.text;
    regress::Recorder::Get().Begin(text, "a generated program of values_props");
    RC_CLASSIFY(generated.ssm, "ssm");
    RC_CLASSIFY(generated.rotating, "rotating");
    RC_CLASSIFY(generated.round, "round");
    RC_CLASSIFY(generated.partial_accept, "partial accept");
    RC_CLASSIFY(generated.padding, "padding");

    const oracle::Result expected = oracle::Evaluate(text);
    if (!expected.ok) RC_FAIL("the oracle refused the program: " + expected.error + Rerun(text));
    trace::Program program;
    trace::SyntaxError error;
    if (!trace::ParseTrace(text, "values_props.trace", &program, &error)) {
      RC_FAIL("ParseTrace refused a valid program: " + error.ToString() + Rerun(text));
    }
    double worst_here = 0;
    for (const bool use_reference : {false, true}) {
      trace::RunOptions options;
      options.values = true;
      options.reference_kernels = use_reference;
      std::ostringstream out, err;
      const int code = trace::RunProgram(program, options, out, err);
      const std::string kernels = use_reference ? "reference kernels" : "Highway " + target;
      if (code != 0) {
        RC_FAIL("RunProgram (" + kernels + ") exited " + std::to_string(code) +
                " on a valid program:\n" + err.str() + Rerun(text));
      }
      Stats& stats = use_reference ? reference : highway;
      ++stats.programs;
      const std::string problem = Compare(expected, out.str(), &stats, &worst_here);
      if (!problem.empty()) RC_FAIL(kernels + ": " + problem + Rerun(text));
    }
    RC_CLASSIFY(true, Bucket(worst_here));
  });
  for (const auto& [name, stats] : {std::make_pair("Highway " + target, &highway),
                                    std::make_pair(std::string("reference kernels"), &reference)}) {
    std::printf(
        "values vs oracle, %s: %llu programs, %llu values, largest |got - oracle| / "
        "(1 + |oracle|) = %.3g%s%s\n",
        name.c_str(), static_cast<unsigned long long>(stats->programs),
        static_cast<unsigned long long>(stats->values), stats->worst,
        stats->worst_where.empty() ? "" : " at ", stats->worst_where.c_str());
  }
  EXPECT_TRUE(ok);
}

// The oracle itself on a hand-checked case: a single token sees only itself,
// so its attention output is its own v; a recurrent first token's y follows
// the formulas with a zero state (S = beta v k^T, y = S q).
TEST(ValuesOracle, FirstTokenOutputsFollowTheFormulas) {
  const oracle::Result r = oracle::Evaluate(
      "trace 1\nrows 1\nlayer a kv heads=2 dim=3\nlayer s ssm heads=1 dk=1 dv=1 conv=1\n"
      "window 1 ids=7\n");
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.steps.size(), 1u);
  ASSERT_EQ(r.steps[0].queries.size(), 2u);
  const oracle::Query& a = r.steps[0].queries[0];
  EXPECT_EQ(oracle::FormatSees(a.sees), "0:7");
  ASSERT_EQ(a.values.size(), 6u);
  // v is draws 13..18 of token (0, 7, 0)'s stream (after q[6] and k[6]).
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  const uint64_t seed = mix(mix(mix(0) ^ 7) ^ 0);
  for (int i = 0; i < 6; ++i) {
    const uint64_t u = mix(seed + static_cast<uint64_t>(13 + i) * 0x9E3779B97F4A7C15ull);
    const double v = static_cast<double>(u >> 40) / 16777216.0 * 2.0 - 1.0;
    EXPECT_DOUBLE_EQ(a.values[static_cast<size_t>(i)], v);
  }
  // dk = dv = 1, K = 1: u = silu(w x); q = l2(u_q) = sign(u_q) (almost), k
  // likewise; y = beta * v * k * q.
  const oracle::Query& s = r.steps[0].queries[1];
  ASSERT_EQ(s.values.size(), 1u);
  const uint64_t tseed = mix(mix(mix(1) ^ 7) ^ 0);
  const uint64_t wseed = mix(mix(1) ^ 0xFFFFFFFFFFFFFFFFull);
  auto draw = [&](uint64_t sd, int i) {
    const uint64_t u = mix(sd + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull);
    return static_cast<double>(u >> 40) / 16777216.0 * 2.0 - 1.0;
  };
  auto silu = [](double z) { return z / (1.0 + std::exp(-z)); };
  double u[3];
  for (int c = 0; c < 3; ++c) u[c] = silu(0.5 * draw(wseed, c + 1) * draw(tseed, c + 1));
  const double q = u[0] / std::sqrt(u[0] * u[0] + 1e-6);
  const double k = u[1] / std::sqrt(u[1] * u[1] + 1e-6);
  const double beta = 1.0 / (1.0 + std::exp(-draw(tseed, 5)));  // x[3], a, b
  EXPECT_NEAR(s.values[0], beta * u[2] * k * q, 1e-15);
}

KVSPEC_FOR_EACH_TARGET(ValuesTargets);

}  // namespace
}  // namespace kvspec

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
#include "kvspec/testing/generators.h"
#include "kvspec/testing/target_params.h"
#include "kvspec/testing/values_oracle.h"

namespace kvspec {
namespace {

// The contract of TRACE.md: |got - ref| <= 1e-4 * (1 + |ref|).
constexpr double kTolerance = 1e-4;

// A uniform pick in [lo, hi] whatever RapidCheck's current size (inRange
// alone scales its range with the size); shrinks towards lo.
int Pick(int lo, int hi) { return *rc::gen::resize(100, rc::gen::inRange(lo, hi + 1)); }
// True one time in `one_in`; shrinks towards false.
bool Coin(int one_in = 2) { return Pick(1, one_in) == one_in; }

// ---------------------------------------------------------------------------
// Random programs the runner accepts (TRACE.md "Precise rules"), as text.

// What validity depends on, per named layout.
struct LayoutModel {
  std::vector<int32_t> positions;  // real tokens per row
  bool armed = false;
  bool verified = false;
  std::vector<int32_t> round_real;  // real tokens of the verify forward
  // Minimum real count of the window that was the last change, or -1
  // (a bypass trim of up to that many is valid).
  int32_t bypass_max = -1;
  // Columns ever added: while this stays <= every ring's capacity no ring
  // has wrapped (conservative: trims do not give columns back here).
  int64_t columns_added = 0;
};

class ProgramGenerator {
 public:
  std::string Generate() {
    rows_ = Pick(1, 3);
    text_ << "trace 1\nrows " << rows_ << "\n";
    const int layers = Pick(1, 3);
    for (int l = 0; l < layers; ++l) Layer(l);
    LayoutModel main;
    main.positions.assign(static_cast<size_t>(rows_), 0);
    layouts_["main"] = main;
    current_ = "main";
    const int ops = Pick(1, 12);
    for (int i = 0; i < ops; ++i) Operation();
    return text_.str();
  }

  bool has_ssm() const { return has_ssm_; }
  bool has_rotating() const { return min_capacity_ < std::numeric_limits<int>::max(); }
  bool had_partial_accept() const { return partial_accept_; }
  bool had_round() const { return rounds_ > 0; }
  bool had_padding() const { return padding_; }

 private:
  // ` heads=H`, and in half the layers ` qheads=G*H` (grouped-query
  // attention, G query heads per KV head; the kernels take 4 at a time).
  std::string Heads() {
    const int heads = Pick(1, 3);
    std::string s = " heads=" + std::to_string(heads);
    if (Coin()) s += " qheads=" + std::to_string(heads * Pick(1, 5));
    return s;
  }

  // A head size: mostly small, one layer in four wide enough for every
  // SIMD path of the attention kernels (whole vectors and tails).
  int Dim() { return Coin(4) ? Pick(7, 40) : Pick(1, 6); }

  void Layer(int l) {
    const std::string name = "l" + std::to_string(l);
    switch (Pick(0, 3)) {
      case 0:  // kv, sees everything
        text_ << "layer " << name << " kv" << Heads() << " dim=" << Dim() << "\n";
        break;
      case 1:  // kv with a sliding window
        text_ << "layer " << name << " kv" << Heads() << " dim=" << Dim()
              << " window=" << Pick(1, 6) << "\n";
        break;
      case 2: {  // ring
        const int window = Pick(1, 6);
        const int capacity = window + *rc::gen::element(0, 0, 1, 3, 8);
        text_ << "layer " << name << " rotating window=" << window;
        if (capacity != window || Coin()) text_ << " capacity=" << capacity;
        text_ << Heads() << " dim=" << Dim() << "\n";
        min_capacity_ = std::min(min_capacity_, capacity);
        break;
      }
      default: {  // recurrent, GQA
        const int kheads = Pick(1, 2);
        const int heads = kheads * Pick(1, 3);
        text_ << "layer " << name << " ssm heads=" << heads << " kheads=" << kheads
              << " dk=" << Pick(1, 5) << " dv=" << Pick(1, 5) << " conv=" << Pick(1, 4) << "\n";
        has_ssm_ = true;
        break;
      }
    }
  }

  LayoutModel& Cur() { return layouts_[current_]; }

  enum Kind { kWindow, kDecode, kTrim, kBypassTrim, kRound, kArm, kAccept, kFork, kUse, kReload };

  std::vector<Kind> ValidKinds() {
    const LayoutModel& m = Cur();
    std::vector<Kind> kinds;
    if (!(m.armed && m.verified)) {
      kinds.insert(kinds.end(), {kWindow, kWindow, kWindow, kDecode, kDecode});
    }
    if (!m.armed) {
      if (!has_ssm_ && (!has_rotating() || m.columns_added <= min_capacity_)) {
        kinds.push_back(kTrim);
      }
      if (!has_ssm_ && m.bypass_max >= 0) kinds.insert(kinds.end(), {kBypassTrim, kBypassTrim});
      kinds.insert(kinds.end(), {kRound, kRound, kRound, kArm});
    }
    if (m.armed && m.verified) kinds.insert(kinds.end(), {kAccept, kAccept, kAccept});
    if (forks_ < 3) kinds.push_back(kFork);
    if (layouts_.size() > 1) kinds.push_back(kUse);
    kinds.push_back(kReload);
    return kinds;
  }

  void Operation() {
    const std::vector<Kind> kinds = ValidKinds();  // shrinks towards a window
    switch (kinds[static_cast<size_t>(Pick(0, static_cast<int>(kinds.size()) - 1))]) {
      case kWindow: Window(); break;
      case kDecode: Decode(); break;
      case kTrim: Trim(); break;
      case kBypassTrim: BypassTrim(); break;
      case kRound: Round(); break;
      case kArm: Arm(); break;
      case kAccept: Accept(); break;
      case kFork: Fork(); break;
      case kUse: {
        std::vector<std::string> names;
        for (const auto& [name, model] : layouts_) names.push_back(name);
        current_ = names[static_cast<size_t>(Pick(0, static_cast<int>(names.size()) - 1))];
        text_ << "use " << current_ << "\n";
        break;
      }
      case kReload:
        text_ << "reload\n";
        Cur().bypass_max = -1;
        break;
    }
  }

  // Ids for `count` tokens: small ones (often equal to some position, so
  // the same id comes back at other positions) or large ones.
  std::vector<int32_t> Ids(int32_t count) {
    std::vector<int32_t> ids;
    for (int32_t j = 0; j < count; ++j) ids.push_back(Coin() ? Pick(0, 999) : Pick(0, 15));
    return ids;
  }

  // The model after a forward with `real` real tokens per row.
  void AfterForward(const std::vector<int32_t>& real, bool window) {
    LayoutModel& m = Cur();
    for (int r = 0; r < rows_; ++r) m.positions[r] += real[r];
    if (m.armed) {
      m.verified = true;
      m.round_real = real;
    }
    m.bypass_max = window ? *std::min_element(real.begin(), real.end()) : -1;
  }

  void Window() {
    LayoutModel& m = Cur();
    const int32_t L = Pick(1, 6);
    std::vector<int32_t> left(static_cast<size_t>(rows_), 0), right = left, real = left;
    for (int r = 0; r < rows_; ++r) {
      if (m.positions[r] == 0 && Coin(3)) left[r] = Pick(0, L);
      if (Coin(4)) right[r] = Pick(0, L - left[r]);
      real[r] = L - left[r] - right[r];
    }
    text_ << "window " << L;
    const bool any_left = *std::max_element(left.begin(), left.end()) > 0;
    const bool any_right = *std::max_element(right.begin(), right.end()) > 0;
    if (any_left || Coin(8)) text_ << " left=" << testing::JoinInts(left);
    if (any_right || Coin(8)) text_ << " right=" << testing::JoinInts(right);
    padding_ = padding_ || any_left || any_right;
    if (*std::max_element(real.begin(), real.end()) > 0 && Coin(3)) {
      std::vector<std::string> groups;
      for (int r = 0; r < rows_; ++r) groups.push_back(testing::JoinInts(Ids(real[r])));
      text_ << " ids=";
      for (int r = 0; r < rows_; ++r) text_ << (r ? "/" : "") << groups[r];
    }
    text_ << "\n";
    m.columns_added += L;
    AfterForward(real, /*window=*/true);
  }

  void Decode() {
    text_ << "decode";
    if (Coin(3)) text_ << " ids=" << testing::JoinInts(Ids(rows_), '/');
    text_ << "\n";
    Cur().columns_added += 1;
    AfterForward(std::vector<int32_t>(static_cast<size_t>(rows_), 1), /*window=*/false);
  }

  void Trim() {
    LayoutModel& m = Cur();
    const int32_t most = *std::min_element(m.positions.begin(), m.positions.end());
    const int32_t n = Pick(0, most);
    text_ << "trim " << n << "\n";
    for (int32_t& p : m.positions) p -= n;
    m.bypass_max = -1;
  }

  void BypassTrim() {
    LayoutModel& m = Cur();
    const int32_t n = Pick(0, m.bypass_max);
    text_ << "trim " << n << " bypass\n";
    for (int32_t& p : m.positions) p -= n;
    m.bypass_max = -1;
  }

  void Arm() {
    text_ << "arm\n";
    LayoutModel& m = Cur();
    m.armed = true;
    m.verified = false;
    m.bypass_max = -1;
  }

  void Accept() {
    LayoutModel& m = Cur();
    std::vector<int32_t> keep(static_cast<size_t>(rows_));
    if (rows_ > 1 && Coin()) {
      for (int r = 0; r < rows_; ++r) keep[r] = Pick(0, m.round_real[r]);
      text_ << "accept " << testing::JoinInts(keep) << "\n";
    } else {
      const int32_t k = Pick(0, *std::min_element(m.round_real.begin(), m.round_real.end()));
      keep.assign(keep.size(), k);
      text_ << "accept " << k << "\n";
    }
    for (int r = 0; r < rows_; ++r) {
      m.positions[r] -= m.round_real[r] - keep[r];
      partial_accept_ = partial_accept_ || keep[r] < m.round_real[r];
    }
    m.armed = false;
    m.verified = false;
    m.bypass_max = -1;
    ++rounds_;
  }

  void Fork() {
    const std::string name = "f" + std::to_string(forks_++);
    text_ << "fork " << name << "\n";
    LayoutModel copy = Cur();
    copy.bypass_max = -1;  // only ever bypass-trim right after one's own window
    layouts_[name] = copy;
  }

  // arm; a verify window (or a decode as a one-token round); sometimes a
  // fork of the armed round accepted differently; accept.
  void Round() {
    Arm();
    if (Coin(4)) {
      Decode();
    } else {
      Window();
    }
    if (forks_ < 3 && Coin(4)) {
      const std::string before = current_;
      Fork();
      current_ = "f" + std::to_string(forks_ - 1);
      text_ << "use " << current_ << "\n";
      Accept();
      current_ = before;
      text_ << "use " << current_ << "\n";
    }
    Accept();
  }

  int rows_ = 1;
  std::ostringstream text_;
  std::map<std::string, LayoutModel> layouts_;
  std::string current_;
  int forks_ = 0;
  int min_capacity_ = std::numeric_limits<int>::max();
  bool has_ssm_ = false;
  bool partial_accept_ = false;
  bool padding_ = false;
  int rounds_ = 0;
};

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
    ProgramGenerator generator;
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

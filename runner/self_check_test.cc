// Behaviour of the trace runner and parser that survivors of the fifth
// fresh mutation sample (tools/mutate --sample 60 --seed 2026120308)
// showed no test observed in a build with NDEBUG (the dev preset and
// tools/mutate): the read-back memory of `out` entries, `expect error`
// reporting a refusal that changed the layout, and the runner's and the
// parser's own invariants, which only builds without NDEBUG check between
// statements (runner/runner.cc, trace/parse.cc). Written after that run:
// they do not change its score.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/trace/parse_internal.h"
#include "kvspec/trace/program.h"
#include "kvspec/runner/runner.h"
#include "kvspec/runner/runner_internal.h"

#ifndef KVSPEC_SOURCE_DIR
#error "KVSPEC_SOURCE_DIR (the source tree) must be defined"
#endif

namespace kvspec {

// The friend Layout names for tests that corrupt states (this binary's own
// definition): here, to put a faulty cache in a layer.
struct InvariantsTestAccess {
  static std::vector<std::unique_ptr<Cache>>& Layers(Layout& l) { return l.layers_; }
};

namespace trace::runner_internal {

struct RunnerTestAccess {
  static Outcome Execute(Runner& r, const Statement& st) { return r.Execute(st); }
  static Layout& Current(Runner& r) { return r.Cur(); }
  // The runner's own state, for breaking one field at a time.
  static std::string& CurrentName(Runner& r) { return r.current_; }
  static std::map<std::string, NamedLayout>& Layouts(Runner& r) { return r.layouts_; }
  static std::vector<std::vector<float>>& ConvWeights(Runner& r) { return r.conv_weights_; }
  static std::vector<std::vector<float>>& PackedConvWeights(Runner& r) {
    return r.packed_conv_weights_;
  }
  static int& ExitStatus(Runner& r) { return r.status_; }
  static bool& TopLevel(Runner& r) { return r.top_level_; }
};

}  // namespace trace::runner_internal

namespace {

using trace::Program;
using trace::Statement;
using trace::SyntaxError;
using trace::runner_internal::Outcome;
using trace::runner_internal::Runner;
using trace::runner_internal::RunnerTestAccess;

// ------------------------------------------------------------ out entries

// The smallest memory budget (RunOptions::max_bytes) with which `text` runs
// to its end; one byte less stops it.
uint64_t SmallestBudget(const std::string& text, bool values) {
  uint64_t lo = 1, hi = uint64_t{64} << 20;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    trace::RunOptions options;
    options.max_bytes = static_cast<size_t>(mid);
    options.values = values;
    std::ostringstream out, err;
    if (trace::RunTraceText(text, "out.trace", options, out, err) == 0) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// With outputs observed (--values), a layout's last forward holds every
// query's output: README's budget counts 64 bytes per reported entry plus
// its floats (Hq x D), in every layout that holds the forward (each fork
// copies it). A window of 8 queries of 1 head of dim 4, then forks: the
// smallest budget with --values exceeds the one without by exactly
// (layouts holding the forward) x 8 x (64 + 16) bytes, the forks deciding
// both; that budget runs the trace and one byte less stops it at the last
// fork, exit 2.
TEST(TraceRunnerLimits, EachHeldOutEntryCosts64BytesAndItsFloats) {
  const std::string window = "trace 1\nrows 1\nlayer a kv heads=1 dim=4\nwindow 8\n";
  const uint64_t per_forward = 8 * (64 + 4 * sizeof(float));
  std::string text = window;
  uint64_t last_with = 0, last_without = 0;
  for (int forks = 1; forks <= 6; ++forks) {
    text += "fork f" + std::to_string(forks) + "\n";
    const uint64_t with = SmallestBudget(text, true);
    const uint64_t without = SmallestBudget(text, false);
    if (forks >= 3) {  // the forks decide, not the forward
      // The last fork is made while `forks` layouts hold the forward.
      EXPECT_EQ(with - without, static_cast<uint64_t>(forks) * per_forward)
          << forks << " forks: " << with << " vs " << without;
    }
    if (forks >= 4) {
      // One more fork holds one more copy of the storage and the outputs.
      EXPECT_EQ(with - last_with, without - last_without + per_forward) << forks << " forks";
    }
    last_with = with;
    last_without = without;
  }
  trace::RunOptions options;
  options.values = true;
  options.max_bytes = static_cast<size_t>(last_with);
  std::ostringstream out, err;
  EXPECT_EQ(trace::RunTraceText(text, "out.trace", options, out, err), 0) << err.str();
  options.max_bytes = static_cast<size_t>(last_with - 1);
  std::ostringstream out2, err2;
  EXPECT_EQ(trace::RunTraceText(text, "out.trace", options, out2, err2), 2);
  EXPECT_NE(err2.str().find("out.trace:10: limit: fork needs "), std::string::npos) << err2.str();
}

// The same for the tags each query saw, held for a trace that reads them
// (`expect sees`): 64 bytes per query of the forward plus one Tag per seen
// pair (8 queries seeing 1 + 2 + ... + 8 tokens), in every layout holding
// the forward. The smallest budget of the trace with the `expect sees`
// line exceeds the one without it by exactly that, the forks deciding.
TEST(TraceRunnerLimits, EachHeldSeesEntryCosts64BytesAndItsTags) {
  const std::string window = "trace 1\nrows 1\nlayer a kv heads=1 dim=4\nwindow 8\n";
  const uint64_t per_forward = 8 * 64 + (8 * 9 / 2) * sizeof(trace::Tag);
  std::string forks;
  for (int n = 1; n <= 5; ++n) {
    forks += "fork f" + std::to_string(n) + "\n";
    if (n < 3) continue;  // the forks decide, not the forward
    const uint64_t with = SmallestBudget(window + "expect sees a r0 p0: 0\n" + forks, false);
    const uint64_t without = SmallestBudget(window + forks, false);
    EXPECT_EQ(with - without, static_cast<uint64_t>(n) * per_forward)
        << n << " forks: " << with << " vs " << without;
  }
}

// ------------------------------------------------------------ expect error

// A plain kv cache whose trim refuses what its CheckTrim accepted: a cache
// bug that makes Layout::Trim refuse after it trimmed the layers before it.
class TrimRefusingKvCache final : public WithKind<TrimRefusingKvCache, ColumnStore> {
 public:
  static constexpr std::string_view kKind = "trim_refusing_kv";
  TrimRefusingKvCache(int kv_heads, int dim) : WithKind(1, kv_heads, dim, kNoWindow, 0) {}
  std::unique_ptr<Cache> Copy() const override {
    return std::make_unique<TrimRefusingKvCache>(*this);
  }
  Status trim(int32_t, bool) override { return Status::Error("this cache never trims"); }
};

Program Parse(const std::string& text, const std::string& name) {
  Program program;
  SyntaxError error;
  EXPECT_TRUE(trace::ParseTrace(text, name, &program, &error)) << error.ToString();
  return program;
}

// Runs the header of `program` (the layout's creation) in `runner` and
// returns the body to run statement by statement (Runner::Run runs the body
// it finds: it is moved out meanwhile). The runner was made with the whole
// program, as Run's caller makes it.
std::vector<Statement> RunHeader(Program* program, Runner* runner) {
  std::vector<Statement> body = std::move(program->body);
  program->body.clear();
  EXPECT_EQ(runner->Run(), 0);
  return body;
}

// Runner::CheckInvariants, which builds without NDEBUG run after every
// statement and TraceRunnerInvariants runs in every build, names each way
// the runner's own state can break: here one field at a time, in a runner
// that has run the header of a trace with a plain and a recurrent layer.
TEST(TraceRunnerInvariants, EachBrokenFieldIsNamed) {
  const std::string text =
      "trace 1\nrows 2\nlayer a kv\nlayer s ssm heads=1 dk=2 dv=2 conv=3\nwindow 2\n";
  // A layout of `rows` rows with `layers` of the header's layers.
  const auto make = [&](int rows, size_t layers) {
    Program program = Parse(text, "self.trace");
    program.layers.resize(layers);
    std::unique_ptr<Layout> layout;
    EXPECT_TRUE(Layout::Create(rows, program.layers, &layout).ok());
    return layout;
  };
  // The recurrent layer's conv weights: K x its channels.
  const size_t weights = Parse(text, "self.trace").layers[1].SsmChannels() * 3;
  struct Case {
    const char* what;
    std::function<void(Runner&)> corrupt;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"no current layout", [](Runner& r) { RunnerTestAccess::CurrentName(r) = "gone"; },
       "no layout named 'gone' (the current one)"},
      {"a null layout", [](Runner& r) { RunnerTestAccess::Layouts(r)["x"].layout = nullptr; },
       "layout 'x' is null"},
      {"a layout of another layer count",
       [&](Runner& r) { RunnerTestAccess::Layouts(r)["x"].layout = make(2, 1); },
       "layout 'x' has 1 layers"},
      {"a layout of more rows than a trace may have",
       [&](Runner& r) { RunnerTestAccess::Layouts(r)["x"].layout = make(trace::kMaxRows + 1, 2); },
       "layout 'x' has " + std::to_string(trace::kMaxRows + 1) + " rows"},
      {"conv weights for one layer too few",
       [](Runner& r) { RunnerTestAccess::ConvWeights(r).pop_back(); },
       "conv weights for 1 of 2 layers"},
      {"one conv weight too many",
       [](Runner& r) { RunnerTestAccess::ConvWeights(r)[1].push_back(0.5f); },
       "layer 's' has " + std::to_string(weights + 1) + " conv weights"},
      {"conv weights for a plain layer",
       [](Runner& r) { RunnerTestAccess::ConvWeights(r)[0].push_back(0.5f); },
       "layer 'a' has 1 conv weights"},
      {"packed conv weights for one layer too few",
       [](Runner& r) { RunnerTestAccess::PackedConvWeights(r).pop_back(); },
       "packed conv weights for 1 layers"},
      {"a packed conv weight that differs",
       [](Runner& r) { RunnerTestAccess::PackedConvWeights(r)[1][4] += 1.0f; },
       "layer 's': packed conv weights differ from its weights"},
      {"packed conv weights for a plain layer",
       [](Runner& r) { RunnerTestAccess::PackedConvWeights(r)[0].push_back(0.5f); },
       "layer 'a' has packed conv weights"},
      {"an exit status above 2", [](Runner& r) { RunnerTestAccess::ExitStatus(r) = 3; },
       "exit status 3"},
      {"a negative exit status", [](Runner& r) { RunnerTestAccess::ExitStatus(r) = -1; },
       "exit status -1"},
      {"between statements inside expect error",
       [](Runner& r) { RunnerTestAccess::TopLevel(r) = false; },
       "between statements inside `expect error`"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Program program = Parse(text, "self.trace");
    std::ostringstream out, err;
    Runner runner(program, trace::RunOptions(), out, err);
    const std::vector<Statement> body = RunHeader(&program, &runner);
    ASSERT_EQ(body.size(), 1u);
    ASSERT_EQ(RunnerTestAccess::Execute(runner, body[0]).code, 0);  // window 2
    ASSERT_TRUE(runner.CheckInvariants().ok()) << runner.CheckInvariants().message();
    ASSERT_EQ(RunnerTestAccess::ConvWeights(runner)[1].size(), weights);
    c.corrupt(runner);
    const Status s = runner.CheckInvariants();
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.message(), c.message);
  }
}

// `expect error OP` promises that OP is refused and that the layout is
// bit-identical afterwards (TRACE.md): a refusal that changed the layout is
// reported as a failed expectation (exit 1), naming the refusal, and the run
// goes on. Here layer b's cache refuses its trim after layer a trimmed; the
// same trace with a trim every layer refuses up front is not reported.
TEST(TraceRunnerExpect, ARefusalThatChangedTheLayoutIsReported) {
  for (const bool changes : {true, false}) {
    SCOPED_TRACE(changes ? "trim 1 (layer a trims, then b refuses)" : "trim 9 (refused up front)");
    const std::string text = std::string("trace 1\nrows 1\nlayer a kv\nlayer b kv\nwindow 3\n") +
                             (changes ? "expect error trim 1\n" : "expect error trim 9\n") +
                             "expect positions 3\n";
    Program program = Parse(text, "refusal.trace");
    std::ostringstream out, err;
    Runner runner(program, trace::RunOptions(), out, err);
    std::vector<Statement> body = RunHeader(&program, &runner);
    ASSERT_EQ(body.size(), 3u);
    Layout& layout = RunnerTestAccess::Current(runner);
    ASSERT_EQ(layout.size(), 2u);
    kvspec::InvariantsTestAccess::Layers(layout)[1] =
        std::make_unique<TrimRefusingKvCache>(layout.config(1).heads, layout.config(1).dim);
    ASSERT_EQ(RunnerTestAccess::Execute(runner, body[0]).code, 0);  // window 3
    ASSERT_EQ(layout.positions(), std::vector<int32_t>{3});
    // The refusal itself happened either way.
    const uint64_t before = layout.StateHash();
    const Status refused = changes ? Status::Ok() : layout.Trim(9, false);
    ASSERT_EQ(refused.ok(), changes);
    ASSERT_EQ(layout.StateHash(), before);
    const Outcome o = RunnerTestAccess::Execute(runner, body[1]);
    EXPECT_EQ(o.code, 0) << o.message;  // a failed expectation, not a stop
    if (changes) {
      EXPECT_NE(layout.StateHash(), before);
      EXPECT_NE(err.str().find("refusal.trace:6: expected the layout unchanged after the refusal "
                               "(internal: layers out of lockstep: this cache never trims) got a "
                               "change"),
                std::string::npos)
          << err.str();
    } else {
      EXPECT_EQ(err.str(), "");
    }
    // The run went on: the next statement runs and is checked.
    EXPECT_EQ(RunnerTestAccess::Execute(runner, body[2]).code, 0);
    if (changes) {
      EXPECT_NE(err.str().find("refusal.trace:7: expected positions 3 got 2"), std::string::npos)
          << err.str();
    } else {
      EXPECT_EQ(err.str(), "");
    }
  }
}

// ------------------------------------------------------------ self-checks

std::vector<std::filesystem::path> CorpusTraces() {
  std::vector<std::filesystem::path> files;
  for (const char* folder : {"/corpus/traces", "/corpus/bad"}) {
    for (const auto& entry :
         std::filesystem::directory_iterator(std::string(KVSPEC_SOURCE_DIR) + folder)) {
      const std::string name = entry.path().filename().string();
      // limit_* traces are hostile inputs that run up to their budgets.
      if (entry.path().extension() == ".trace" && name.rfind("limit_", 0) != 0) {
        files.push_back(entry.path());
      }
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The runner's invariants (runner/runner_internal.h: the current layout
// exists, every layout has the header's layers and 1..64 rows, the conv
// weights and their packed copy agree, the status is 0, 1 or 2, and no
// statement is left half inside `expect error`) hold after every statement
// of every corpus trace that parses, refused and failed ones included, in
// every build (Runner::Run checks them only without NDEBUG). Run as Run
// runs them: statement by statement, up to the first that stops the run.
TEST(TraceRunnerInvariants, HoldAfterEveryStatementOfTheCorpus) {
  int traces = 0, statements = 0;
  for (const auto& path : CorpusTraces()) {
    const std::string text = ReadFile(path);
    Program program;
    SyntaxError error;
    const std::string name = path.filename().string();
    if (!trace::ParseTrace(text, name, &program, &error)) continue;
    trace::RunOptions options;
    for (const Statement& st : program.body) {
      if (st.op() == trace::Op::kExpectOut) options.values = true;
    }
    for (const bool emit : {false, true}) {
      options.emit = emit;
      std::ostringstream out, err;
      Runner runner(program, options, out, err);
      std::vector<Statement> body = std::move(program.body);
      program.body.clear();
      const int header = runner.Run();
      if (header == 0) {
        ++traces;
        for (const Statement& st : body) {
          const Outcome o = RunnerTestAccess::Execute(runner, st);
          ++statements;
          const Status s = runner.CheckInvariants();
          EXPECT_TRUE(s.ok()) << name << ":" << st.line << ": " << s.message();
          if (o.code) break;
        }
      }
      program.body = std::move(body);
    }
  }
  EXPECT_GE(traces, 2 * 80);  // the corpus, twice
  EXPECT_GT(statements, 4000);
}

// The parser's invariants (trace/parse_internal.h: one stored line per line
// read, at most kMaxLayers layers with one line number each, statements
// only once the body began and no more than the lines that hold one, the
// fork and extract budget) hold after every line of every corpus trace, in
// every build (Parser::Parse checks them only without NDEBUG): the parser
// is run on each prefix of the file that ends at a line end.
// The parser counts a fork or extract before it refuses the one past the
// budget, so the only parser state with more than kMaxForkExtract of them
// is the one a refused line leaves; CheckInvariants names that count, and
// holds at exactly the budget.
TEST(TraceParserInvariants, ACountPastTheForkAndExtractBudgetIsNamed) {
  const std::string head = "trace 1\nrows 1\nlayer a kv\n";
  std::string body;
  for (int i = 0; i < trace::kMaxForkExtract; ++i) {
    body += (i % 2 ? "extract 0 as e" : "fork f") + std::to_string(i) + "\n";
  }
  for (const bool over : {false, true}) {
    SCOPED_TRACE(over ? "65 statements" : "64 statements");
    const std::string text = head + body + (over ? "fork g\n" : "");
    Program program;
    SyntaxError error;
    trace::parse_internal::Parser parser("budget.trace", &program, &error);
    EXPECT_EQ(parser.Parse(text), !over) << error.message;
    const Status s = parser.CheckInvariants();
    if (over) {
      EXPECT_EQ(s.message(), std::to_string(trace::kMaxForkExtract + 1) +
                                 " fork and extract statements");
    } else {
      EXPECT_TRUE(s.ok()) << s.message();
    }
  }
}

TEST(TraceParserInvariants, HoldAfterEveryLineOfTheCorpus) {
  int prefixes = 0;
  for (const auto& path : CorpusTraces()) {
    const std::string text = ReadFile(path);
    const std::string name = path.filename().string();  // the parser keeps a view of it
    int line = 0;
    for (size_t end = 0; end < text.size(); ++end) {
      if (text[end] != '\n') continue;
      ++line;
      Program program;
      SyntaxError error;
      trace::parse_internal::Parser parser(name, &program, &error);
      const bool ok = parser.Parse(std::string_view(text).substr(0, end + 1));
      // A prefix that stops at a line of its own stops before the check;
      // one that stops at its end (an incomplete header) ran every line.
      if (!ok && error.line <= line) break;
      ++prefixes;
      const Status s = parser.CheckInvariants();
      EXPECT_TRUE(s.ok()) << name << ": after line " << line << ": " << s.message();
      EXPECT_EQ(program.lines.size(), static_cast<size_t>(line));
    }
  }
  EXPECT_GT(prefixes, 3000);
}

}  // namespace
}  // namespace kvspec

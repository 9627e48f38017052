// The runner's and the parser's own invariants, which only builds without
// NDEBUG check between statements (runner/runner.cc, trace/parse.cc): each
// broken field of the runner is named, a count past the fork and extract
// budget is named, and both hold after every statement and every line of
// the corpus, in every build.
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

#include "kvspec/core/layout.h"
#include "kvspec/trace/parse_internal.h"
#include "kvspec/trace/program.h"
#include "kvspec/runner/runner.h"
#include "kvspec/runner/runner_internal.h"

#ifndef KVSPEC_SOURCE_DIR
#error "KVSPEC_SOURCE_DIR (the source tree) must be defined"
#endif

namespace kvspec {
namespace trace::runner_internal {

// Runs statements one at a time and breaks one field of the runner (a
// friend of Runner).
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


// The runner's expectations (runner/runner_expect.cc): `expect out`
// compares every value, `expect equal` names its first difference exactly
// (the current side first) and sees every key and value float, and
// `expect error` reports a refusal that changed the layout.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "kvspec/core/invariants_test_access.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/runner/runner.h"
#include "kvspec/runner/runner_internal.h"
#include "kvspec/trace/program.h"

namespace kvspec::trace {
namespace runner_internal {

// Runs statements one at a time (a friend of Runner).
struct RunnerTestAccess {
  static Outcome Execute(Runner& r, const Statement& st) { return r.Execute(st); }
  static Layout& Current(Runner& r) { return r.Cur(); }
};

}  // namespace runner_internal

namespace {

using runner_internal::Outcome;
using runner_internal::Runner;
using runner_internal::RunnerTestAccess;

// n floats counting up from `start` in steps of 1.
std::vector<float> Filled(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// `expect out` compares every value of the query's output: a wrong value
// anywhere in the list fails the expectation, naming its line.
TEST(TraceRunnerExpect, ExpectOutComparesEveryValue) {
  const std::string text = "trace 1\nrows 1\nlayer a kv dim=4\nwindow 2\n";
  trace::RunOptions options;
  options.values = true;
  options.emit = true;
  std::ostringstream emitted, err;
  ASSERT_EQ(trace::RunTraceText(text, "out.trace", options, emitted, err), 0) << err.str();
  std::string expect;
  std::istringstream lines(emitted.str());
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind("expect out a r0 p1:", 0) == 0) expect = l;
  }
  ASSERT_FALSE(expect.empty()) << emitted.str();
  std::vector<std::string> words;
  std::istringstream split(expect);
  for (std::string w; split >> w;) words.push_back(w);
  ASSERT_EQ(words.size(), 5u + 4u);  // expect out a r0 p1: and 4 values
  options.emit = false;
  for (size_t changed = 4; changed < words.size(); ++changed) {  // 4: none
    std::string line;
    for (size_t w = 0; w < words.size(); ++w) {
      line += (w ? " " : "") + (w == changed && changed > 4 ? std::string("1000") : words[w]);
    }
    std::ostringstream out, fail;
    const int code = trace::RunTraceText(text + line + "\n", "out.trace", options, out, fail);
    if (changed == 4) {
      EXPECT_EQ(code, 0) << line << "\n" << fail.str();  // unchanged
    } else {
      EXPECT_EQ(code, 1) << "value " << changed - 5 << " changed: " << line;
      EXPECT_NE(fail.str().find("out.trace:5:"), std::string::npos) << fail.str();
    }
  }
}

// `expect equal NAME` that fails names the first difference with the
// current layout's side first and NAME's second ("positions 2 vs 0": the
// current layout holds 2 tokens, the fork none).
TEST(TraceRunnerExpect, ExpectEqualNamesTheCurrentSideFirst) {
  const std::string text =
      "trace 1\nrows 1\nlayer a kv\nfork other\nwindow 2\nexpect equal other\n";
  trace::RunOptions options;
  std::ostringstream out, err;
  EXPECT_EQ(trace::RunTraceText(text, "equal.trace", options, out, err), 1);
  EXPECT_NE(err.str().find("equal.trace:6: expected equal other got positions 2 vs 0"),
            std::string::npos)
      << err.str();
  // The other way round: the fork holds the tokens.
  const std::string other =
      "trace 1\nrows 1\nlayer a kv\nfork other\nuse other\nwindow 2\nuse main\n"
      "expect equal other\n";
  std::ostringstream out2, err2;
  EXPECT_EQ(trace::RunTraceText(other, "equal.trace", options, out2, err2), 1);
  EXPECT_NE(err2.str().find("equal.trace:8: expected equal other got positions 0 vs 2"),
            std::string::npos)
      << err2.str();
}

// A failed `expect equal NAME` names the first difference, the whole of
// stderr compared: the row counts; the positions; per layer in header
// order and per row, a recurrent layer's conv state, then its recurrent
// state (a conv kernel of 1 keeps no conv state, so only the recurrent
// state can differ); an attention layer's first differing token by its
// position, in the row it is in (row 0 left-padded by one column, so the
// rows' slots hold different positions).
TEST(TraceRunnerExpect, ExpectEqualNamesItsFirstDifferenceExactly) {
  const std::string header = "trace 1\nrows 2\nlayer s ssm conv=2\nlayer g ssm conv=1\nlayer a kv\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"extract 1 as one\nexpect equal one\n", "t.trace:7: expected equal one got rows 2 vs 1\n"},
      {"fork b\nwindow 1\nexpect equal b\n", "t.trace:8: expected equal b got positions 1,1 vs 0,0\n"},
      {"window 3 left=1,0\nfork b\ndecode ids=2/9\nuse b\ndecode ids=2/3\nexpect equal main\n",
       "t.trace:11: expected equal main got layer s row 1: conv state differs\n"},
  };
  for (const auto& [body, want] : cases) {
    trace::RunOptions options;
    std::ostringstream out, err;
    const int status = trace::RunTraceText(header + body, "t.trace", options, out, err);
    EXPECT_EQ(status, 1) << body;
    EXPECT_EQ(err.str(), want) << body;
  }
  // Only the recurrent state of `g` (no conv state) or only the tokens of
  // `a` can differ when the ssm layer with a conv state is left out.
  const std::vector<std::tuple<std::string, std::string, std::string>> layers = {
      {"layer g ssm conv=1\nlayer a kv\n", "window 3 left=1,0\nfork b\ndecode ids=2/9\nuse b\n"
                                           "decode ids=2/3\nexpect equal main\n",
       "t.trace:10: expected equal main got layer g row 1: recurrent state differs\n"},
      {"layer a kv\n", "window 3 left=1,0\nfork b\ndecode ids=2/9\nuse b\ndecode ids=2/3\n"
                       "expect equal main\n",
       "t.trace:9: expected equal main got layer a row 1 position 3 differs\n"},
      {"layer a kv\nlayer z kv dim=2\n", "window 3 left=1,0\nfork b\ndecode ids=5/3\nuse b\n"
                                         "decode ids=2/3\nexpect equal main\n",
       "t.trace:10: expected equal main got layer a row 0 position 2 differs\n"},
  };
  for (const auto& [layer_lines, body, want] : layers) {
    trace::RunOptions options;
    std::ostringstream out, err;
    const std::string text = "trace 1\nrows 2\n" + layer_lines + body;
    EXPECT_EQ(trace::RunTraceText(text, "t.trace", options, out, err), 1) << text;
    EXPECT_EQ(err.str(), want) << text;
  }
  // Equal: a copy of every kind of layer; and two rings (window 2) that
  // differ only in a token no later query sees (position 1 once 2 is
  // held: a ring compares its last W - 1 tokens).
  const std::vector<std::string> equal = {
      header + "window 3 left=1,0\nfork b\nexpect equal b\ndecode\nuse b\ndecode\nexpect equal main\n",
      "trace 1\nrows 1\nlayer r rotating window=2\nfork b\ndecode\ndecode ids=1\ndecode\n"
      "use b\ndecode\ndecode ids=9\ndecode\nexpect equal main\n"};
  for (const std::string& text : equal) {
    trace::RunOptions options;
    std::ostringstream out, err;
    EXPECT_EQ(trace::RunTraceText(text, "t.trace", options, out, err), 0) << text;
    EXPECT_EQ(err.str(), "") << text;
  }
}

// `expect equal` compares every key and value float of every head of each
// token it compares: two layouts whose attention layer differs in any one
// float (of a key or a value, of either head, of either row) differ at
// that token's position, in that row.
TEST(TraceRunnerExpect, DifferenceSeesEveryKeyAndValueFloatOfEveryHead) {
  LayerConfig kv;
  kv.name = "a";
  kv.heads = 2;
  kv.dim = 3;
  const int rows = 2, tokens = 3;
  const size_t per_token = 2 * 3, n = rows * tokens * per_token;
  const std::vector<float> q = Filled(n, 0.0f), k = Filled(n, 1.0f), v = Filled(n, -50.0f);
  auto make = [&](const std::vector<float>& keys, const std::vector<float>& values) {
    std::unique_ptr<Layout> layout;
    EXPECT_TRUE(Layout::Create(rows, {kv}, &layout).ok());
    if (layout) {
      EXPECT_TRUE(layout
                      ->Forward(ForwardColumns::Dense(rows, tokens),
                                {AttentionIO(q.data(), keys.data(), values.data(), nullptr)})
                      .ok());
    }
    return layout;
  };
  const std::unique_ptr<Layout> base = make(k, v);
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(trace::runner_internal::Difference(*base, *make(k, v)), "");
  for (int which = 0; which < 2; ++which) {
    for (size_t i = 0; i < n; ++i) {
      std::vector<float> k2 = k, v2 = v;
      (which == 0 ? k2 : v2)[i] += 0.5f;
      const std::unique_ptr<Layout> other = make(k2, v2);
      ASSERT_NE(other, nullptr);
      const size_t row = i / (tokens * per_token), pos = i / per_token % tokens;
      EXPECT_EQ(trace::runner_internal::Difference(*base, *other),
                "layer a row " + std::to_string(row) + " position " + std::to_string(pos) +
                    " differs")
          << (which == 0 ? "key " : "value ") << i;
    }
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

}  // namespace
}  // namespace kvspec::trace

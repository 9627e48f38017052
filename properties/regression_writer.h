// Every property failure that a trace can state becomes a trace
// (docs/TRACE.md), BUILD/regressions/properties/<Property>-<hash>.trace
// in the build tree; copied into corpus/regressions/properties/ (the
// failure prints the `cp` command; tools/props --import merges many), ctest
// replays it (label `regression`) before the properties and the fuzz
// replays, so a failure found once is checked first on every later run.
//
// A stateful property records, while it runs, the trace of the current
// case: the header, then per command the statement and the expectations its
// model states (`expect sees`, `expect positions`, `expect trimmable`, or
// `expect error OP` for an operation the model refuses). The recording of
// the last case that failed is kept; RapidCheck's shrinking ends with the
// minimal failing case, so after the property has failed that recording is
// the shrunk case. The writer then adds `expect out` lines computed by the
// independent double-precision oracle (testing/values_oracle.h), writes
// the file with a comment naming the property, the seed and the
// RC_PARAMS reproduce string, runs it once through the trace runner of this
// build (a trace that exits 0 here reproduces nothing: the writer says so)
// and prints its path and the command that replays it.
//
// Use KVSPEC_RECORDED_PROP(TestCase, Name) in place of
// RC_GTEST_PROP(TestCase, Name, ()) and call Recorder::Get().Begin(header)
// once per case, then Statement()/Expect() as the case runs.
// KVSPEC_RECORDED_PROP_P(Suite, Name) is the same property run once per
// Highway target (a value-parameterised suite: instantiate it with
// KVSPEC_FOR_EACH_TARGET(Suite), testing/target_params.h); the case runs
// under that target's TargetScope, the trace written carries a
// `# target: NAME` comment and its replay command `--target NAME`. A
// property that never calls Begin() writes no trace (RapidCheck's
// reproduce string is all there is); the macros suit it as well.
//
// The folder is regressions/properties/ of the build tree this binary was
// built in (KVSPEC_BINARY_DIR: ctest never writes into the source tree);
// the environment variable KVSPEC_REGRESSION_DIR replaces it (tools/props
// sets it per run), KVSPEC_REGRESSION_DIR=off writes nothing.
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <functional>
#include <string>
#include <vector>

#include "kvspec/testing/target_params.h"

namespace kvspec::regress {

// The trace of one RapidCheck case as it runs.
class Recorder {
 public:
  static Recorder& Get();

  // Starts a case: `header` is the trace header (`trace 1`, `rows`, the
  // `layer` lines), `note` an optional comment line (without '#') saying
  // where the case comes from.
  void Begin(const std::string& header, const std::string& note = "");
  // One statement of the case; `forward` marks a `window` or `decode` that
  // runs (the writer adds the oracle's `expect out` lines after it).
  void Statement(const std::string& line, bool forward = false);
  // An expectation about the statement before it.
  void Expect(const std::string& line);

  // Used by CheckAndRecord.
  void ResetProperty();
  void ResetCase() { current_ = Case(); }
  void CaseFailed();
  bool HasFailure() const { return have_failure_; }
  // The failing case's trace (statements and expectations; the writer adds
  // the `expect out` lines and the comment).
  std::string FailureBody() const;
  std::string FailureNote() const { return failed_.note; }

 private:
  struct Line {
    std::string text;
    bool forward = false;
  };
  struct Case {
    bool begun = false;
    std::string header;
    std::string note;
    std::vector<Line> lines;
  };
  Case current_;
  Case failed_;
  bool have_failure_ = false;
};

// The folder regression traces go to ("" when writing is turned off).
std::string RegressionDir();
// corpus/regressions/properties/ of the source tree (what ctest replays).
std::string SourceRegressionDir();
// The `kvspec` command of this build.
std::string KvspecCommand();

// Writes the recorded failing case of property `property` (e.g.
// "LayoutProps.KvOperationSequencesMatchTheModel"); returns the path, or ""
// when nothing was written. `seed` and `reproduce` go into the comment;
// `message` (RapidCheck's failure description) too, shortened. Prints the
// path, the replay command and what this build's runner says to `log`.
// `target` (a Highway target name, "" for none) goes into the comment
// (`# target: NAME`) and the replay command (`--target NAME`).
std::string WriteRegression(const std::string& property, const std::string& binary,
                            const std::string& target, uint64_t seed,
                            const std::string& reproduce, const std::string& message,
                            std::ostream& log);

// Runs `property` under RapidCheck (`id` names it in RapidCheck's output
// and reproduce string) and, when it fails, writes the shrunk case with
// WriteRegression, naming the running gtest test and `target`; returns
// whether it held. A failure is reported with ADD_FAILURE.
bool Check(const std::string& id, const std::string& target,
           const std::function<void()>& property);

// Check() for the running gtest test (id: its full name).
void CheckAndRecord(const std::string& target, const std::function<void()>& property);

}  // namespace kvspec::regress

// A RapidCheck property without arguments, run as a Google Test, whose
// shrunk failing case is written as a regression trace.
#define KVSPEC_RECORDED_PROP(TestCase, Name)                                       \
  void kvspecRecordedProp_##TestCase##_##Name();                                   \
  TEST(TestCase, Name) {                                                           \
    ::kvspec::regress::CheckAndRecord("", &kvspecRecordedProp_##TestCase##_##Name); \
  }                                                                                \
  void kvspecRecordedProp_##TestCase##_##Name()

// The same, once per Highway target: `Suite` is declared here (a
// TestWithParam<int64_t>); instantiate it with KVSPEC_FOR_EACH_TARGET(Suite)
// once per file. Test names end in the target (".../AVX2").
#define KVSPEC_RECORDED_PROP_P(Suite, Name)                                        \
  void kvspecRecordedProp_##Suite##_##Name();                                      \
  TEST_P(Suite, Name) {                                                            \
    ::kvspec::testing::TargetScope kvspec_target_scope(GetParam());                \
    ::kvspec::regress::CheckAndRecord(hwy::TargetName(GetParam()),                 \
                                      &kvspecRecordedProp_##Suite##_##Name);       \
  }                                                                                \
  void kvspecRecordedProp_##Suite##_##Name()

// Every property failure becomes a trace (../shared/TRACE.md) in the
// repository: corpus/regressions/properties/<Property>-<hash>.trace, which
// ctest replays (label `regression`) before the properties and the fuzz
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
//
// The folder is corpus/regressions/properties/ of the source tree this
// binary was built from (KVSPEC_SOURCE_DIR); the environment variable
// KVSPEC_REGRESSION_DIR replaces it, KVSPEC_REGRESSION_DIR=off writes
// nothing.
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <functional>
#include <string>
#include <vector>

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
// The `kvspec` command of this build.
std::string KvspecCommand();

// Writes the recorded failing case of property `property` (e.g.
// "LayoutProps.KvOperationSequencesMatchTheModel"); returns the path, or ""
// when nothing was written. `seed` and `reproduce` go into the comment;
// `message` (RapidCheck's failure description) too, shortened. Prints the
// path, the replay command and what this build's runner says to `log`.
std::string WriteRegression(const std::string& property, const std::string& binary,
                            uint64_t seed, const std::string& reproduce,
                            const std::string& message, std::ostream& log);

// Runs `property` under RapidCheck as RC_GTEST_PROP does and, when it
// fails, writes the shrunk case with WriteRegression.
void CheckAndRecord(const char* test_case, const char* name,
                    const std::function<void()>& property);

}  // namespace kvspec::regress

// A RapidCheck property without arguments, run as a Google Test, whose
// shrunk failing case is written as a regression trace.
#define KVSPEC_RECORDED_PROP(TestCase, Name)                                       \
  void kvspecRecordedProp_##TestCase##_##Name();                                   \
  TEST(TestCase, Name) {                                                           \
    ::kvspec::regress::CheckAndRecord(#TestCase, #Name,                            \
                                      &kvspecRecordedProp_##TestCase##_##Name);    \
  }                                                                                \
  void kvspecRecordedProp_##TestCase##_##Name()

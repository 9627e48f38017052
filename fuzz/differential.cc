#include "fuzz/differential.h"

#include <algorithm>
#include <sstream>

#include "core/trace_runner.h"

namespace kvspec::fuzz {
namespace {

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::string JoinInts(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s.empty() ? "none" : s;
}

// Reads one standard error line of the runner into *outcome.
void ReadErrorLine(const std::string& file, const std::string& line, RunnerOutcome* outcome) {
  const std::string prefix = file + ":";
  size_t i = prefix.size();
  size_t digits = 0;
  int number = 0;
  if (line.compare(0, prefix.size(), prefix) == 0) {
    while (i < line.size() && line[i] >= '0' && line[i] <= '9' && digits < 9) {
      number = number * 10 + (line[i] - '0');
      ++i;
      ++digits;
    }
  }
  const std::string rest = digits ? line.substr(i) : std::string();
  if (rest.rfind(": error: ", 0) == 0 || rest.rfind(":1: ", 0) == 0) {
    // A refusal, or a limit (reported like a syntax error at column 1).
    if (outcome->stop_line == 0) {
      outcome->stop_line = number;
      return;
    }
  } else if (rest.rfind(": expected ", 0) == 0) {
    outcome->failed_lines.push_back(number);
    return;
  }
  outcome->other.push_back(line);
}

}  // namespace

RunnerOutcome RunRunner(const trace::Program& program, size_t max_bytes) {
  trace::RunOptions options;
  options.max_bytes = max_bytes;
  std::ostringstream out, err;
  RunnerOutcome outcome;
  outcome.exit_status = trace::RunProgram(program, options, out, err);
  outcome.out = out.str();
  outcome.err = err.str();
  for (const std::string& line : SplitLines(outcome.err)) {
    ReadErrorLine(program.file, line, &outcome);
  }
  return outcome;
}

std::string Compare(const RunnerOutcome& runner, const ModelOutcome& model) {
  if (!runner.other.empty()) return "the runner printed an unexpected line: " + runner.other[0];
  if (runner.exit_status != model.exit_status) {
    return "exit status: runner " + std::to_string(runner.exit_status) + ", model " +
           std::to_string(model.exit_status);
  }
  if (runner.stop_line != model.stop_line) {
    return "stopped at line: runner " + std::to_string(runner.stop_line) + ", model " +
           std::to_string(model.stop_line) +
           (model.stop_reason.empty() ? "" : " (model: " + model.stop_reason + ")");
  }
  if (runner.failed_lines != model.failed_lines) {
    return "failed expectations on lines: runner " + JoinInts(runner.failed_lines) +
           ", model " + JoinInts(model.failed_lines);
  }
  if (runner.out != model.out) return "standard output differs";
  return "";
}

std::string DivergenceReport(std::string_view trace_text, const RunnerOutcome& runner,
                             const ModelOutcome& model, const std::string& difference) {
  std::ostringstream s;
  s << "==== kvspec differential fuzz: the runner and the model disagree\n"
    << "difference: " << difference << "\n"
    << "==== trace (save it and run `kvspec trace FILE`)\n"
    << trace_text << (trace_text.empty() || trace_text.back() == '\n' ? "" : "\n");
  const std::vector<std::string> a = SplitLines(runner.out), b = SplitLines(model.out);
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  if (i < a.size() || i < b.size()) {
    s << "==== first differing stdout line (" << i + 1 << ")\n"
      << "runner: " << (i < a.size() ? a[i] : "<end of output>") << "\n"
      << "model:  " << (i < b.size() ? b[i] : "<end of output>") << "\n";
  }
  s << "==== runner: exit " << runner.exit_status << "\n--- stdout\n"
    << runner.out << "--- stderr\n"
    << runner.err << "==== model: exit " << model.exit_status;
  if (model.stop_line) s << ", stopped at line " << model.stop_line << ": " << model.stop_reason;
  s << ", failed expectations: " << JoinInts(model.failed_lines) << "\n--- stdout\n"
    << model.out << "====\n";
  return s.str();
}

}  // namespace kvspec::fuzz

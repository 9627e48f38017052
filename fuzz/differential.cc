#include "kvspec/fuzz/differential.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <system_error>
#include <cstdlib>
#include <sstream>
#include <string_view>

#include "kvspec/runner/runner.h"
#include "kvspec/fuzz/known_issues.h"

namespace kvspec::fuzz {

namespace {

// Calls f(line) for each line of `text`, without its line end, as
// std::getline would read them (no empty line after a final '\n').
template <class F>
void ForEachLine(std::string_view text, F&& f) {
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    if (end == std::string_view::npos) {
      f(text.substr(start));
      return;
    }
    f(text.substr(start, end - start));
    start = end + 1;
  }
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  ForEachLine(text, [&](std::string_view line) { lines.emplace_back(line); });
  return lines;
}

bool WorthRunning(const trace::Program& program, size_t max_statements, double max_storage,
                  double max_work, std::string* why) {
  if (program.body.size() > max_statements) {
    *why = "more than " + std::to_string(max_statements) + " statements";
    return false;
  }
  const Cost cost = EstimateCost(program);
  if (cost.storage > max_storage || cost.work > max_work) {
    *why = "too large";
    return false;
  }
  std::string issue;
  if (MayReachKnownIssue(program, &issue)) {
    *why = "may reach a known issue: " + issue;
    return false;
  }
  return true;
}

namespace {

std::string JoinInts(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s.empty() ? "none" : s;
}

// Reads one standard error line of the runner into *outcome.
// A standard error line `FILE:LINE...`: LINE into *number and what follows
// it into *rest (empty, and *number 0, for a line of another form).
void SplitErrorLine(const std::string& file, std::string_view line, int* number,
                    std::string_view* rest) {
  const std::string prefix = file + ":";
  size_t i = prefix.size();
  size_t digits = 0;
  *number = 0;
  if (line.substr(0, prefix.size()) == prefix) {
    while (i < line.size() && line[i] >= '0' && line[i] <= '9' && digits < 9) {
      *number = *number * 10 + (line[i] - '0');
      ++i;
      ++digits;
    }
  }
  *rest = digits ? line.substr(i) : std::string_view();
}

void ReadErrorLine(const std::string& file, const std::string& line, RunnerOutcome* outcome) {
  int number = 0;
  std::string_view rest;
  SplitErrorLine(file, line, &number, &rest);
  if (rest.rfind(": error: ", 0) == 0 || rest.rfind(": limit: ", 0) == 0 ||
      rest.rfind(":1: ", 0) == 0) {
    // A refusal, or a limit.
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

// The runner's standard output as the model prints it: no `out` lines, and
// `state LAYER rR` without its hash (when the hash is 16 hex digits).
std::string WithoutValues(const std::string& out) {
  std::string kept;
  kept.reserve(out.size());
  ForEachLine(out, [&](std::string_view line) {
    if (StartsWith(line, "out ")) return;
    if (StartsWith(line, "state ")) {
      const size_t space = line.rfind(' ');
      const std::string_view hash = line.substr(space + 1);
      if (hash.size() == 16 &&
          hash.find_first_not_of("0123456789abcdef") == std::string_view::npos) {
        line = line.substr(0, space);
      }
    }
    kept.append(line.data(), line.size());
    kept += '\n';
  });
  return kept;
}

bool Contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::vector<int> Without(const std::vector<int>& v, const std::vector<int>& drop) {
  std::vector<int> kept;
  for (int x : v) {
    if (!Contains(drop, x)) kept.push_back(x);
  }
  return kept;
}

// Standard error without the values printed after `got` on failed
// `expect out` lines (they may differ within the tolerance).
std::string WithoutGotValues(const std::string& err) {
  std::string kept;
  kept.reserve(err.size());
  ForEachLine(err, [&](std::string_view line) {
    const size_t got = line.find(" got ");
    if (line.find(": expected out ") != std::string_view::npos &&
        got != std::string_view::npos) {
      line = line.substr(0, got);
    }
    kept.append(line.data(), line.size());
    kept += '\n';
  });
  return kept;
}

// The next whitespace-separated token of `s` from *at (as `istream >>
// std::string` reads it) into *token; false at the end.
bool NextToken(std::string_view s, size_t* at, std::string_view* token) {
  constexpr std::string_view kSpace = " \t\n\v\f\r";
  const size_t begin = s.find_first_not_of(kSpace, *at);
  if (begin == std::string_view::npos) {
    *at = s.size();
    return false;
  }
  const size_t end = std::min(s.find_first_of(kSpace, begin), s.size());
  *token = s.substr(begin, end - begin);
  *at = end;
  return true;
}

// strtod of the whole token: *value and true when it reads all of it.
// std::from_chars first (no copy, no locale; the same correctly rounded
// value), std::strtod for whatever it does not read in full (a '+' sign,
// hexadecimal, a value out of range), so the result is strtod's for every
// token.
bool ParseWhole(std::string_view token, double* value) {
  const std::from_chars_result r = std::from_chars(token.data(), token.data() + token.size(),
                                                   *value, std::chars_format::general);
  if (r.ec == std::errc() && r.ptr == token.data() + token.size()) return true;
  const std::string copy(token);
  char* end = nullptr;
  *value = std::strtod(copy.c_str(), &end);
  return *end == '\0';
}

// Whether two `out LAYER rR pP: V..` lines name the same query and their
// values agree within 1e-4 * (1 + |reference|); `ref` is the reference.
bool SameOutLine(std::string_view fast, std::string_view ref, std::string* problem) {
  const size_t colon = fast.find(':');
  if (colon == std::string_view::npos ||
      fast.substr(0, colon) != ref.substr(0, std::min(ref.find(':'), ref.size()))) {
    *problem = "out lines name different queries";
    return false;
  }
  const std::string_view va = fast.substr(colon + 1);
  const std::string_view vb = ref.substr(ref.find(':') + 1);
  size_t at_a = 0, at_b = 0;
  std::string_view ta, tb;
  while (NextToken(va, &at_a, &ta)) {
    if (!NextToken(vb, &at_b, &tb)) {
      *problem = "out value counts";
      return false;
    }
    // Values that are not numbers (nan, inf) must be printed the same.
    double x = 0, y = 0;
    const bool whole_a = ParseWhole(ta, &x);
    const bool whole_b = ParseWhole(tb, &y);
    const bool numbers = whole_a && whole_b && std::isfinite(x) && std::isfinite(y);
    if (numbers ? !(std::fabs(x - y) <= 1e-4 * (1 + std::fabs(y))) : ta != tb) {
      *problem = "out values beyond 1e-4 * (1 + |reference|)";
      return false;
    }
  }
  if (NextToken(vb, &at_b, &tb)) {
    *problem = "out value counts";
    return false;
  }
  return true;
}

}  // namespace

Cost EstimateCost(const trace::Program& program) {
  using trace::Op;
  using trace::Statement;
  // Per row: bytes of one stored column over the attention layers, the
  // recurrent states (an ssm cache double-buffers them: 2 x ((conv - 1) * C
  // + Hv * dv * dk) floats), the round record of one verified token and a
  // forward's inputs and outputs per column (q, k, v, o of attention
  // layers; x, gate, beta, y of ssm layers; the conv weights once).
  double bytes_per_column = 0, state_bytes = 0, record_per_token = 0, io_per_column = 0;
  double io_fixed = 0, values_per_column = 0;
  struct Attention {
    double window, hd;  // window: the columns a query may see (its ring's capacity)
  };
  std::vector<Attention> attention;
  for (const LayerConfig& d : program.layers) {
    if (d.kind == CacheKind::kSsm) {
      const double C = double(d.SsmChannels()), hv = d.heads, hk = d.KeyHeads();
      state_bytes += 2 * 4.0 * ((d.conv - 1) * C + hv * d.dv * d.dk);
      record_per_token += 4.0 * (C + 2 * hk * d.dk + hv * d.dv + hv * d.dk + hv);
      io_per_column += 4.0 * (C + 2 * hv + hv * d.dv);
      io_fixed += 4.0 * d.conv * C;
      values_per_column += hv * d.dv;
    } else {
      const double hd = double(d.heads) * d.dim;
      bytes_per_column += 8.0 * hd + 4;
      io_per_column += 16.0 * hd;
      values_per_column += hd;
      attention.push_back({d.window > 0 ? double(d.RingCapacity()) : 1e300, hd});
    }
  }
  Cost cost;
  cost.storage = program.rows * state_bytes;  // the states, at creation
  double columns = 0;  // every column ever written, per row
  double layouts = 1;
  double rows = program.rows;
  bool armed = false;
  for (const Statement& outer : program.body) {
    const bool nested =
        outer.op() == Op::kExpectError && outer.Get<trace::ExpectError>().inner;
    const Statement& st = nested ? *outer.Get<trace::ExpectError>().inner : outer;
    if (st.op() == Op::kFork || st.op() == Op::kExtract) layouts += 1;
    if (st.op() == Op::kJoin) rows = std::min(rows * 2, double(trace::kMaxRows));
    if (st.op() == Op::kArm) armed = true;
    if (st.op() == Op::kAccept) armed = false;
    if (st.op() != Op::kWindow && st.op() != Op::kDecode) continue;
    const double L = st.op() == Op::kWindow ? st.Get<trace::WindowOp>().columns : 1;
    columns += L;
    // Growth by 1.5x from at least 16 columns.
    const double held = (columns + 16) * 1.5;
    // Stored columns and states of every layout (at most).
    const double stored = layouts * rows * (held * bytes_per_column + state_bytes);
    double visible = 0;
    for (const Attention& a : attention) visible += std::min(held, a.window + L);
    // The forward's inputs and outputs, the round record, and the
    // read-back's tags and lines (`sees`, `out`) of every query, kept until
    // the forward's lines are printed.
    const double forward = rows * L * (io_per_column + (armed ? record_per_token : 0) +
                                       visible * 20 + values_per_column * 16) +
                           io_fixed;
    cost.storage = std::max(cost.storage, stored + forward);
  }
  {
    // Work: the estimate the caps of fuzz_trace_parse and fuzz_targets were
    // set with, every layout (joins double them) as large as the largest
    // and each forward reading every column ever written.
    double lanes = 0, all_columns = 0, all_layouts = 1;
    for (const LayerConfig& d : program.layers) {
      lanes += d.kind == CacheKind::kSsm ? double(d.heads) * d.dv * d.dk : double(d.heads) * d.dim;
    }
    for (const Statement& outer : program.body) {
      const bool nested =
          outer.op() == Op::kExpectError && outer.Get<trace::ExpectError>().inner;
      const Statement& st = nested ? *outer.Get<trace::ExpectError>().inner : outer;
      if (st.op() == Op::kWindow) all_columns += st.Get<trace::WindowOp>().columns;
      if (st.op() == Op::kDecode) all_columns += 1;
      if (st.op() == Op::kFork || st.op() == Op::kExtract) all_layouts += 1;
      if (st.op() == Op::kJoin) all_layouts *= 2;
    }
    const double held = all_columns > 0 ? (all_columns + 16) * 1.5 : 0;
    cost.work = all_layouts * program.rows * held * held * (lanes + 8);
    if (held > 0) {
      // A rotating layer allocates its whole ring (its capacity) at its
      // first forward, and the read-back asks the mask about every slot of
      // it for every query.
      double rings = 0;
      for (const LayerConfig& d : program.layers) {
        if (d.kind != CacheKind::kRotating || d.RingCapacity() <= held) continue;
        const double hd = double(d.heads) * d.dim;
        rings += all_layouts * program.rows * (double(d.RingCapacity()) - held) * (8 * hd + 4);
        cost.work += all_layouts * program.rows * held * (double(d.RingCapacity()) - held) *
                     (hd + 8);
      }
      cost.storage += rings;
    }
    // An `expect error` hashes the whole layout before and after (8 bytes a
    // step).
    double refusals = 0;
    for (const Statement& st : program.body) refusals += st.op() == Op::kExpectError;
    cost.work += refusals * 2 * cost.storage / 8;
  }
  return cost;
}

RunnerOutcome RunRunner(const trace::Program& program, size_t max_bytes, bool values,
                        bool reference_kernels, bool emit) {
  trace::RunOptions options;
  options.max_bytes = max_bytes;
  options.values = values;
  options.reference_kernels = reference_kernels;
  options.emit = emit;
  std::ostringstream out, err;
  RunnerOutcome outcome;
  outcome.file = program.file;
  outcome.exit_status = trace::RunProgram(program, options, out, err);
  outcome.out = out.str();
  outcome.err = err.str();
  for (const std::string& line : SplitLines(outcome.err)) {
    ReadErrorLine(program.file, line, &outcome);
  }
  return outcome;
}

std::string Compare(const RunnerOutcome& runner, const testing::ModelOutcome& model) {
  if (!runner.other.empty()) return "the runner printed an unexpected line: " + runner.other[0];
  // An undecided expectation the runner failed makes the exit status 1.
  int model_exit = model.exit_status;
  for (int line : runner.failed_lines) {
    if (Contains(model.undecided_lines, line)) model_exit = std::max(model_exit, 1);
  }
  if (runner.exit_status != model_exit) {
    return "exit status: runner " + std::to_string(runner.exit_status) + ", model " +
           std::to_string(model_exit);
  }
  if (runner.stop_line != model.stop_line) {
    return "stopped at line: runner " + std::to_string(runner.stop_line) + ", model " +
           std::to_string(model.stop_line) +
           (model.stop_reason.empty() ? "" : " (model: " + model.stop_reason + ")");
  }
  const std::vector<int> runner_failed = Without(runner.failed_lines, model.undecided_lines);
  const std::vector<int> model_failed = Without(model.failed_lines, model.undecided_lines);
  if (runner_failed != model_failed) {
    return "failed expectations on lines: runner " + JoinInts(runner_failed) + ", model " +
           JoinInts(model_failed) +
           (model.undecided_lines.empty()
                ? ""
                : " (undecided lines left out: " + JoinInts(model.undecided_lines) + ")");
  }
  if (WithoutValues(runner.out) != model.out) return "standard output differs";
  return "";
}

// Standard error without the failure lines of the expectations on the
// `undecided` lines.
std::string WithoutUndecided(const RunnerOutcome& run, const std::vector<int>& undecided) {
  if (undecided.empty()) return run.err;
  std::string kept;
  kept.reserve(run.err.size());
  ForEachLine(run.err, [&](std::string_view line) {
    int number = 0;
    std::string_view rest;
    SplitErrorLine(run.file, line, &number, &rest);
    if (rest.substr(0, 11) == ": expected " && Contains(undecided, number)) return;
    kept.append(line.data(), line.size());
    kept += '\n';
  });
  return kept;
}

// The exit status with the failures of the `undecided` lines left out: 0 or
// 1 by the other failed expectations; other statuses as they are.
int DecidedExit(const RunnerOutcome& run, const std::vector<int>& undecided) {
  if (run.exit_status != 0 && run.exit_status != 1) return run.exit_status;
  return Without(run.failed_lines, undecided).empty() ? 0 : 1;
}

std::string CompareKernelSets(const RunnerOutcome& fast, const RunnerOutcome& ref,
                              const std::vector<int>& undecided) {
  // Line by line over both outputs, as SplitLines would cut them.
  const std::string_view a = fast.out, b = ref.out;
  size_t at_a = 0, at_b = 0;
  for (size_t i = 0;; ++i) {
    const auto where = [i] { return " (output line " + std::to_string(i + 1) + ")"; };
    const bool more_a = at_a < a.size(), more_b = at_b < b.size();
    if (!more_a && !more_b) break;
    if (!more_a || !more_b) return "different numbers of output lines" + where();
    const size_t end_a = std::min(a.find('\n', at_a), a.size());
    const size_t end_b = std::min(b.find('\n', at_b), b.size());
    const std::string_view la = a.substr(at_a, end_a - at_a);
    const std::string_view lb = b.substr(at_b, end_b - at_b);
    at_a = end_a + 1;
    at_b = end_b + 1;
    std::string problem;
    if (StartsWith(la, "state ") && StartsWith(lb, "state ")) {
      if (la.substr(0, la.rfind(' ')) != lb.substr(0, lb.rfind(' '))) {
        return "state lines" + where();
      }
    } else if (StartsWith(la, "out ") && StartsWith(lb, "out ")) {
      if (!SameOutLine(la, lb, &problem)) return problem + where();
    } else if (la != lb) {
      return "a line differs" + where();
    }
  }
  if (DecidedExit(fast, undecided) != DecidedExit(ref, undecided)) {
    return "exit status: Highway " + std::to_string(fast.exit_status) + ", reference " +
           std::to_string(ref.exit_status);
  }
  if (WithoutGotValues(WithoutUndecided(fast, undecided)) !=
      WithoutGotValues(WithoutUndecided(ref, undecided))) {
    return "standard error";
  }
  return "";
}

std::string KernelReport(std::string_view who, std::string_view trace_text,
                         const RunnerOutcome& fast, const RunnerOutcome& ref,
                         const std::string& difference) {
  std::ostringstream s;
  s << who << ": Highway and reference kernels disagree: " << difference << "\n"
    << "--- trace\n"
    << trace_text << (trace_text.empty() || trace_text.back() == '\n' ? "" : "\n")
    << "--- Highway (exit " << fast.exit_status << ")\n"
    << fast.out << fast.err << "--- reference (exit " << ref.exit_status << ")\n"
    << ref.out << ref.err;
  return s.str();
}

std::string DivergenceReport(std::string_view trace_text, const RunnerOutcome& runner,
                             const testing::ModelOutcome& model, const std::string& difference) {
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

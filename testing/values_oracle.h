// A double-precision oracle for the numbers a trace carries
// (docs/TRACE.md, "Values"), written independently of core/ and
// kernels/: its own mix(), streams, token contents, conv weights, softmax
// attention and gated-DeltaNet recurrence, all in plain loops over doubles.
//
// The rules are not derived again here: the trace is read by the trace
// format's parser (trace/program.h) and run on the trace model
// (testing/trace_model.h), which says, after each forward, which real
// queries it had and which tokens each one sees. The numbers depend only on
// that, by definition:
//   - an attention query's output is softmax attention over the tokens the
//     model says it sees (its row's real tokens at positions
//     max(0, p-W+1) .. p);
//   - a recurrent token's output is y after replaying the row's real
//     tokens 0 .. p in order from a zero state.
// Pads, physical placement, rings and masks do not matter to it.
//
// Every operation is supported; expectations are skipped (they are the
// runner's business). The first statement the model refuses (or cannot
// run) stops the evaluation with an error.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvspec::oracle {

// One query (attention) or token (recurrent) of a forward.
struct Query {
  int layer = 0;  // index in header order
  std::string layer_name;
  bool attention = false;  // kv or rotating
  int row = 0;
  int32_t pos = 0;
  // Attention only: the visible tokens as (pos, id), ascending pos.
  std::vector<std::pair<int32_t, int32_t>> sees;
  // Attention: o of every head, head-major (heads * dim values).
  // Recurrent: y of every value head, head-major (heads * dv values).
  std::vector<double> values;
};

// One executed statement.
struct Step {
  int line = 0;                    // 1-based line in the text
  std::string op;                  // "window", "decode", "trim", "arm", "accept", ...
  bool forward = false;            // window or decode
  bool changes_positions = false;  // window, decode, trim, accept
  // Forwards: every real query, in the order `kvspec trace --values` prints
  // its `out` lines (layers in header order, rows ascending, positions
  // ascending).
  std::vector<Query> queries;
  // Every row's next position in the current layout after the statement.
  std::vector<int32_t> positions;
};

struct Result {
  bool ok = false;
  std::string error;  // "LINE: message" when !ok
  int rows = 0;
  std::vector<std::string> layer_names;
  std::vector<Step> steps;  // the statements executed (expectations skipped)
};

// Reads and runs `text`. Stops at the first problem (ok = false; the steps
// before it are kept).
Result Evaluate(std::string_view text);

// `sees` items as the trace format prints them: "pos" or "pos:id",
// separated by single spaces, ascending pos.
std::string FormatSees(const std::vector<std::pair<int32_t, int32_t>>& sees);

// A value with 9 significant digits ("%.9g").
std::string FormatValue(double value);

}  // namespace kvspec::oracle

// A double-precision oracle for the numbers a trace carries
// (../shared/TRACE.md, "Values"), written independently of core/: its own
// reading of the trace text, its own executor, its own mix(), streams,
// token contents, conv weights, softmax attention and gated-DeltaNet
// recurrence, all in plain loops over doubles.
//
// The executor knows only what the numbers depend on: each row's list of
// real tokens (their ids; a token's position is its index in the list).
// Pads, physical placement, rings and masks do not matter to it, by
// definition:
//   - an attention query of row r at position p sees the row's real tokens
//     at positions max(0, p-W+1) .. p (W = the layer's window, or all);
//   - a recurrent token's output is y after replaying the row's real
//     tokens 0 .. p in order from a zero state.
//
// Supported statements: the header (`trace 1`, `rows`, `layer` of kinds kv,
// rotating and ssm), `window` (left, right, ids), `decode` (ids), `trim`
// (bypass), `arm`, `accept` (uniform or per row), `fork`, `use`, `reload`;
// every `expect` line is skipped. `join`, `filter` and `extract` are
// reported as unsupported. The executor checks what it needs to compute
// (list lengths, padding of non-empty rows, rounds, trim sizes, names) and
// assumes the rest of the program is accepted by a conforming runner (it
// does not track ring wrap, for instance).
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

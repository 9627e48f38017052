// The parsed form of a kvspec trace (docs/TRACE.md, version 1).
//
// ParseTrace reads a whole file and either returns a Program or the first
// syntax error as FILE:LINE:COL. Everything that can be decided without
// running (lexical rules, grammar, header, limits, layer names, the
// fork + extract budget) is checked here; what depends on the running
// state (list lengths against rows, names of layouts, rounds) is left to
// the runner, which reports it as a refusal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "kvspec/base/layer_config.h"

namespace kvspec::trace {

// Limits of TRACE.md; a larger value is a syntax error, never an allocation.
inline constexpr int kMaxRows = 64;
inline constexpr int kMaxLayers = 32;
inline constexpr int kMaxColumnsPerForward = 4096;  // L
inline constexpr int kMaxWindow = 65536;             // window and capacity
inline constexpr int kMaxHeads = 64;
inline constexpr int kMaxDim = 512;                  // dim, dk, dv
inline constexpr int kMaxConv = 64;
inline constexpr int kMaxForkExtract = 64;
inline constexpr int64_t kMaxTokensPerRow = 1000000;
inline constexpr int64_t kMaxInteger = 2147483647;   // 2^31 - 1
// The most bytes of trace text: the parser refuses more, and
// ReadTraceSource (runner/runner.h) reads no further than this.
inline constexpr size_t kMaxTraceBytes = size_t{4} << 20;  // at most ~1M statements

enum class Op {
  // Operations.
  kWindow,
  kDecode,
  kTrim,
  kArm,
  kAccept,
  kFork,
  kUse,
  kJoin,
  kFilter,
  kExtract,
  kReload,
  // Expectations.
  kExpectSees,
  kExpectOut,
  kExpectPositions,
  kExpectError,
  kExpectEqual,
  kExpectTrimmable,
  kExpectKind,
  kExpectBytesPerToken,
};

// One item of an `expect sees` list: `pos` (id = pos) or `pos:id`.
struct SeenItem {
  int32_t pos = 0;
  int32_t id = 0;  // equals pos when the text gave no id
  bool operator==(const SeenItem& o) const { return pos == o.pos && id == o.id; }
  bool operator<(const SeenItem& o) const {
    return pos != o.pos ? pos < o.pos : id < o.id;
  }
};

struct Statement;

// One struct per statement kind, each with only its own fields. Lists are
// kept as written; their lengths against `rows`, the names of layouts and
// the order of rows are the runner's to check (refusals).

// `window L [left=..] [right=..] [ids=..]`
struct WindowOp {
  int columns = 1;  // L
  bool has_left = false, has_right = false, has_ids = false;
  std::vector<int32_t> left, right;       // one per row
  std::vector<std::vector<int32_t>> ids;  // one group per row, '/'-separated
};

// `decode [ids=..]`: one column per row, no padding.
struct DecodeOp {
  bool has_ids = false;
  std::vector<std::vector<int32_t>> ids;
  // The same forward as a `window 1` with these ids (what a runner executes).
  WindowOp AsWindow() const {
    WindowOp window;
    window.has_ids = has_ids;
    window.ids = ids;
    return window;
  }
};

// `trim N [bypass]`
struct TrimOp {
  int32_t count = 0;
  bool bypass = false;
};

struct ArmOp {};

// `accept K` (every row) or `accept K0,K1,..` (one per row)
struct AcceptOp {
  std::vector<int32_t> keep;
};

struct ForkOp {
  std::string name;
};

struct UseOp {
  std::string name;
};

struct JoinOp {
  std::string name;
};

// `filter R0,R1,..`: the rows to keep (ascending and existing: run time)
struct FilterOp {
  std::vector<int32_t> rows;
};

// `extract R as NAME`
struct ExtractOp {
  int32_t row = 0;
  std::string name;
};

struct ReloadOp {};

// `expect sees LAYER rR pP: ITEMS`; layer indexes Program::layers.
struct ExpectSees {
  int layer = -1;
  int32_t row = 0;
  int32_t pos = 0;
  std::vector<SeenItem> items;  // order as written
};

// `expect out LAYER rR pP: VALUES`
struct ExpectOut {
  int layer = -1;
  int32_t row = 0;
  int32_t pos = 0;
  std::vector<double> values;
};

// `expect positions N0,N1,..`: one per row
struct ExpectPositions {
  std::vector<int32_t> positions;
};

// `expect error OP`: the operation that must be refused (never null in a
// parsed program; its line is the expectation's).
struct ExpectError {
  std::shared_ptr<Statement> inner;
};

// `expect equal NAME`
struct ExpectEqual {
  std::string name;
};

// `expect trimmable LAYER yes|no`
struct ExpectTrimmable {
  int layer = -1;
  bool yes = false;
};

// `expect kind LAYER STRING`
struct ExpectKind {
  int layer = -1;
  std::string kind_string;
};

// `expect bytes_per_token LAYER N`
struct ExpectBytesPerToken {
  int layer = -1;
  int64_t bytes = 0;
};

// Alternatives in the order of Op, so that op() is the variant's index.
using Operation =
    std::variant<WindowOp, DecodeOp, TrimOp, ArmOp, AcceptOp, ForkOp, UseOp, JoinOp,
                 FilterOp, ExtractOp, ReloadOp, ExpectSees, ExpectOut, ExpectPositions,
                 ExpectError, ExpectEqual, ExpectTrimmable, ExpectKind,
                 ExpectBytesPerToken>;
template <Op op, typename T>
inline constexpr bool kOpHolds =
    std::is_same_v<std::variant_alternative_t<static_cast<size_t>(op), Operation>, T>;
static_assert(std::variant_size_v<Operation> ==
                  static_cast<size_t>(Op::kExpectBytesPerToken) + 1 &&
              kOpHolds<Op::kWindow, WindowOp> && kOpHolds<Op::kDecode, DecodeOp> &&
              kOpHolds<Op::kTrim, TrimOp> && kOpHolds<Op::kArm, ArmOp> &&
              kOpHolds<Op::kAccept, AcceptOp> && kOpHolds<Op::kFork, ForkOp> &&
              kOpHolds<Op::kUse, UseOp> && kOpHolds<Op::kJoin, JoinOp> &&
              kOpHolds<Op::kFilter, FilterOp> && kOpHolds<Op::kExtract, ExtractOp> &&
              kOpHolds<Op::kReload, ReloadOp> && kOpHolds<Op::kExpectSees, ExpectSees> &&
              kOpHolds<Op::kExpectOut, ExpectOut> &&
              kOpHolds<Op::kExpectPositions, ExpectPositions> &&
              kOpHolds<Op::kExpectError, ExpectError> &&
              kOpHolds<Op::kExpectEqual, ExpectEqual> &&
              kOpHolds<Op::kExpectTrimmable, ExpectTrimmable> &&
              kOpHolds<Op::kExpectKind, ExpectKind> &&
              kOpHolds<Op::kExpectBytesPerToken, ExpectBytesPerToken>);

struct Statement {
  int line = 0;  // 1-based line in the file
  Operation operation = ArmOp{};

  Op op() const { return static_cast<Op>(operation.index()); }
  // The statement's fields; T must be the statement's alternative.
  template <typename T>
  const T& Get() const {
    return std::get<T>(operation);
  }
};

struct Program {
  std::string file;
  int rows = 1;
  // The header's layers, as declared (a rotating layer's capacity = window
  // when the text gives none; an ssm layer's kheads = heads).
  std::vector<LayerConfig> layers;
  std::vector<int> layer_lines;    // [layers] the line declaring each
  std::vector<Statement> body;     // statements after the header, in order
  std::vector<std::string> lines;  // the raw lines (without '\n' or '\r')
  int header_end_line = 0;         // last line of the header (rows + layers)
};

struct SyntaxError {
  std::string file;
  int line = 0;  // 1-based
  int col = 0;   // 1-based
  std::string message;
  // "FILE:LINE:COL: message"
  std::string ToString() const;
};

// Parses `text` (the whole file). On success fills *program and returns
// true; otherwise fills *error with the first problem and returns false.
// Never crashes, hangs or allocates more than a small multiple of the
// input size on any input.
bool ParseTrace(std::string_view text, std::string_view file,
                Program* program, SyntaxError* error);

// Returns the layer index of `name` in `program`, or -1.
int FindLayer(const Program& program, std::string_view name);

}  // namespace kvspec::trace

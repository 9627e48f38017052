// The parsed form of a kvspec trace (../shared/TRACE.md, version 1).
//
// ParseTrace reads a whole file and either returns a Program or the first
// syntax error as FILE:LINE:COL. Everything that can be decided without
// running (lexical rules, grammar, header, limits, layer names, the
// fork + extract budget) is checked here; what depends on the running
// state (list lengths against rows, names of layouts, rounds) is left to
// the runner, which reports it as a refusal.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/layer_config.h"

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

struct Statement {
  Op op = Op::kArm;
  int line = 0;  // 1-based line in the file

  // window / decode
  int columns = 1;                   // L (decode: 1)
  bool has_left = false, has_right = false, has_ids = false;
  std::vector<int32_t> left, right;  // one per row (checked at run time)
  std::vector<std::vector<int32_t>> ids;  // one group per row, '/'-separated

  // trim
  int32_t count = 0;  // trim N
  bool bypass = false;

  // accept: one value (applies to every row) or one per row
  std::vector<int32_t> keep;

  // fork / use / join / expect equal / extract ... as NAME
  std::string name;
  // filter: the rows to keep (syntax only; ascending/existence at run time)
  std::vector<int32_t> rows;
  // extract R / expect sees|out LAYER rR pP
  int32_t row = 0;
  int32_t pos = 0;
  int layer = -1;  // index into Program::layers for expectations

  // expect sees: the listed items (order as written)
  std::vector<SeenItem> items;
  // expect out: the values
  std::vector<double> values;
  // expect positions: one per row
  std::vector<int32_t> positions;
  // expect trimmable
  bool yes = false;
  // expect kind
  std::string kind_string;
  // expect bytes_per_token
  int64_t bytes = 0;
  // expect error OP: the operation that must be refused
  std::shared_ptr<Statement> inner;
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

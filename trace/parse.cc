// Parser of kvspec traces (../shared/TRACE.md, version 1): text -> Program.
//
// Choices made where TRACE.md is silent (the parser's contract; other
// implementations reading the same files should follow them):
//
// Lines and characters
// - Lines end at '\n'; one '\r' right before it (or at the end of the file)
//   is dropped. A final line without '\n' counts; a final '\n' does not start
//   an extra line, so Program::lines has as many entries as an editor shows.
// - Columns count bytes from 1; a tab is one column.
// - `#` starts a comment anywhere on a line, even inside a word, so no word
//   (not even the STRING of `expect kind`) can contain '#'.
// - Outside comments a line may hold only spaces, tabs and printable ASCII
//   (0x21..0x7E). Comments may also hold bytes >= 0x80 (UTF-8 text). A NUL
//   byte or any other control character (including a '\r' that is not the
//   line's last byte, and DEL) is a syntax error anywhere, comments included.
// - Input larger than 4 MiB is rejected at 1:1 before anything is read.
//
// Numbers and lists
// - Integers are digits only: no sign, no spaces, no hex. Leading zeros are
//   allowed and mean nothing (`007` is 7). Values above 2^31-1 are rejected
//   while the digits are read, so a long digit string never overflows.
// - A comma list has at least one item and no empty item: `left=`, `1,,2`,
//   `,1` and `1,` are errors; COL points where the missing item should be.
// - `ids=` splits groups at '/'; a group may be empty (`5,6//7` is three
//   groups, `ids=` alone is one empty group) but a group's items follow the
//   comma-list rules. No length is checked against `rows` here: lengths,
//   id counts and row numbers are the runner's (refusals), so that
//   `expect error` can state them.
// - `expect sees` items and `expect out` values are separated by blanks
//   and/or one comma (`2 3`, `2,3`, `2, 3`); `2,,3` and a leading or trailing
//   comma are errors. The colon after pP may be glued to it (`p5:`), stand
//   alone (`p5 :`) or be glued to the first item (`p5:2`, `p5 :2`).
// - `expect out` values follow [+-]?(D+(.D*)?|.D+)([eE][+-]?D+)? with at most
//   100 characters (a longer word is an error, so strtod never sees unbounded
//   text), are parsed by strtod in the "C" locale (the default: a program
//   using this parser must not switch LC_NUMERIC) and must be finite: `1e999`
//   is an error, while an underflow such as `1e-999` reads as its rounded
//   value. `inf`, `nan` and hex floats are errors. At least one value.
// - `expect sees` items are `pos` or `pos:id` only (no `pad` / `zero`: what a
//   query must see never includes those); duplicates are kept as written.
//
// Header
// - The first statement must be `trace 1` (other integers: "unsupported trace
//   version"), the second `rows B`; `trace` or `rows` anywhere else is an
//   error. `layer` lines follow, at least one, none after an operation or
//   expectation.
// - Layer keys are checked in this order: shape (`key=value`), known key,
//   allowed for the kind, not repeated, value range. Then, on the whole
//   line: a rotating layer needs `window` (error at its KIND word);
//   `capacity` < `window` is an error at the capacity value; ssm `kheads`
//   that does not divide `heads` is an error at the kheads value.
// - `capacity=0` is an error (TRACE.md: capacity >= 1). A rotating layer
//   without `capacity` stores capacity = window; kv and ssm layers keep
//   capacity 0. `kheads` is resolved to `heads` for ssm layers and stays 0
//   for attention layers. Keys a kind does not have keep their defaults.
// - The 33rd layer is reported at its `layer` word.
//
// Statements
// - Keywords and names are case-sensitive. Names (layers and layouts) match
//   [a-z][a-z0-9_]*; an invalid name is reported at its first bad character.
// - Options of `window` / `decode` are written `key=value` with no blanks
//   around '='; each at most once, in any order. `decode` takes only `ids=`.
// - `trim N` accepts 0; its only optional word is exactly `bypass`.
// - `accept`, `filter` and `expect positions` take a non-empty comma list.
// - `extract R as NAME` needs the literal word `as`.
// - `expect error` must be followed by an operation (not an expectation nor a
//   header statement); the operation is parsed with the same rules, its
//   statement gets the same line, and a `fork` / `extract` inside counts
//   toward the budget of 64, reported at the 65th `fork` / `extract` word.
// - `expect kind LAYER STRING`, `expect trimmable`, `expect bytes_per_token`
//   and `expect out` accept any declared layer; `expect sees` only a kv or
//   rotating one. `expect trimmable` takes exactly `yes` or `no`.
// - A missing word is reported just after the statement's last word; an
//   extra word at that word.
//
// Resources: one counting pass and one parsing pass, both linear in the
// input; no allocation is sized by a number read from the text (only by
// counts of lines). Memory is the input's size in stored lines plus
// sizeof(std::string) per line and sizeof(Statement) (96 bytes with
// libstdc++ on x86-64) per statement, plus what a statement's lists hold:
// for pathological input made only of tiny statements (a file of `arm`
// lines) that is about 32 times the input, ~128 MiB at the 4 MiB cap.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trace/program.h"

namespace kvspec::trace {
namespace {

constexpr size_t kMaxInputBytes = size_t{4} << 20;  // 4 MiB: at most ~1M statements
constexpr size_t kMaxNumberChars = 100;              // `expect out` values
constexpr size_t kMaxQuotedChars = 40;               // words quoted in messages

bool IsBlank(char c) { return c == ' ' || c == '\t'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// A word quoted for a message, shortened so messages stay small.
std::string Quote(std::string_view s) {
  std::string out = "'";
  if (s.size() > kMaxQuotedChars) {
    out.append(s.substr(0, kMaxQuotedChars));
    out += "...";
  } else {
    out.append(s);
  }
  out += "'";
  return out;
}

// Index of the first character of `s` that breaks [a-z][a-z0-9_]*, or
// npos when `s` is a valid name. An empty string is invalid at 0.
size_t InvalidNameAt(std::string_view s) {
  if (s.empty() || !(s[0] >= 'a' && s[0] <= 'z')) return 0;
  for (size_t i = 1; i < s.size(); ++i) {
    const char c = s[i];
    if (!((c >= 'a' && c <= 'z') || IsDigit(c) || c == '_')) return i;
  }
  return std::string_view::npos;
}

bool IsOperationKeyword(std::string_view w) {
  return w == "window" || w == "decode" || w == "trim" || w == "arm" ||
         w == "accept" || w == "fork" || w == "use" || w == "join" ||
         w == "filter" || w == "extract" || w == "reload";
}

struct Word {
  std::string_view text;
  int col = 0;  // 1-based column of text[0]
};

// Layer keys: name, allowed kinds (bit per CacheKind), range.
struct LayerKey {
  const char* name;
  unsigned kinds;
  int lo, hi;
};
constexpr unsigned kKvBit = 1u << static_cast<int>(CacheKind::kKv);
constexpr unsigned kRotatingBit = 1u << static_cast<int>(CacheKind::kRotating);
constexpr unsigned kSsmBit = 1u << static_cast<int>(CacheKind::kSsm);
constexpr int kKeyHeads = 0, kKeyDim = 1, kKeyWindow = 2, kKeyCapacity = 3,
              kKeyKheads = 4, kKeyDk = 5, kKeyDv = 6, kKeyConv = 7,
              kNumLayerKeys = 8;
constexpr LayerKey kLayerKeys[kNumLayerKeys] = {
    {"heads", kKvBit | kRotatingBit | kSsmBit, 1, kMaxHeads},
    {"dim", kKvBit | kRotatingBit, 1, kMaxDim},
    {"window", kKvBit | kRotatingBit, 1, kMaxWindow},
    {"capacity", kRotatingBit, 1, kMaxWindow},
    {"kheads", kSsmBit, 1, kMaxHeads},
    {"dk", kSsmBit, 1, kMaxDim},
    {"dv", kSsmBit, 1, kMaxDim},
    {"conv", kSsmBit, 1, kMaxConv},
};

class Parser {
 public:
  Parser(std::string_view file, Program* program, SyntaxError* error)
      : file_(file), program_(program), error_(error) {}

  bool Parse(std::string_view text);

 private:
  enum class Stage { kTrace, kRows, kLayers, kBody };

  // Records the first error (at line_ unless given) and returns false.
  bool Fail(int col, std::string message) {
    return FailAt(line_, col, std::move(message));
  }
  bool FailAt(int line, int col, std::string message) {
    error_->file = std::string(file_);
    error_->line = line;
    error_->col = col;
    error_->message = std::move(message);
    return false;
  }

  // Splits `line` into words_ (comment removed); rejects bad characters.
  bool Lex(std::string_view line);
  bool ParseStatement();
  bool ParseTraceLine();
  bool ParseRowsLine();
  bool ParseLayerLine();
  // words_[k] is an operation keyword / `expect`.
  bool ParseOperation(size_t k, Statement* s);
  bool ParseWindowOptions(size_t i, bool is_window, WindowOp* s);
  bool ParseExpectation(size_t k, Statement* s);
  bool ParseSeen(size_t i, ExpectSees* s);
  bool ParseOut(size_t i, ExpectOut* s);
  // `LAYER rR pP:` of `expect sees|out`; *tail is the offset in content_
  // right after the ':'.
  bool ParseQueryHead(size_t i, const std::string& statement, bool attention_only,
                      int* layer, int32_t* row, int32_t* pos, size_t* tail);

  // Column right after the statement's last word: where a missing word goes.
  int EndCol() const {
    const Word& w = words_.back();
    return w.col + static_cast<int>(w.text.size());
  }
  // Fails unless word i exists.
  bool Need(size_t i, const std::string& message) {
    return i < words_.size() || Fail(EndCol(), message);
  }
  // Fails if there is a word at i or after it.
  bool End(size_t i, std::string_view statement) {
    if (i >= words_.size()) return true;
    return Fail(words_[i].col, std::string(statement) + ": unexpected word " +
                                   Quote(words_[i].text));
  }

  // Integer in 0..kMaxInteger; digits only.
  bool ParseInt(std::string_view s, int col, int64_t* value);
  bool ParseIntInRange(std::string_view s, int col, int64_t lo, int64_t hi,
                       const std::string& what, int32_t* value);
  // Non-empty comma list of integers, no empty item.
  bool ParseIntList(std::string_view s, int col, std::vector<int32_t>* out);
  // '/'-separated groups of comma lists; groups may be empty.
  bool ParseIdGroups(std::string_view s, int col,
                     std::vector<std::vector<int32_t>>* out);
  bool ParseNumber(std::string_view s, int col, double* value);
  // A name matching [a-z][a-z0-9_]*; errors name the statement.
  bool ParseName(const Word& w, const std::string& statement, std::string* out);
  // A declared layer (attention only when `attention_only`).
  bool ParseLayerRef(const Word& w, const std::string& statement,
                     bool attention_only, int* index);
  bool CountForkExtract(const Word& keyword);

  // Items of `expect sees` / values of `expect out`: content_[start..end),
  // separated by blanks and/or one comma. `item(text, col)` parses one.
  template <typename ItemFn>
  bool ScanItems(size_t start, ItemFn&& item);

  std::string_view file_;
  Program* program_;
  SyntaxError* error_;

  int line_ = 0;               // current 1-based line
  std::string_view content_;   // current line without its comment
  std::vector<Word> words_;    // words of content_
  Stage stage_ = Stage::kTrace;
  int fork_extract_ = 0;
  size_t statement_lines_ = 0;  // an upper bound of the statements
};

bool Parser::Parse(std::string_view text) {
  if (text.size() > kMaxInputBytes) {
    return FailAt(1, 1, "input too large: " + std::to_string(text.size()) +
                            " bytes (at most " +
                            std::to_string(kMaxInputBytes) + ")");
  }
  // Size Program::lines and Program::body once: count the lines and the
  // lines that hold a statement (first non-blank byte is not '#').
  size_t line_count = 0;
  bool seen_word = false;
  for (const char c : text) {
    if (c == '\n') {
      ++line_count;
      seen_word = false;
    } else if (!seen_word && !IsBlank(c)) {
      seen_word = true;
      if (c != '#') ++statement_lines_;
    }
  }
  if (!text.empty() && text.back() != '\n') ++line_count;
  program_->lines.reserve(line_count);

  size_t start = 0;
  while (start < text.size()) {
    size_t newline = text.find('\n', start);
    const size_t stop = newline == std::string_view::npos ? text.size()
                                                          : newline;
    std::string_view line = text.substr(start, stop - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++line_;
    program_->lines.emplace_back(line);
    if (!Lex(line)) return false;
    if (!words_.empty() && !ParseStatement()) return false;
    start = stop + 1;  // past the '\n' (or past the end)
  }

  // End of file: where the next line would start, or after the last byte.
  int eof_line = line_ + 1, eof_col = 1;
  if (!text.empty() && text.back() != '\n') {
    eof_line = line_;
    eof_col = static_cast<int>(program_->lines.back().size()) + 1;
  }
  switch (stage_) {
    case Stage::kTrace:
      return FailAt(eof_line, eof_col,
                    "empty trace: expected `trace 1` as the first statement");
    case Stage::kRows:
      return FailAt(eof_line, eof_col,
                    "unexpected end of file: expected `rows B` after "
                    "`trace 1`");
    case Stage::kLayers:
      if (program_->layers.empty()) {
        return FailAt(eof_line, eof_col,
                      "unexpected end of file: expected at least one `layer`");
      }
      break;
    case Stage::kBody:
      break;
  }
  return true;
}

bool Parser::Lex(std::string_view line) {
  words_.clear();
  size_t content_end = line.size();
  bool in_comment = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(line[i]);
    const int col = static_cast<int>(i) + 1;
    if (c == ' ' || c == '\t') continue;
    if (c == 0) return Fail(col, "NUL byte");
    if (c < 0x20 || c == 0x7f) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "control character 0x%02X", c);
      return Fail(col, buf);
    }
    if (in_comment) continue;
    if (c == '#') {
      in_comment = true;
      content_end = i;
      continue;
    }
    if (c >= 0x80) {
      char buf[64];
      std::snprintf(buf, sizeof buf,
                    "non-ASCII byte 0x%02X outside a comment", c);
      return Fail(col, buf);
    }
  }
  content_ = line.substr(0, content_end);
  size_t i = 0;
  while (i < content_.size()) {
    while (i < content_.size() && IsBlank(content_[i])) ++i;
    if (i == content_.size()) break;
    const size_t begin = i;
    while (i < content_.size() && !IsBlank(content_[i])) ++i;
    words_.push_back(
        Word{content_.substr(begin, i - begin), static_cast<int>(begin) + 1});
  }
  return true;
}

bool Parser::ParseStatement() {
  const Word& keyword = words_[0];
  if (stage_ == Stage::kTrace) {
    if (keyword.text != "trace") {
      return Fail(keyword.col,
                  "expected `trace 1` as the first statement, got " +
                      Quote(keyword.text));
    }
    return ParseTraceLine();
  }
  if (stage_ == Stage::kRows) {
    if (keyword.text != "rows") {
      return Fail(keyword.col,
                  "expected `rows B` right after `trace 1`, got " +
                      Quote(keyword.text));
    }
    return ParseRowsLine();
  }
  if (keyword.text == "trace") {
    return Fail(keyword.col, "`trace` may only be the first statement");
  }
  if (keyword.text == "rows") {
    return Fail(keyword.col,
                "`rows` must come once, right after `trace 1`");
  }
  if (keyword.text == "layer") {
    if (stage_ == Stage::kBody) {
      return Fail(keyword.col,
                  "`layer` must come before the first operation or "
                  "expectation");
    }
    return ParseLayerLine();
  }
  const bool is_expect = keyword.text == "expect";
  if (!is_expect && !IsOperationKeyword(keyword.text)) {
    return Fail(keyword.col, "unknown statement " + Quote(keyword.text));
  }
  if (program_->layers.empty()) {
    return Fail(keyword.col,
                "expected at least one `layer` before the first operation");
  }
  if (stage_ != Stage::kBody) {
    // The header is complete and valid: no other statement can need room.
    program_->body.reserve(statement_lines_);
    stage_ = Stage::kBody;
  }
  Statement s;
  s.line = line_;
  if (!(is_expect ? ParseExpectation(0, &s) : ParseOperation(0, &s))) {
    return false;
  }
  program_->body.push_back(std::move(s));
  return true;
}

bool Parser::ParseTraceLine() {
  if (!Need(1, "trace: expected the version (`trace 1`)")) return false;
  int64_t version = 0;
  if (!ParseInt(words_[1].text, words_[1].col, &version)) return false;
  if (version != 1) {
    return Fail(words_[1].col, "unsupported trace version " +
                                   std::to_string(version) +
                                   " (this reader knows version 1)");
  }
  if (!End(2, "trace")) return false;
  stage_ = Stage::kRows;
  return true;
}

bool Parser::ParseRowsLine() {
  if (!Need(1, "rows: expected the number of rows")) return false;
  int32_t rows = 0;
  if (!ParseIntInRange(words_[1].text, words_[1].col, 1, kMaxRows, "rows",
                       &rows)) {
    return false;
  }
  if (!End(2, "rows")) return false;
  program_->rows = rows;
  stage_ = Stage::kLayers;
  return true;
}

bool Parser::ParseLayerLine() {
  const Word& keyword = words_[0];
  if (program_->layers.size() >= static_cast<size_t>(kMaxLayers)) {
    return Fail(keyword.col, "too many layers (at most " +
                                 std::to_string(kMaxLayers) + ")");
  }
  LayerConfig layer;
  if (!Need(1, "layer: expected a name")) return false;
  if (!ParseName(words_[1], "layer", &layer.name)) return false;
  for (size_t other = 0; other < program_->layers.size(); ++other) {
    if (program_->layers[other].name == layer.name) {
      return Fail(words_[1].col, "duplicate layer name " +
                                     Quote(layer.name) + " (declared on line " +
                                     std::to_string(program_->layer_lines[other]) + ")");
    }
  }
  if (!Need(2, "layer: expected a kind (kv, rotating or ssm)")) return false;
  const Word& kind_word = words_[2];
  if (!ParseKindName(kind_word.text, &layer.kind)) {
    return Fail(kind_word.col, "unknown layer kind " + Quote(kind_word.text) +
                                   " (expected kv, rotating or ssm)");
  }
  const unsigned kind_bit = 1u << static_cast<int>(layer.kind);

  int32_t values[kNumLayerKeys] = {};
  int value_col[kNumLayerKeys] = {};  // 0: key not given
  for (size_t i = 3; i < words_.size(); ++i) {
    const Word& w = words_[i];
    const size_t eq = w.text.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return Fail(w.col, "layer: expected key=value, got " + Quote(w.text));
    }
    const std::string_view key = w.text.substr(0, eq);
    int k = 0;
    while (k < kNumLayerKeys && key != kLayerKeys[k].name) ++k;
    if (k == kNumLayerKeys) {
      return Fail(w.col, "layer: unknown key " + Quote(key) +
                             " (keys: heads, dim, window, capacity, kheads, "
                             "dk, dv, conv)");
    }
    if ((kLayerKeys[k].kinds & kind_bit) == 0) {
      return Fail(w.col, "layer: key " + Quote(key) +
                             " is not allowed for a " +
                             std::string(KindName(layer.kind)) + " layer");
    }
    if (value_col[k] != 0) {
      return Fail(w.col, "layer: repeated key " + Quote(key));
    }
    const int col = w.col + static_cast<int>(eq) + 1;
    if (!ParseIntInRange(w.text.substr(eq + 1), col, kLayerKeys[k].lo,
                         kLayerKeys[k].hi, std::string(key), &values[k])) {
      return false;
    }
    value_col[k] = col;
  }

  if (value_col[kKeyHeads]) layer.heads = values[kKeyHeads];
  if (value_col[kKeyDim]) layer.dim = values[kKeyDim];
  if (value_col[kKeyWindow]) layer.window = values[kKeyWindow];
  if (value_col[kKeyDk]) layer.dk = values[kKeyDk];
  if (value_col[kKeyDv]) layer.dv = values[kKeyDv];
  if (value_col[kKeyConv]) layer.conv = values[kKeyConv];
  switch (layer.kind) {
    case CacheKind::kKv:
      break;
    case CacheKind::kRotating:
      if (!value_col[kKeyWindow]) {
        return Fail(kind_word.col, "layer: a rotating layer needs window=W");
      }
      layer.capacity = layer.window;
      if (value_col[kKeyCapacity]) {
        if (values[kKeyCapacity] < layer.window) {
          return Fail(value_col[kKeyCapacity],
                      "layer: capacity " +
                          std::to_string(values[kKeyCapacity]) +
                          " is smaller than window " +
                          std::to_string(layer.window));
        }
        layer.capacity = values[kKeyCapacity];
      }
      break;
    case CacheKind::kSsm:
      layer.kheads = layer.heads;
      if (value_col[kKeyKheads]) {
        if (layer.heads % values[kKeyKheads] != 0) {
          return Fail(value_col[kKeyKheads],
                      "layer: kheads " + std::to_string(values[kKeyKheads]) +
                          " does not divide heads " +
                          std::to_string(layer.heads));
        }
        layer.kheads = values[kKeyKheads];
      }
      break;
  }
  program_->layers.push_back(std::move(layer));
  program_->layer_lines.push_back(line_);
  program_->header_end_line = line_;
  return true;
}

bool Parser::CountForkExtract(const Word& keyword) {
  if (++fork_extract_ <= kMaxForkExtract) return true;
  return Fail(keyword.col, "more than " + std::to_string(kMaxForkExtract) +
                               " fork and extract statements");
}

bool Parser::ParseOperation(size_t k, Statement* s) {
  const Word& keyword = words_[k];
  const std::string op(keyword.text);
  size_t i = k + 1;
  if (op == "window") {
    WindowOp& window = s->operation.emplace<WindowOp>();
    if (!Need(i, "window: expected the number of columns L")) return false;
    int32_t columns = 0;
    if (!ParseIntInRange(words_[i].text, words_[i].col, 1,
                         kMaxColumnsPerForward, "window: L", &columns)) {
      return false;
    }
    window.columns = columns;
    return ParseWindowOptions(i + 1, true, &window);
  }
  if (op == "decode") {
    // Parsed as a window that accepts only ids=.
    WindowOp options;
    if (!ParseWindowOptions(i, false, &options)) return false;
    DecodeOp& decode = s->operation.emplace<DecodeOp>();
    decode.has_ids = options.has_ids;
    decode.ids = std::move(options.ids);
    return true;
  }
  if (op == "trim") {
    TrimOp& trim = s->operation.emplace<TrimOp>();
    if (!Need(i, "trim: expected the number of tokens N")) return false;
    int32_t count = 0;
    if (!ParseIntInRange(words_[i].text, words_[i].col, 0, kMaxInteger,
                         "trim: N", &count)) {
      return false;
    }
    trim.count = count;
    ++i;
    if (i < words_.size() && words_[i].text == "bypass") {
      trim.bypass = true;
      ++i;
    }
    return End(i, "trim");
  }
  if (op == "arm" || op == "reload") {
    if (op == "arm") {
      s->operation.emplace<ArmOp>();
    } else {
      s->operation.emplace<ReloadOp>();
    }
    return End(i, op);
  }
  if (op == "accept") {
    AcceptOp& accept = s->operation.emplace<AcceptOp>();
    if (!Need(i, "accept: expected K or K0,K1,..")) return false;
    if (!ParseIntList(words_[i].text, words_[i].col, &accept.keep)) return false;
    return End(i + 1, op);
  }
  if (op == "fork" || op == "use" || op == "join") {
    if (op == "fork" && !CountForkExtract(keyword)) return false;
    if (!Need(i, op + ": expected a layout name")) return false;
    std::string name;
    if (!ParseName(words_[i], op, &name)) return false;
    if (op == "fork") {
      s->operation = ForkOp{std::move(name)};
    } else if (op == "use") {
      s->operation = UseOp{std::move(name)};
    } else {
      s->operation = JoinOp{std::move(name)};
    }
    return End(i + 1, op);
  }
  if (op == "filter") {
    FilterOp& filter = s->operation.emplace<FilterOp>();
    if (!Need(i, "filter: expected rows R0,R1,..")) return false;
    if (!ParseIntList(words_[i].text, words_[i].col, &filter.rows)) return false;
    return End(i + 1, op);
  }
  if (op == "extract") {
    ExtractOp& extract = s->operation.emplace<ExtractOp>();
    if (!CountForkExtract(keyword)) return false;
    if (!Need(i, "extract: expected `R as NAME`")) return false;
    int32_t row = 0;
    if (!ParseIntInRange(words_[i].text, words_[i].col, 0, kMaxInteger,
                         "extract: R", &row)) {
      return false;
    }
    extract.row = row;
    ++i;
    if (!Need(i, "extract: expected `as NAME` after the row")) return false;
    if (words_[i].text != "as") {
      return Fail(words_[i].col,
                  "extract: expected `as`, got " + Quote(words_[i].text));
    }
    ++i;
    if (!Need(i, "extract: expected a layout name after `as`")) return false;
    if (!ParseName(words_[i], "extract", &extract.name)) return false;
    return End(i + 1, op);
  }
  return Fail(keyword.col, "unknown operation " + Quote(keyword.text));
}

bool Parser::ParseWindowOptions(size_t i, bool is_window, WindowOp* s) {
  const char* statement = is_window ? "window" : "decode";
  for (; i < words_.size(); ++i) {
    const Word& w = words_[i];
    const size_t eq = w.text.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return Fail(w.col, std::string(statement) +
                             ": expected key=value option, got " +
                             Quote(w.text));
    }
    const std::string_view key = w.text.substr(0, eq);
    const std::string_view value = w.text.substr(eq + 1);
    const int col = w.col + static_cast<int>(eq) + 1;
    bool* has = nullptr;
    if (key == "ids") {
      has = &s->has_ids;
    } else if (is_window && key == "left") {
      has = &s->has_left;
    } else if (is_window && key == "right") {
      has = &s->has_right;
    } else {
      return Fail(w.col, std::string(statement) + ": unknown option " +
                             Quote(key) +
                             (is_window ? " (expected left=, right= or ids=)"
                                        : " (expected ids=)"));
    }
    if (*has) {
      return Fail(w.col,
                  std::string(statement) + ": repeated option " + Quote(key));
    }
    *has = true;
    bool ok = true;
    if (key == "ids") {
      ok = ParseIdGroups(value, col, &s->ids);
    } else if (key == "left") {
      ok = ParseIntList(value, col, &s->left);
    } else {
      ok = ParseIntList(value, col, &s->right);
    }
    if (!ok) return false;
  }
  return true;
}

bool Parser::ParseExpectation(size_t k, Statement* s) {
  size_t i = k + 1;
  if (!Need(i, "expect: expected sees, out, positions, error, equal, "
               "trimmable, kind or bytes_per_token")) {
    return false;
  }
  const Word& what_word = words_[i];
  const std::string what(what_word.text);
  const std::string statement = "expect " + what;
  ++i;
  if (what == "sees") return ParseSeen(i, &s->operation.emplace<ExpectSees>());
  if (what == "out") return ParseOut(i, &s->operation.emplace<ExpectOut>());
  if (what == "positions") {
    ExpectPositions& positions = s->operation.emplace<ExpectPositions>();
    if (!Need(i, "expect positions: expected N0,N1,..")) return false;
    if (!ParseIntList(words_[i].text, words_[i].col, &positions.positions)) {
      return false;
    }
    return End(i + 1, statement);
  }
  if (what == "error") {
    ExpectError& error = s->operation.emplace<ExpectError>();
    if (!Need(i, "expect error: expected an operation")) return false;
    const Word& inner_word = words_[i];
    if (inner_word.text == "expect") {
      return Fail(inner_word.col,
                  "expect error: expected an operation, not an expectation");
    }
    if (!IsOperationKeyword(inner_word.text)) {
      return Fail(inner_word.col, "expect error: " + Quote(inner_word.text) +
                                      " is not an operation");
    }
    auto inner = std::make_shared<Statement>();
    inner->line = line_;
    if (!ParseOperation(i, inner.get())) return false;
    error.inner = std::move(inner);
    return true;
  }
  if (what == "equal") {
    ExpectEqual& equal = s->operation.emplace<ExpectEqual>();
    if (!Need(i, "expect equal: expected a layout name")) return false;
    if (!ParseName(words_[i], "expect equal", &equal.name)) {
      return false;
    }
    return End(i + 1, statement);
  }
  if (what == "trimmable" || what == "kind" || what == "bytes_per_token") {
    if (!Need(i, statement + ": expected a layer name")) return false;
    int layer = -1;
    if (!ParseLayerRef(words_[i], statement, false, &layer)) return false;
    ++i;
    if (what == "trimmable") {
      if (!Need(i, "expect trimmable: expected yes or no")) return false;
      if (words_[i].text != "yes" && words_[i].text != "no") {
        return Fail(words_[i].col, "expect trimmable: expected yes or no, got " +
                                       Quote(words_[i].text));
      }
      s->operation = ExpectTrimmable{layer, words_[i].text == "yes"};
    } else if (what == "kind") {
      if (!Need(i, "expect kind: expected the kind string")) return false;
      s->operation = ExpectKind{layer, std::string(words_[i].text)};
    } else {
      if (!Need(i, "expect bytes_per_token: expected a byte count")) {
        return false;
      }
      int64_t bytes = 0;
      if (!ParseInt(words_[i].text, words_[i].col, &bytes)) return false;
      s->operation = ExpectBytesPerToken{layer, bytes};
    }
    return End(i + 1, statement);
  }
  return Fail(what_word.col,
              "unknown expectation " + Quote(what_word.text) +
                  " (expected sees, out, positions, error, equal, trimmable, "
                  "kind or bytes_per_token)");
}

bool Parser::ParseQueryHead(size_t i, const std::string& statement,
                            bool attention_only, int* layer, int32_t* row,
                            int32_t* pos, size_t* tail) {
  if (!Need(i, statement + ": expected a layer name")) return false;
  if (!ParseLayerRef(words_[i], statement, attention_only, layer)) return false;
  ++i;

  if (!Need(i, statement + ": expected rROW (like r0)")) return false;
  const Word& row_word = words_[i];
  if (row_word.text[0] != 'r') {
    return Fail(row_word.col, statement + ": expected rROW (like r0), got " +
                                  Quote(row_word.text));
  }
  if (!ParseIntInRange(row_word.text.substr(1), row_word.col + 1, 0,
                       kMaxInteger, "row", row)) {
    return false;
  }
  ++i;

  if (!Need(i, statement + ": expected pPOS: (like p0:)")) return false;
  const Word& pos_word = words_[i];
  if (pos_word.text[0] != 'p') {
    return Fail(pos_word.col, statement + ": expected pPOS: (like p0:), got " +
                                  Quote(pos_word.text));
  }
  const size_t colon = pos_word.text.find(':');
  const std::string_view digits =
      colon == std::string_view::npos ? pos_word.text.substr(1)
                                      : pos_word.text.substr(1, colon - 1);
  if (!ParseIntInRange(digits, pos_word.col + 1, 0, kMaxInteger, "position",
                       pos)) {
    return false;
  }
  if (colon != std::string_view::npos) {
    *tail = static_cast<size_t>(pos_word.col - 1) + colon + 1;
    return true;
  }
  ++i;
  if (i >= words_.size()) {
    return Fail(EndCol(), statement + ": expected ':' after " +
                              Quote(pos_word.text));
  }
  if (words_[i].text[0] != ':') {
    return Fail(words_[i].col, statement + ": expected ':' after " +
                                   Quote(pos_word.text) + ", got " +
                                   Quote(words_[i].text));
  }
  *tail = static_cast<size_t>(words_[i].col - 1) + 1;
  return true;
}

bool Parser::ParseSeen(size_t i, ExpectSees* s) {
  size_t tail = 0;
  if (!ParseQueryHead(i, "expect sees", true, &s->layer, &s->row, &s->pos,
                      &tail)) {
    return false;
  }
  return ScanItems(tail, [&](std::string_view item, int col) {
    SeenItem seen;
    const size_t sep = item.find(':');
    int64_t value = 0;
    if (!ParseInt(item.substr(0, sep), col, &value)) return false;
    seen.pos = static_cast<int32_t>(value);
    seen.id = seen.pos;
    if (sep != std::string_view::npos) {
      if (!ParseInt(item.substr(sep + 1), col + static_cast<int>(sep) + 1,
                    &value)) {
        return false;
      }
      seen.id = static_cast<int32_t>(value);
    }
    s->items.push_back(seen);
    return true;
  });
}

bool Parser::ParseOut(size_t i, ExpectOut* s) {
  size_t tail = 0;
  if (!ParseQueryHead(i, "expect out", false, &s->layer, &s->row, &s->pos,
                      &tail)) {
    return false;
  }
  if (!ScanItems(tail, [&](std::string_view item, int col) {
        double value = 0;
        if (!ParseNumber(item, col, &value)) return false;
        s->values.push_back(value);
        return true;
      })) {
    return false;
  }
  if (s->values.empty()) {
    return Fail(EndCol(), "expect out: expected at least one value");
  }
  return true;
}

template <typename ItemFn>
bool Parser::ScanItems(size_t start, ItemFn&& item) {
  const size_t n = content_.size();
  bool after_item = false;  // an item was read and no comma since
  bool pending_comma = false;
  size_t comma_at = 0;
  size_t i = start;
  while (i < n) {
    const char c = content_[i];
    if (IsBlank(c)) {
      ++i;
      continue;
    }
    if (c == ',') {
      if (!after_item) return Fail(static_cast<int>(i) + 1, "empty list item");
      after_item = false;
      pending_comma = true;
      comma_at = i;
      ++i;
      continue;
    }
    const size_t begin = i;
    while (i < n && !IsBlank(content_[i]) && content_[i] != ',') ++i;
    if (!item(content_.substr(begin, i - begin), static_cast<int>(begin) + 1)) {
      return false;
    }
    after_item = true;
    pending_comma = false;
  }
  if (pending_comma) {
    return Fail(static_cast<int>(comma_at) + 2, "empty list item after ','");
  }
  return true;
}

bool Parser::ParseInt(std::string_view s, int col, int64_t* value) {
  if (s.empty()) return Fail(col, "expected an integer");
  int64_t v = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!IsDigit(s[i])) {
      return Fail(col + static_cast<int>(i),
                  "expected a non-negative decimal integer, got " + Quote(s));
    }
  }
  for (const char c : s) {
    v = v * 10 + (c - '0');  // v <= kMaxInteger before, so no overflow
    if (v > kMaxInteger) {
      return Fail(col, "integer " + Quote(s) + " is out of range (at most " +
                           std::to_string(kMaxInteger) + ")");
    }
  }
  *value = v;
  return true;
}

bool Parser::ParseIntInRange(std::string_view s, int col, int64_t lo,
                             int64_t hi, const std::string& what,
                             int32_t* value) {
  int64_t v = 0;
  if (!ParseInt(s, col, &v)) return false;
  if (v < lo || v > hi) {
    return Fail(col, what + " must be in " + std::to_string(lo) + ".." +
                         std::to_string(hi) + ", got " + std::to_string(v));
  }
  *value = static_cast<int32_t>(v);
  return true;
}

bool Parser::ParseIntList(std::string_view s, int col,
                          std::vector<int32_t>* out) {
  size_t begin = 0;
  while (true) {
    size_t end = s.find(',', begin);
    if (end == std::string_view::npos) end = s.size();
    const int item_col = col + static_cast<int>(begin);
    if (end == begin) {
      return Fail(item_col, s.empty() ? "expected a list of integers"
                                      : "empty list item");
    }
    int64_t v = 0;
    if (!ParseInt(s.substr(begin, end - begin), item_col, &v)) return false;
    out->push_back(static_cast<int32_t>(v));
    if (end == s.size()) return true;
    begin = end + 1;
  }
}

bool Parser::ParseIdGroups(std::string_view s, int col,
                           std::vector<std::vector<int32_t>>* out) {
  size_t begin = 0;
  while (true) {
    size_t end = s.find('/', begin);
    if (end == std::string_view::npos) end = s.size();
    out->emplace_back();
    if (end > begin && !ParseIntList(s.substr(begin, end - begin),
                                     col + static_cast<int>(begin),
                                     &out->back())) {
      return false;
    }
    if (end == s.size()) return true;
    begin = end + 1;
  }
}

bool Parser::ParseNumber(std::string_view s, int col, double* value) {
  if (s.size() > kMaxNumberChars) {
    return Fail(col, "number too long (more than " +
                         std::to_string(kMaxNumberChars) + " characters)");
  }
  // [+-]?(D+(.D*)?|.D+)([eE][+-]?D+)?
  size_t i = 0;
  const auto bad = [&](size_t at) {
    return Fail(col + static_cast<int>(at),
                "expected a decimal number, got " + Quote(s));
  };
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  size_t mantissa_digits = 0;
  for (; i < s.size() && IsDigit(s[i]); ++i) ++mantissa_digits;
  if (i < s.size() && s[i] == '.') {
    for (++i; i < s.size() && IsDigit(s[i]); ++i) ++mantissa_digits;
  }
  if (mantissa_digits == 0) return bad(i < s.size() ? i : s.size() - 1);
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exponent_digits = 0;
    for (; i < s.size() && IsDigit(s[i]); ++i) ++exponent_digits;
    if (exponent_digits == 0) return bad(i < s.size() ? i : s.size() - 1);
  }
  if (i != s.size()) return bad(i);

  const std::string copy(s);  // NUL-terminated, bounded by kMaxNumberChars
  char* end = nullptr;
  const double v = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size()) return bad(0);
  if (!std::isfinite(v)) {
    return Fail(col, "number " + Quote(s) + " is not finite in double");
  }
  *value = v;
  return true;
}

bool Parser::ParseName(const Word& w, const std::string& statement,
                       std::string* out) {
  const size_t bad = InvalidNameAt(w.text);
  if (bad != std::string_view::npos) {
    return Fail(w.col + static_cast<int>(bad),
                statement + ": invalid name " + Quote(w.text) +
                    " (names match [a-z][a-z0-9_]*)");
  }
  *out = std::string(w.text);
  return true;
}

bool Parser::ParseLayerRef(const Word& w, const std::string& statement,
                           bool attention_only, int* index) {
  const int found = FindLayer(*program_, w.text);
  if (found < 0) {
    return Fail(w.col, statement + ": unknown layer " + Quote(w.text));
  }
  const LayerConfig& layer = program_->layers[static_cast<size_t>(found)];
  if (attention_only && layer.kind == CacheKind::kSsm) {
    return Fail(w.col, statement + ": layer " + Quote(w.text) +
                           " is ssm; only kv and rotating layers have "
                           "attention queries");
  }
  *index = found;
  return true;
}

}  // namespace

int FindLayer(const Program& program, std::string_view name) {
  for (size_t i = 0; i < program.layers.size(); ++i) {
    if (program.layers[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::string SyntaxError::ToString() const {
  return file + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " +
         message;
}

bool ParseTrace(std::string_view text, std::string_view file,
                Program* program, SyntaxError* error) {
  Program parsed;
  SyntaxError local_error;
  parsed.file = std::string(file);
  Parser parser(file, &parsed, error != nullptr ? error : &local_error);
  if (!parser.Parse(text)) return false;
  if (program != nullptr) *program = std::move(parsed);
  return true;
}

}  // namespace kvspec::trace

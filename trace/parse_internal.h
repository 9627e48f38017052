// The trace parser's internals, shared by its files (not a public header):
//   parse.cc             the contract (choices where TRACE.md is silent),
//                        ParseTrace, the line loop, lexing and dispatch;
//   parse_words.cc       words, integers, lists, numbers, names;
//   parse_header.cc      `trace`, `rows` and `layer` lines;
//   parse_statements.cc  operations and expectations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvspec/base/status.h"
#include "kvspec/trace/program.h"

namespace kvspec::trace::parse_internal {

inline bool IsBlank(char c) { return c == ' ' || c == '\t'; }
inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// A word quoted for a message, shortened so messages stay small.
std::string Quote(std::string_view s);
// Index of the first character of `s` that breaks [a-z][a-z0-9_]*, or
// npos when `s` is a valid name. An empty string is invalid at 0.
size_t InvalidNameAt(std::string_view s);
bool IsOperationKeyword(std::string_view w);

struct Word {
  std::string_view text;
  int col = 0;  // 1-based column of text[0]
};

// Reads one trace into a Program, line by line, stopping at the first
// error (recorded in *error_). Holds the current line's words while it is
// parsed and the header stage reached so far.
//
// Invariants after each line (checked in builds without NDEBUG):
// - program_->lines has line_ entries;
// - at most kMaxLayers layers, one layer_lines entry per layer, and at
//   least one layer once the body has begun;
// - no statement before the body, at most statement_lines_ after it;
// - fork_extract_ <= kMaxForkExtract.
class Parser {
 public:
  Parser(std::string_view file, Program* program, SyntaxError* error)
      : file_(file), program_(program), error_(error) {}

  bool Parse(std::string_view text);
  Status CheckInvariants() const;

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
  // The `key=value` words of a layer line from word 3: values[k] and the
  // column of each given value (0: key not given), in kLayerKeys' order.
  // The integer keys into values/value_col (column 0: not given), the
  // storage type `kv=` into *kv and *kv_col.
  bool ParseLayerKeys(CacheKind kind, int32_t* values, int* value_col, KvType* kv, int* kv_col);
  // Sets the given keys on `layer` and checks the rules that span keys.
  bool ResolveLayer(const int32_t* values, const int* value_col, const Word& kind_word,
                    LayerConfig* layer);

  // words_[k] is an operation keyword (IsOperationKeyword) / `expect`.
  bool ParseOperation(size_t k, Statement* s);
  bool ParseForward(size_t k, Statement* s);  // window / decode
  bool ParseTrim(size_t k, Statement* s);
  bool ParseLayoutName(size_t k, Statement* s);  // fork / use / join
  bool ParseExtract(size_t k, Statement* s);
  bool ParseWindowOptions(size_t i, bool is_window, WindowOp* s);
  bool ParseExpectation(size_t k, Statement* s);
  // `expect error OP` from word i (OP's keyword).
  bool ParseExpectError(size_t i, Statement* s);
  // `expect trimmable|kind|bytes_per_token LAYER ..` from word i (LAYER).
  bool ParseLayerExpectation(size_t i, const std::string& what, Statement* s);
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


}  // namespace kvspec::trace::parse_internal

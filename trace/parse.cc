// Parser of kvspec traces (docs/TRACE.md, version 1): text -> Program.
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
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "kvspec/trace/parse_internal.h"
#include "kvspec/trace/program.h"

namespace kvspec::trace {
namespace parse_internal {

bool Parser::Parse(std::string_view text) {
  if (text.size() > kMaxTraceBytes) {
    return FailAt(1, 1, "input too large: " + std::to_string(text.size()) +
                            " bytes (at most " +
                            std::to_string(kMaxTraceBytes) + ")");
  }
  // Size Program::lines and Program::body once: count the lines and the
  // lines that may hold a statement (first non-blank byte is not '#', nor a
  // '\r', which either ends a blank line or is refused where it stands).
  size_t line_count = 0;
  bool seen_word = false;
  for (const char c : text) {
    if (c == '\n') {
      ++line_count;
      seen_word = false;
    } else if (!seen_word && !IsBlank(c) && c != '\r') {
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
#ifndef NDEBUG
    if (Status broken = CheckInvariants(); !broken.ok()) {
      std::fprintf(stderr, "kvspec: parser invariant broken after line %d: %s\n", line_,
                   broken.message().c_str());
      std::abort();
    }
#endif
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

Status Parser::CheckInvariants() const {
  if (program_->lines.size() != static_cast<size_t>(line_)) {
    return Status::Error(std::to_string(program_->lines.size()) + " lines stored after line " +
                         std::to_string(line_));
  }
  if (program_->layers.size() > static_cast<size_t>(kMaxLayers) ||
      program_->layer_lines.size() != program_->layers.size()) {
    return Status::Error(std::to_string(program_->layers.size()) + " layers, " +
                         std::to_string(program_->layer_lines.size()) + " layer lines");
  }
  if (stage_ == Stage::kBody ? program_->layers.empty() ||
                                   program_->body.size() > statement_lines_
                             : !program_->body.empty()) {
    return Status::Error(std::to_string(program_->body.size()) + " statements with " +
                         std::to_string(program_->layers.size()) + " layers");
  }
  if (fork_extract_ > kMaxForkExtract) {
    return Status::Error(std::to_string(fork_extract_) + " fork and extract statements");
  }
  return Status::Ok();
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

}  // namespace parse_internal

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
  parse_internal::Parser parser(file, &parsed, error != nullptr ? error : &local_error);
  if (!parser.Parse(text)) return false;
  if (program != nullptr) *program = std::move(parsed);
  return true;
}

}  // namespace kvspec::trace

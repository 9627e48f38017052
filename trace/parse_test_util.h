// Helpers of the parser's unit tests (parse_test.cc, parse_error_test.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "kvspec/trace/program.h"

namespace kvspec::trace::parse_test {

inline constexpr char kHeader[] = "trace 1\nrows 2\nlayer s rotating window=4\n"
                                  "layer k kv heads=2 dim=8\nlayer r ssm\n";
inline constexpr int kHeaderLines = 5;

// The example at the end of TRACE.md, verbatim.
inline constexpr char kExample[] =
    "trace 1\n"
    "rows 1\n"
    "layer s rotating window=4\n"
    "layer r ssm\n"
    "window 3                      # positions 0,1,2\n"
    "arm\n"
    "window 3 ids=103,104,105      # verify window: positions 3,4,5\n"
    "expect sees s r0 p5: 2 3:103 4:104 5:105\n"
    "accept 1                      # keep position 3 only\n"
    "expect positions 4\n"
    "decode ids=204\n"
    "expect sees s r0 p4: 1 2 3:103 4:204\n";

inline Program MustParse(std::string_view text) {
  Program program;
  SyntaxError error;
  const bool ok = ParseTrace(text, "t.trace", &program, &error);
  EXPECT_TRUE(ok) << error.ToString();
  return program;
}

// Parses kHeader + body and returns the single body statement.
inline Statement ParseOne(std::string_view body) {
  const Program program = MustParse(std::string(kHeader) + std::string(body));
  EXPECT_EQ(program.body.size(), 1u) << body;
  if (program.body.size() != 1) return Statement{};
  EXPECT_EQ(program.body[0].line, kHeaderLines + 1);
  return program.body[0];
}

// The fields of `s`, which must be a T statement (a failure and empty
// fields otherwise).
template <typename T>
const T& Fields(const Statement& s) {
  static const T kNone{};
  const T* fields = std::get_if<T>(&s.operation);
  if (fields == nullptr) {
    ADD_FAILURE() << "line " << s.line << " holds op " << static_cast<int>(s.op());
    return kNone;
  }
  return *fields;
}

// A string literal with its embedded NUL bytes (without the final one).
template <size_t N>
std::string Bytes(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}

// Checks that `text` fails at line:col with a message containing `fragment`.
inline ::testing::AssertionResult FailsAt(std::string_view text, int line, int col,
                                   std::string_view fragment) {
  Program program;
  SyntaxError error;
  if (ParseTrace(text, "bad.trace", &program, &error)) {
    return ::testing::AssertionFailure() << "parsed, expected an error";
  }
  if (error.file != "bad.trace" || error.line != line || error.col != col ||
      error.message.find(fragment) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "got \"" << error.ToString() << "\", expected bad.trace:" << line
           << ":" << col << " with \"" << fragment << "\"";
  }
  return ::testing::AssertionSuccess();
}

// Same, for a body appended to kHeader (line 1 of the body is line 6).
inline ::testing::AssertionResult BodyFailsAt(std::string_view body, int body_line,
                                       int col, std::string_view fragment) {
  return FailsAt(std::string(kHeader) + std::string(body),
                 kHeaderLines + body_line, col, fragment);
}

}  // namespace kvspec::trace::parse_test

// Unit tests of the trace parser (trace/parse.cc, docs/TRACE.md):
// syntax errors at their line and column, and robustness.
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "kvspec/trace/parse_test_util.h"
#include "kvspec/trace/program.h"

namespace kvspec::trace::parse_test {
namespace {

// ---------------------------------------------------------------------------
// Header errors.

TEST(TraceParseErrorTest, Version) {
  EXPECT_TRUE(FailsAt("trace 2\nrows 1\nlayer a kv\n", 1, 7,
                      "unsupported trace version 2"));
  EXPECT_TRUE(FailsAt("trace 0\n", 1, 7, "unsupported trace version"));
  EXPECT_TRUE(FailsAt("trace\n", 1, 6, "expected the version"));
  EXPECT_TRUE(FailsAt("trace v1\n", 1, 7, "non-negative decimal integer"));
  EXPECT_TRUE(FailsAt("trace 1 2\n", 1, 9, "unexpected word '2'"));
  EXPECT_TRUE(FailsAt("rows 1\n", 1, 1, "expected `trace 1`"));
  EXPECT_TRUE(FailsAt("  # only a comment\n\n", 3, 1, "empty trace"));
  EXPECT_TRUE(FailsAt("", 1, 1, "empty trace"));
  EXPECT_TRUE(FailsAt("# c", 1, 4, "empty trace"));
}

TEST(TraceParseErrorTest, Rows) {
  EXPECT_TRUE(FailsAt("trace 1\nlayer a kv\n", 2, 1, "expected `rows B`"));
  EXPECT_TRUE(FailsAt("trace 1\n", 2, 1, "expected `rows B`"));
  EXPECT_TRUE(FailsAt("trace 1\n# c\n  rows 0\n", 3, 8, "rows must be in 1..64"));
  EXPECT_TRUE(FailsAt("trace 1\nrows 65\n", 2, 6, "rows must be in 1..64"));
  EXPECT_TRUE(FailsAt("trace 1\nrows\n", 2, 5, "expected the number of rows"));
  EXPECT_TRUE(FailsAt("trace 1\nrows 1 1\n", 2, 8, "unexpected word"));
  EXPECT_TRUE(FailsAt("trace 1\nrows 1\nrows 1\n", 3, 1,
                      "`rows` must come once"));
  EXPECT_TRUE(FailsAt("trace 1\nrows 1\nlayer a kv\nrows 2\n", 4, 1,
                      "right after `trace 1`"));
  EXPECT_TRUE(FailsAt("trace 1\nrows 1\nlayer a kv\ntrace 1\n", 4, 1,
                      "`trace` may only be the first statement"));
}

TEST(TraceParseErrorTest, NoLayers) {
  EXPECT_TRUE(FailsAt("trace 1\nrows 1\n", 3, 1, "at least one `layer`"));
  EXPECT_TRUE(FailsAt("trace 1\nrows 1", 2, 7, "at least one `layer`"));
  EXPECT_TRUE(FailsAt("trace 1\nrows 1\n  window 3\n", 3, 3,
                      "at least one `layer` before the first operation"));
  EXPECT_TRUE(FailsAt("trace 1\nrows 1\nexpect positions 0\n", 3, 1,
                      "at least one `layer`"));
}

TEST(TraceParseErrorTest, LayerDeclarations) {
  const std::string h = "trace 1\nrows 1\n";
  EXPECT_TRUE(FailsAt(h + "layer a lstm\n", 3, 9, "unknown layer kind 'lstm'"));
  EXPECT_TRUE(FailsAt(h + "layer a\n", 3, 8, "expected a kind"));
  EXPECT_TRUE(FailsAt(h + "layer\n", 3, 6, "expected a name"));
  EXPECT_TRUE(FailsAt(h + "layer a rotating heads=2\n", 3, 9,
                      "rotating layer needs window"));
  EXPECT_TRUE(FailsAt(h + "layer a rotating window=8 capacity=4\n", 3, 36,
                      "capacity 4 is smaller than window 8"));
  EXPECT_TRUE(FailsAt(h + "layer a rotating capacity=0 window=1\n", 3, 27,
                      "capacity must be in 1..65536"));
  EXPECT_TRUE(FailsAt(h + "layer a ssm heads=6 kheads=4\n", 3, 28,
                      "kheads 4 does not divide heads 6"));
  EXPECT_TRUE(FailsAt(h + "layer a ssm kheads=2\n", 3, 20,
                      "does not divide heads 1"));
  EXPECT_TRUE(FailsAt(h + "layer a kv heads=2 qheads=3\n", 3, 27,
                      "qheads 3 is not a multiple of heads 2"));
  EXPECT_TRUE(FailsAt(h + "layer a rotating window=2 qheads=1 heads=4\n", 3, 34,
                      "qheads 1 is not a multiple of heads 4"));
  EXPECT_TRUE(FailsAt(h + "layer a kv qheads=65\n", 3, 19, "qheads must be in 1..64"));
  EXPECT_TRUE(FailsAt(h + "layer a kv qheads=0\n", 3, 19, "qheads must be in 1..64"));
  EXPECT_TRUE(FailsAt(h + "layer a ssm qheads=2\n", 3, 13,
                      "key 'qheads' is not allowed for a ssm layer"));
  EXPECT_TRUE(FailsAt(h + "layer a kv qheads=2 qheads=2\n", 3, 21,
                      "repeated key 'qheads'"));
  EXPECT_TRUE(FailsAt(h + "layer a kv\nlayer b ssm\nlayer a rotating window=2\n",
                      5, 7, "duplicate layer name 'a' (declared on line 3)"));
  // A name repeated among later layers: every earlier layer is compared.
  EXPECT_TRUE(FailsAt(h + "layer a kv\nlayer b ssm\nlayer c kv\nlayer b kv\n", 6, 7,
                      "duplicate layer name 'b' (declared on line 4)"));
  EXPECT_TRUE(FailsAt(h + "layer a kv\narm\nlayer b kv\n", 5, 1,
                      "`layer` must come before the first operation"));
  EXPECT_TRUE(FailsAt(h + "layer a kv foo=1\n", 3, 12, "unknown key 'foo'"));
  EXPECT_TRUE(FailsAt(h + "layer a kv heads=1 heads=2\n", 3, 20,
                      "repeated key 'heads'"));
  EXPECT_TRUE(FailsAt(h + "layer a kv conv=2\n", 3, 12,
                      "key 'conv' is not allowed for a kv layer"));
  EXPECT_TRUE(FailsAt(h + "layer a rotating window=2 kheads=1\n", 3, 27,
                      "not allowed for a rotating layer"));
  EXPECT_TRUE(FailsAt(h + "layer a ssm dim=4\n", 3, 13,
                      "not allowed for a ssm layer"));
  EXPECT_TRUE(FailsAt(h + "layer a ssm window=4\n", 3, 13,
                      "not allowed for a ssm layer"));
  EXPECT_TRUE(FailsAt(h + "layer a kv capacity=4\n", 3, 12,
                      "not allowed for a kv layer"));
  EXPECT_TRUE(FailsAt(h + "layer a kv heads\n", 3, 12, "expected key=value"));
  EXPECT_TRUE(FailsAt(h + "layer a kv =3\n", 3, 12, "expected key=value"));
  EXPECT_TRUE(FailsAt(h + "layer a kv heads=\n", 3, 18, "expected an integer"));
  EXPECT_TRUE(FailsAt(h + "layer a kv heads=0\n", 3, 18,
                      "heads must be in 1..64"));
  EXPECT_TRUE(FailsAt(h + "layer a kv heads=65\n", 3, 18, "1..64"));
  EXPECT_TRUE(FailsAt(h + "layer a kv dim=513\n", 3, 16, "dim must be in 1..512"));
  EXPECT_TRUE(FailsAt(h + "layer a kv window=0\n", 3, 19,
                      "window must be in 1..65536"));
  EXPECT_TRUE(FailsAt(h + "layer a rotating window=65537\n", 3, 25,
                      "window must be in 1..65536"));
  EXPECT_TRUE(FailsAt(h + "layer a ssm conv=65\n", 3, 18,
                      "conv must be in 1..64"));
  EXPECT_TRUE(FailsAt(h + "layer a ssm conv=0\n", 3, 18, "conv must be in"));
  EXPECT_TRUE(FailsAt(h + "layer a ssm dk=0\n", 3, 16, "dk must be in 1..512"));
  EXPECT_TRUE(FailsAt(h + "layer a ssm dv=1000\n", 3, 16, "dv must be in"));
  EXPECT_TRUE(FailsAt(h + "layer a ssm kheads=65\n", 3, 20, "kheads must be"));
  EXPECT_TRUE(FailsAt(h + "layer Abc kv\n", 3, 7, "layer: invalid name 'Abc'"));
  EXPECT_TRUE(FailsAt(h + "layer 1a kv\n", 3, 7, "layer: invalid name"));
  EXPECT_TRUE(FailsAt(h + "layer ab-c kv\n", 3, 9, "layer: invalid name 'ab-c'"));
  EXPECT_TRUE(FailsAt(h + "layer a KV\n", 3, 9, "unknown layer kind 'KV'"));
  std::string many = h;
  for (int i = 0; i < 33; ++i) many += "layer l" + std::to_string(i) + " kv\n";
  EXPECT_TRUE(FailsAt(many, 35, 1, "too many layers (at most 32)"));
}

// ---------------------------------------------------------------------------
// Lexical errors.

TEST(TraceParseErrorTest, Integers) {
  EXPECT_TRUE(BodyFailsAt("trim 2147483648", 1, 6, "out of range"));
  EXPECT_EQ(Fields<TrimOp>(ParseOne("trim 2147483647")).count, 2147483647);  // the largest
  EXPECT_TRUE(BodyFailsAt("trim -1", 1, 6, "non-negative decimal integer"));
  EXPECT_TRUE(BodyFailsAt("trim +1", 1, 6, "non-negative decimal integer"));
  EXPECT_TRUE(BodyFailsAt("trim 1x", 1, 7, "non-negative decimal integer"));
  EXPECT_TRUE(BodyFailsAt("trim 0x10", 1, 7, "non-negative decimal integer"));
  EXPECT_TRUE(BodyFailsAt("window 2147483648", 1, 8, "out of range"));
  EXPECT_TRUE(BodyFailsAt("window 99999999999999999999999999", 1, 8,
                          "out of range"));
  EXPECT_TRUE(BodyFailsAt("window 0", 1, 8, "L must be in 1..4096"));
  EXPECT_TRUE(BodyFailsAt("window 4097", 1, 8, "L must be in 1..4096"));
  EXPECT_TRUE(BodyFailsAt("accept 1,2147483648", 1, 10, "out of range"));
  EXPECT_TRUE(BodyFailsAt("expect positions 1,-2", 1, 20,
                          "non-negative decimal integer"));
  // A very long digit string neither overflows nor hangs.
  EXPECT_TRUE(BodyFailsAt("trim " + std::string(1 << 20, '9'), 1, 6,
                          "out of range"));
  const Statement s = ParseOne("trim " + std::string(1 << 20, '0') + "12");
  EXPECT_EQ(Fields<TrimOp>(s).count, 12);
}

TEST(TraceParseErrorTest, Lists) {
  EXPECT_TRUE(BodyFailsAt("accept 1,,2", 1, 10, "empty list item"));
  EXPECT_TRUE(BodyFailsAt("accept ,1", 1, 8, "empty list item"));
  EXPECT_TRUE(BodyFailsAt("accept 1,", 1, 10, "empty list item"));
  EXPECT_TRUE(BodyFailsAt("accept", 1, 7, "expected K"));
  EXPECT_TRUE(BodyFailsAt("accept 1 2", 1, 10, "unexpected word '2'"));
  EXPECT_TRUE(BodyFailsAt("filter", 1, 7, "expected rows"));
  EXPECT_TRUE(BodyFailsAt("filter 0,,1", 1, 10, "empty list item"));
  EXPECT_TRUE(BodyFailsAt("window 2 left=", 1, 15, "expected a list"));
  EXPECT_TRUE(BodyFailsAt("window 2 left=1,", 1, 17, "empty list item"));
  EXPECT_TRUE(BodyFailsAt("window 2 right=0,a", 1, 18,
                          "non-negative decimal integer"));
  EXPECT_TRUE(BodyFailsAt("window 2 ids=5,6/,7", 1, 18, "empty list item"));
  EXPECT_TRUE(BodyFailsAt("window 2 ids=5,6//7,", 1, 21, "empty list item"));
  EXPECT_TRUE(BodyFailsAt("window 2 ids=1/x", 1, 16,
                          "non-negative decimal integer"));
  EXPECT_TRUE(BodyFailsAt("expect positions", 1, 17, "expected N0"));
  EXPECT_TRUE(BodyFailsAt("expect positions 1,,", 1, 20, "empty list item"));
}

TEST(TraceParseErrorTest, Characters) {
  EXPECT_TRUE(FailsAt(Bytes("trace 1\nrows 1\nlayer a kv\nar\0m\n"),
                      4, 3, "NUL byte"));
  EXPECT_TRUE(FailsAt(Bytes("trace 1\0\n"), 1, 8, "NUL byte"));
  EXPECT_TRUE(FailsAt(Bytes("trace 1 # \0\n"), 1, 11, "NUL byte"));
  EXPECT_TRUE(FailsAt(Bytes("\0"), 1, 1, "NUL byte"));
  EXPECT_TRUE(FailsAt("trace 1\x01\n", 1, 8, "control character 0x01"));
  EXPECT_TRUE(FailsAt("trace 1 # \x1b[0m\n", 1, 11, "control character 0x1B"));
  EXPECT_TRUE(FailsAt("trace 1\r\r\n", 1, 8, "control character 0x0D"));
  EXPECT_TRUE(FailsAt("trace 1\rrows 1\r", 1, 8, "control character 0x0D"));
  EXPECT_TRUE(FailsAt("trace 1\x7f\n", 1, 8, "control character 0x7F"));
  EXPECT_TRUE(FailsAt("trace 1\nrows 1\nlayer \xC3\xA9 kv\n", 3, 7,
                      "non-ASCII byte 0xC3"));
  EXPECT_TRUE(FailsAt("trace 1\nrows 1\nlayer a kv\xff\n", 3, 11,
                      "non-ASCII byte 0xFF"));
  EXPECT_TRUE(FailsAt("trace 1\nrows 1\nlayer a kv\f\n", 3, 11,
                      "control character 0x0C"));
}

TEST(TraceParseErrorTest, TooLargeInput) {
  const std::string big((size_t{4} << 20) + 1, ' ');
  EXPECT_TRUE(FailsAt(big, 1, 1, "input too large"));
}

// ---------------------------------------------------------------------------
// Statement errors.

TEST(TraceParseErrorTest, UnknownAndTrailing) {
  EXPECT_TRUE(BodyFailsAt("arm\n  frobnicate 3", 2, 3,
                          "unknown statement 'frobnicate'"));
  EXPECT_TRUE(BodyFailsAt("Arm", 1, 1, "unknown statement 'Arm'"));
  EXPECT_TRUE(BodyFailsAt("arm now", 1, 5, "arm: unexpected word 'now'"));
  EXPECT_TRUE(BodyFailsAt("reload x", 1, 8, "unexpected word 'x'"));
  EXPECT_TRUE(BodyFailsAt("trim 1 bypass x", 1, 15, "unexpected word 'x'"));
  EXPECT_TRUE(BodyFailsAt("trim 1 bypas", 1, 8, "unexpected word 'bypas'"));
  EXPECT_TRUE(BodyFailsAt("trim", 1, 5, "expected the number of tokens"));
  EXPECT_TRUE(BodyFailsAt("fork a b", 1, 8, "unexpected word 'b'"));
  EXPECT_TRUE(BodyFailsAt("fork", 1, 5, "expected a layout name"));
  EXPECT_TRUE(BodyFailsAt("use Main", 1, 5, "use: invalid name 'Main'"));
  EXPECT_TRUE(BodyFailsAt("join a.b", 1, 7, "join: invalid name 'a.b'"));
  EXPECT_TRUE(BodyFailsAt("extract 0 to x", 1, 11, "expected `as`"));
  EXPECT_TRUE(BodyFailsAt("extract 0 as", 1, 13, "layout name after `as`"));
  EXPECT_TRUE(BodyFailsAt("extract 0", 1, 10, "expected `as NAME`"));
  EXPECT_TRUE(BodyFailsAt("extract x as y", 1, 9,
                          "non-negative decimal integer"));
  EXPECT_TRUE(BodyFailsAt("extract 0 as y z", 1, 16, "unexpected word 'z'"));
  EXPECT_TRUE(BodyFailsAt("extract 0 as _y", 1, 14, "extract: invalid name"));
  EXPECT_TRUE(BodyFailsAt("expect equal a-b", 1, 15,
                          "expect equal: invalid name 'a-b'"));
  EXPECT_TRUE(BodyFailsAt("window", 1, 7, "expected the number of columns"));
  EXPECT_TRUE(BodyFailsAt("window 3 ids=1 ids=2", 1, 16,
                          "repeated option 'ids'"));
  EXPECT_TRUE(BodyFailsAt("window 3 middle=1", 1, 10,
                          "unknown option 'middle'"));
  EXPECT_TRUE(BodyFailsAt("window 3 4", 1, 10, "expected key=value"));
  EXPECT_TRUE(BodyFailsAt("window 3 ids = 1", 1, 10, "expected key=value"));
  EXPECT_TRUE(BodyFailsAt("decode left=1", 1, 8,
                          "decode: unknown option 'left' (expected ids=)"));
  EXPECT_TRUE(BodyFailsAt("decode 1", 1, 8, "expected key=value"));
  EXPECT_TRUE(BodyFailsAt("expect", 1, 7, "expected sees, out"));
  EXPECT_TRUE(BodyFailsAt("expect nothing", 1, 8,
                          "unknown expectation 'nothing'"));
  EXPECT_TRUE(BodyFailsAt("expect equal", 1, 13, "expected a layout name"));
  EXPECT_TRUE(BodyFailsAt("expect equal a b", 1, 16, "unexpected word 'b'"));
  EXPECT_TRUE(BodyFailsAt("expect trimmable s maybe", 1, 20,
                          "expected yes or no, got 'maybe'"));
  EXPECT_TRUE(BodyFailsAt("expect trimmable s", 1, 19, "expected yes or no"));
  EXPECT_TRUE(BodyFailsAt("expect trimmable s yes no", 1, 24,
                          "unexpected word 'no'"));
  EXPECT_TRUE(BodyFailsAt("expect kind s", 1, 14, "expected the kind string"));
  EXPECT_TRUE(BodyFailsAt("expect kind s rotating x", 1, 24,
                          "unexpected word 'x'"));
  EXPECT_TRUE(BodyFailsAt("expect bytes_per_token s", 1, 25,
                          "expected a byte count"));
  EXPECT_TRUE(BodyFailsAt("expect bytes_per_token s -4", 1, 26,
                          "non-negative decimal integer"));
}

TEST(TraceParseErrorTest, UnknownLayersInExpectations) {
  EXPECT_TRUE(BodyFailsAt("expect sees q r0 p0: 0", 1, 13,
                          "unknown layer 'q'"));
  EXPECT_TRUE(BodyFailsAt("expect out q r0 p0: 0", 1, 12,
                          "unknown layer 'q'"));
  EXPECT_TRUE(BodyFailsAt("expect trimmable main yes", 1, 18,
                          "unknown layer 'main'"));
  EXPECT_TRUE(BodyFailsAt("expect kind S kv", 1, 13, "unknown layer 'S'"));
  EXPECT_TRUE(BodyFailsAt("expect bytes_per_token zz 4", 1, 24,
                          "unknown layer 'zz'"));
  EXPECT_TRUE(BodyFailsAt("expect sees r r0 p0: 0", 1, 13,
                          "layer 'r' is ssm"));
}

TEST(TraceParseErrorTest, SeesAndOutSyntax) {
  EXPECT_TRUE(BodyFailsAt("expect sees", 1, 12, "expected a layer name"));
  EXPECT_TRUE(BodyFailsAt("expect sees s", 1, 14, "expected rROW"));
  EXPECT_TRUE(BodyFailsAt("expect sees s 0 p0: 0", 1, 15, "expected rROW"));
  EXPECT_TRUE(BodyFailsAt("expect sees s r p0: 0", 1, 16,
                          "expected an integer"));
  EXPECT_TRUE(BodyFailsAt("expect sees s r-1 p0: 0", 1, 16,
                          "non-negative decimal integer"));
  EXPECT_TRUE(BodyFailsAt("expect sees s r0", 1, 17, "expected pPOS"));
  EXPECT_TRUE(BodyFailsAt("expect sees s r0 5: 0", 1, 18, "expected pPOS"));
  EXPECT_TRUE(BodyFailsAt("expect sees s r0 p5", 1, 20, "expected ':'"));
  EXPECT_TRUE(BodyFailsAt("expect sees s r0 p5 4", 1, 21, "expected ':'"));
  EXPECT_TRUE(BodyFailsAt("expect sees s r0 p5x: 4", 1, 20,
                          "non-negative decimal integer"));
  EXPECT_TRUE(BodyFailsAt("expect sees s r0 p: 4", 1, 19,
                          "expected an integer"));
  EXPECT_TRUE(BodyFailsAt("expect sees s r0 p5: 1,,2", 1, 24,
                          "empty list item"));
  EXPECT_TRUE(BodyFailsAt("expect sees s r0 p5: ,2", 1, 22,
                          "empty list item"));
  EXPECT_TRUE(BodyFailsAt("expect sees s r0 p5: 2 ,", 1, 25,
                          "empty list item"));
  EXPECT_TRUE(BodyFailsAt("expect sees s r0 p5: 2 pad", 1, 24,
                          "non-negative decimal integer"));
  EXPECT_TRUE(BodyFailsAt("expect sees s r0 p5: 2 3:", 1, 26,
                          "expected an integer"));
  EXPECT_TRUE(BodyFailsAt("expect sees s r0 p5: 2 :3", 1, 24,
                          "expected an integer"));
  EXPECT_TRUE(BodyFailsAt("expect sees s r0 p5: 3:4:5", 1, 25,
                          "non-negative decimal integer"));
  EXPECT_TRUE(BodyFailsAt("expect sees s r0 p5: 3:99999999999", 1, 24,
                          "out of range"));
  EXPECT_TRUE(BodyFailsAt("expect out s r0 p5:", 1, 20,
                          "at least one value"));
  EXPECT_TRUE(BodyFailsAt("expect out s r0 p5 :  # none", 1, 21,
                          "at least one value"));
  EXPECT_TRUE(BodyFailsAt("expect out s r0 p5: 1 nan", 1, 23,
                          "expected a decimal number"));
  EXPECT_TRUE(BodyFailsAt("expect out s r0 p5: inf", 1, 21,
                          "expected a decimal number"));
  EXPECT_TRUE(BodyFailsAt("expect out s r0 p5: 0x1p3", 1, 22,
                          "expected a decimal number"));
  EXPECT_TRUE(BodyFailsAt("expect out s r0 p5: 1.5f", 1, 24,
                          "expected a decimal number"));
  EXPECT_TRUE(BodyFailsAt("expect out s r0 p5: 1e", 1, 22,
                          "expected a decimal number"));
  // The exponent's digits end at the first non-digit, which is named.
  EXPECT_TRUE(BodyFailsAt("expect out s r0 p5: 1e5x", 1, 24,
                          "expected a decimal number"));
  EXPECT_TRUE(BodyFailsAt("expect out s r0 p5: 2.5E-3q7", 1, 27,
                          "expected a decimal number"));
  EXPECT_TRUE(BodyFailsAt("expect out s r0 p5: -", 1, 21,
                          "expected a decimal number"));
  EXPECT_TRUE(BodyFailsAt("expect out s r0 p5: .", 1, 21,
                          "expected a decimal number"));
  EXPECT_TRUE(BodyFailsAt("expect out s r0 p5: 1e999", 1, 21, "not finite"));
  EXPECT_TRUE(BodyFailsAt("expect out s r0 p5: -1e999", 1, 21, "not finite"));
  EXPECT_TRUE(BodyFailsAt("expect out s r0 p5: 1,,2", 1, 23,
                          "empty list item"));
  EXPECT_TRUE(BodyFailsAt("expect out s r0 p5: 0." + std::string(200, '1'),
                          1, 21, "number too long"));
}

// ---------------------------------------------------------------------------
// Exact messages: a refusal whose check were lost would often still be
// refused by a later check, with another message.

// `text` fails at line:col with exactly `message`.
::testing::AssertionResult FailsWithExactly(std::string_view text, int line, int col,
                                            std::string_view message) {
  Program program;
  SyntaxError error;
  if (ParseTrace(text, "bad.trace", &program, &error)) {
    return ::testing::AssertionFailure() << "parsed, expected an error";
  }
  if (error.file != "bad.trace" || error.line != line || error.col != col ||
      error.message != message) {
    return ::testing::AssertionFailure()
           << "got \"" << error.ToString() << "\", expected bad.trace:" << line << ":" << col
           << ": " << message;
  }
  return ::testing::AssertionSuccess();
}

TEST(TraceParseErrorTest, ExactMessages) {
  const std::string h = "trace 1\nrows 1\n";
  // A value of more than 100 characters is refused for its length, even
  // when it is no number at all; 100 characters are read.
  const std::string out = std::string(kHeader) + "expect out s r0 p5: ";
  const std::string too_long = "number too long (more than 100 characters)";
  EXPECT_TRUE(FailsWithExactly(out + "0." + std::string(99, '1') + "\n", kHeaderLines + 1, 21,
                               too_long));
  EXPECT_TRUE(FailsWithExactly(out + std::string(101, 'x') + "\n", kHeaderLines + 1, 21,
                               too_long));
  EXPECT_TRUE(FailsWithExactly(out + "1, 2," + std::string(101, '7') + "\n", kHeaderLines + 1,
                               26, too_long));
  MustParse(out + "0." + std::string(98, '1') + "\n");
  // A list of values ending in a comma.
  EXPECT_TRUE(FailsWithExactly(out + "1,\n", kHeaderLines + 1, 23, "empty list item after ','"));
  EXPECT_TRUE(FailsWithExactly(std::string(kHeader) + "expect sees s r0 p5: 3 4:9,\n",
                               kHeaderLines + 1, 28, "empty list item after ','"));
  // A layer's word after the kind without '=' or with an empty key.
  EXPECT_TRUE(FailsWithExactly(h + "layer a kv heads\n", 3, 12,
                               "layer: expected key=value, got 'heads'"));
  EXPECT_TRUE(FailsWithExactly(h + "layer a kv =3\n", 3, 12,
                               "layer: expected key=value, got '=3'"));
  EXPECT_TRUE(FailsWithExactly(h + "layer a kv heads=2 dim\n", 3, 20,
                               "layer: expected key=value, got 'dim'"));
  // A rotating layer without its window, whatever else it is given; the
  // error is at the kind.
  EXPECT_TRUE(FailsWithExactly(h + "layer a rotating\n", 3, 9,
                               "layer: a rotating layer needs window=W"));
  EXPECT_TRUE(FailsWithExactly(h + "layer a rotating capacity=4\n", 3, 9,
                               "layer: a rotating layer needs window=W"));
  EXPECT_TRUE(FailsWithExactly(h + "layer a kv\nlayer bb  rotating heads=2\n", 4, 11,
                               "layer: a rotating layer needs window=W"));
}

// A statement cut short before a word it needs is refused at the column
// right after its last word, with a message naming the missing word; on
// its own and inside `expect error` (whose column moves by its two words).
// Every word-prefix of these statements that is not a statement itself is
// listed, so a cut that read past the last word, or took another path,
// fails here.
TEST(TraceParseErrorTest, AStatementCutShortNamesTheMissingWordAtItsEnd) {
  const std::vector<std::pair<std::string, std::string>> cuts = {
      {"accept", "accept: expected K or K0,K1,.."},
      {"filter", "filter: expected rows R0,R1,.."},
      {"window", "window: expected the number of columns L"},
      {"trim", "trim: expected the number of tokens N"},
      {"fork", "fork: expected a layout name"},
      {"use", "use: expected a layout name"},
      {"join", "join: expected a layout name"},
      {"extract", "extract: expected `R as NAME`"},
      {"extract 0", "extract: expected `as NAME` after the row"},
      {"extract 0 as", "extract: expected a layout name after `as`"},
      {"expect",
       "expect: expected sees, out, positions, error, equal, trimmable, kind or bytes_per_token"},
      {"expect positions", "expect positions: expected N0,N1,.."},
      {"expect equal", "expect equal: expected a layout name"},
      {"expect error", "expect error: expected an operation"},
      {"expect trimmable", "expect trimmable: expected a layer name"},
      {"expect trimmable s", "expect trimmable: expected yes or no"},
      {"expect kind", "expect kind: expected a layer name"},
      {"expect kind s", "expect kind: expected the kind string"},
      {"expect bytes_per_token", "expect bytes_per_token: expected a layer name"},
      {"expect bytes_per_token k", "expect bytes_per_token: expected a byte count"},
      {"expect sees", "expect sees: expected a layer name"},
      {"expect sees s", "expect sees: expected rROW (like r0)"},
      {"expect sees s r0", "expect sees: expected pPOS: (like p0:)"},
      {"expect out", "expect out: expected a layer name"},
      {"expect out s", "expect out: expected rROW (like r0)"},
      {"expect out s r0", "expect out: expected pPOS: (like p0:)"},
  };
  for (const auto& [body, message] : cuts) {
    SCOPED_TRACE(body);
    const int end = static_cast<int>(body.size()) + 1;
    EXPECT_TRUE(FailsWithExactly(std::string(kHeader) + body + "\n", kHeaderLines + 1, end,
                                 message));
    // With the trailing blanks and a comment the column is the same.
    EXPECT_TRUE(FailsWithExactly(std::string(kHeader) + body + "   # cut\n", kHeaderLines + 1,
                                 end, message));
    const bool operation = body.rfind("expect", 0) != 0;
    if (operation) {
      EXPECT_TRUE(FailsWithExactly(std::string(kHeader) + "expect error " + body + "\n",
                                   kHeaderLines + 1, end + 13, message));
    }
  }
  // The full statements parse: the cuts above are cuts of real statements.
  MustParse(std::string(kHeader) +
            "window 2\naccept 0\nfilter 0\ntrim 1\nfork a\nuse a\njoin main\n"
            "extract 0 as b\nexpect positions 2\nexpect equal a\nexpect error trim 9\n"
            "expect trimmable s yes\nexpect kind s rotating\nexpect bytes_per_token k 64\n"
            "expect sees s r0 p1: 0 1\nexpect out s r0 p1: 0\n");
}

TEST(TraceParseErrorTest, ExpectErrorNesting) {
  EXPECT_TRUE(BodyFailsAt("expect error expect positions 0", 1, 14,
                          "not an expectation"));
  EXPECT_TRUE(BodyFailsAt("expect error", 1, 13, "expected an operation"));
  EXPECT_TRUE(BodyFailsAt("expect error layer z kv", 1, 14,
                          "'layer' is not an operation"));
  EXPECT_TRUE(BodyFailsAt("expect error bogus", 1, 14,
                          "'bogus' is not an operation"));
  EXPECT_TRUE(BodyFailsAt("expect error trim 1 2", 1, 21,
                          "trim: unexpected word '2'"));
  EXPECT_TRUE(BodyFailsAt("expect error window 0", 1, 21, "L must be in"));
}

TEST(TraceParseErrorTest, ForkExtractBudget) {
  std::string body;
  for (int i = 0; i < 64; ++i) body += "fork f" + std::to_string(i) + "\n";
  EXPECT_TRUE(BodyFailsAt(body + "  fork g\n", 65, 3,
                          "more than 64 fork and extract statements"));
  EXPECT_TRUE(BodyFailsAt(body + "extract 0 as g\n", 65, 1, "more than 64"));
  EXPECT_TRUE(BodyFailsAt(body + "expect error fork g\n", 65, 14,
                          "more than 64"));
  // Forks inside `expect error` count too.
  std::string inner;
  for (int i = 0; i < 64; ++i) {
    inner += "expect error extract 0 as e" + std::to_string(i) + "\n";
  }
  EXPECT_TRUE(BodyFailsAt(inner + "arm\nfork z\n", 66, 1, "more than 64"));
  // Other statements do not count.
  std::string other;
  for (int i = 0; i < 100; ++i) other += "use main\njoin b\n";
  EXPECT_TRUE(MustParse(std::string(kHeader) + other).body.size() == 200u);
}

// ---------------------------------------------------------------------------
// Robustness: random and mutated input never crashes (run under sanitizers),
// and every error points inside the file.

void CheckNoCrash(const std::string& text) {
  Program program;
  SyntaxError error;
  if (ParseTrace(text, "fuzz", &program, &error)) {
    EXPECT_FALSE(program.layers.empty());
    EXPECT_GE(program.rows, 1);
    EXPECT_LE(program.rows, kMaxRows);
    return;
  }
  size_t lines = 1;
  for (const char c : text) lines += c == '\n';
  EXPECT_GE(error.line, 1) << text;
  EXPECT_LE(static_cast<size_t>(error.line), lines) << text;
  EXPECT_GE(error.col, 1) << text;
  EXPECT_LE(static_cast<size_t>(error.col), text.size() + 1) << text;
  EXPECT_FALSE(error.message.empty());
}

TEST(TraceParseRobustnessTest, EveryPrefixOfTheExample) {
  const std::string full = std::string(kExample) + "expect out r r0 p4: 1.5\n";
  for (size_t n = 0; n <= full.size(); ++n) CheckNoCrash(full.substr(0, n));
}

TEST(TraceParseRobustnessTest, RandomMutations) {
  const std::string seed =
      std::string(kHeader) +
      "window 3 left=1,0 right=0,1 ids=1/2,3\n"
      "decode ids=4/5\narm\naccept 1,0\ntrim 1 bypass\nfork a\nuse a\n"
      "join main\nfilter 0,1\nextract 1 as b\nreload\n"
      "expect sees s r0 p1: 0 1:2\nexpect out r r1 p2: -1.5e-3 2\n"
      "expect positions 1,2\nexpect error trim 9\nexpect equal a\n"
      "expect trimmable k yes\nexpect kind s rotating\n"
      "expect bytes_per_token k 128\n";
  CheckNoCrash(seed);
  std::mt19937 rng(12345);
  const char alphabet[] = "0123456789,/:=#-+.eE \t\r\n\0\x80prsabkvwindowxyz";
  for (int iteration = 0; iteration < 20000; ++iteration) {
    std::string text = seed;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % text.size();
      const char c = alphabet[rng() % (sizeof alphabet - 1)];
      switch (rng() % 4) {
        case 0:
          text[at] = c;
          break;
        case 1:
          text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c);
          break;
        case 2:
          text.erase(at, 1 + rng() % 8);
          break;
        default:
          text[at] = static_cast<char>(rng() & 0xff);
          break;
      }
    }
    CheckNoCrash(text);
  }
}

TEST(TraceParseRobustnessTest, RandomBytes) {
  std::mt19937 rng(777);
  for (int iteration = 0; iteration < 2000; ++iteration) {
    std::string text = "trace 1\nrows 1\nlayer a kv\n";
    const size_t n = rng() % 64;
    for (size_t i = 0; i < n; ++i) text += static_cast<char>(rng() & 0xff);
    CheckNoCrash(text);
  }
}

}  // namespace
}  // namespace kvspec::trace::parse_test

// Unit tests of the trace parser (trace/parse.cc, ../shared/TRACE.md).
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "trace/program.h"

namespace kvspec::trace {
namespace {

constexpr char kHeader[] = "trace 1\nrows 2\nlayer s rotating window=4\n"
                           "layer k kv heads=2 dim=8\nlayer r ssm\n";
constexpr int kHeaderLines = 5;

// The example at the end of TRACE.md, verbatim.
constexpr char kExample[] =
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

Program MustParse(std::string_view text) {
  Program program;
  SyntaxError error;
  const bool ok = ParseTrace(text, "t.trace", &program, &error);
  EXPECT_TRUE(ok) << error.ToString();
  return program;
}

// Parses kHeader + body and returns the single body statement.
Statement ParseOne(std::string_view body) {
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
::testing::AssertionResult FailsAt(std::string_view text, int line, int col,
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
::testing::AssertionResult BodyFailsAt(std::string_view body, int body_line,
                                       int col, std::string_view fragment) {
  return FailsAt(std::string(kHeader) + std::string(body),
                 kHeaderLines + body_line, col, fragment);
}

// ---------------------------------------------------------------------------
// Valid input.

TEST(TraceParseTest, ExampleFromTraceMd) {
  const Program p = MustParse(kExample);
  EXPECT_EQ(p.file, "t.trace");
  EXPECT_EQ(p.rows, 1);
  ASSERT_EQ(p.layers.size(), 2u);
  EXPECT_EQ(p.layers[0].name, "s");
  EXPECT_EQ(p.layers[0].kind, CacheKind::kRotating);
  EXPECT_EQ(p.layers[0].window, 4);
  EXPECT_EQ(p.layers[0].capacity, 4);
  EXPECT_EQ(p.layers[0].heads, 1);
  EXPECT_EQ(p.layers[0].dim, 4);
  EXPECT_EQ(p.layer_lines[0], 3);
  EXPECT_EQ(p.layers[1].name, "r");
  EXPECT_EQ(p.layers[1].kind, CacheKind::kSsm);
  EXPECT_EQ(p.layers[1].heads, 1);
  EXPECT_EQ(p.layers[1].kheads, 1);
  EXPECT_EQ(p.layers[1].dk, 4);
  EXPECT_EQ(p.layers[1].dv, 4);
  EXPECT_EQ(p.layers[1].conv, 4);
  EXPECT_EQ(p.layer_lines[1], 4);
  EXPECT_EQ(p.header_end_line, 4);

  ASSERT_EQ(p.lines.size(), 12u);
  EXPECT_EQ(p.lines[0], "trace 1");
  EXPECT_EQ(p.lines[5], "arm");
  EXPECT_EQ(p.lines[11], "expect sees s r0 p4: 1 2 3:103 4:204");

  ASSERT_EQ(p.body.size(), 8u);
  const std::vector<Op> ops = {Op::kWindow,      Op::kArm,
                               Op::kWindow,      Op::kExpectSees,
                               Op::kAccept,      Op::kExpectPositions,
                               Op::kDecode,      Op::kExpectSees};
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(p.body[i].op(), ops[i]) << i;
    EXPECT_EQ(p.body[i].line, static_cast<int>(i) + 5) << i;
  }
  EXPECT_EQ(Fields<WindowOp>(p.body[0]).columns, 3);
  EXPECT_FALSE(Fields<WindowOp>(p.body[0]).has_ids);
  EXPECT_FALSE(Fields<WindowOp>(p.body[0]).has_left);
  EXPECT_FALSE(Fields<WindowOp>(p.body[0]).has_right);
  EXPECT_EQ(Fields<WindowOp>(p.body[2]).columns, 3);
  EXPECT_TRUE(Fields<WindowOp>(p.body[2]).has_ids);
  ASSERT_EQ(Fields<WindowOp>(p.body[2]).ids.size(), 1u);
  EXPECT_EQ(Fields<WindowOp>(p.body[2]).ids[0], (std::vector<int32_t>{103, 104, 105}));
  EXPECT_EQ(Fields<ExpectSees>(p.body[3]).layer, 0);
  EXPECT_EQ(Fields<ExpectSees>(p.body[3]).row, 0);
  EXPECT_EQ(Fields<ExpectSees>(p.body[3]).pos, 5);
  EXPECT_EQ(Fields<ExpectSees>(p.body[3]).items,
            (std::vector<SeenItem>{{2, 2}, {3, 103}, {4, 104}, {5, 105}}));
  EXPECT_EQ(Fields<AcceptOp>(p.body[4]).keep, (std::vector<int32_t>{1}));
  EXPECT_EQ(Fields<ExpectPositions>(p.body[5]).positions, (std::vector<int32_t>{4}));
  EXPECT_EQ(Fields<DecodeOp>(p.body[6]).AsWindow().columns, 1);
  EXPECT_TRUE(Fields<DecodeOp>(p.body[6]).has_ids);
  ASSERT_EQ(Fields<DecodeOp>(p.body[6]).ids.size(), 1u);
  EXPECT_EQ(Fields<DecodeOp>(p.body[6]).ids[0], (std::vector<int32_t>{204}));
  EXPECT_EQ(Fields<ExpectSees>(p.body[7]).pos, 4);
  EXPECT_EQ(Fields<ExpectSees>(p.body[7]).items, (std::vector<SeenItem>{
                                 {1, 1}, {2, 2}, {3, 103}, {4, 204}}));
}

TEST(TraceParseTest, CrlfLinesAreAccepted) {
  std::string crlf;
  for (const char c : std::string(kExample)) {
    if (c == '\n') crlf += '\r';
    crlf += c;
  }
  const Program p = MustParse(crlf);
  ASSERT_EQ(p.lines.size(), 12u);
  EXPECT_EQ(p.lines[0], "trace 1");
  EXPECT_EQ(p.lines[11], "expect sees s r0 p4: 1 2 3:103 4:204");
  ASSERT_EQ(p.body.size(), 8u);
  EXPECT_EQ(Fields<ExpectSees>(p.body[7]).items.back(), (SeenItem{4, 204}));
  // A final line without '\n' but with '\r'.
  const Program q = MustParse("trace 1\r\nrows 3\r\nlayer a kv\r");
  EXPECT_EQ(q.rows, 3);
  ASSERT_EQ(q.lines.size(), 3u);
  EXPECT_EQ(q.lines[2], "layer a kv");
}

TEST(TraceParseTest, LinesCommentsBlanksAndTabs) {
  const Program p = MustParse(
      "# leading comment\n"
      "\n"
      "\ttrace\t1   # version\n"
      "   \n"
      "rows 1#glued comment\n"
      "layer a kv # caf\xC3\xA9 in a comment is fine\n"
      "arm");
  EXPECT_EQ(p.header_end_line, 6);
  ASSERT_EQ(p.lines.size(), 7u);
  EXPECT_EQ(p.lines[0], "# leading comment");
  EXPECT_EQ(p.lines[1], "");
  EXPECT_EQ(p.lines[2], "\ttrace\t1   # version");
  ASSERT_EQ(p.body.size(), 1u);
  EXPECT_EQ(p.body[0].op(), Op::kArm);
  EXPECT_EQ(p.body[0].line, 7);
}

TEST(TraceParseTest, HeaderOnlyIsValid) {
  const Program p = MustParse("trace 1\nrows 64\nlayer a kv\n");
  EXPECT_EQ(p.rows, 64);
  EXPECT_TRUE(p.body.empty());
  EXPECT_EQ(p.header_end_line, 3);
  EXPECT_EQ(p.lines.size(), 3u);
}

TEST(TraceParseTest, LayerKeysAndDefaults) {
  const Program p = MustParse(
      "trace 1\nrows 2\n"
      "layer full kv\n"
      "layer win kv window=7 heads=3 dim=16\n"
      "layer ring rotating capacity=12 dim=512 window=8 heads=64\n"
      "layer ring2 rotating window=65536 capacity=65536\n"
      "layer gdn ssm heads=8 kheads=2 dk=32 dv=64 conv=1\n"
      "layer gdn2 ssm heads=6\n"
      "layer x_9 ssm conv=64 dk=512 dv=1\n");
  ASSERT_EQ(p.layers.size(), 7u);
  const LayerConfig& full = p.layers[0];
  EXPECT_EQ(full.kind, CacheKind::kKv);
  EXPECT_EQ(full.heads, 1);
  EXPECT_EQ(full.dim, 4);
  EXPECT_EQ(full.window, 0);
  EXPECT_EQ(full.capacity, 0);
  const LayerConfig& win = p.layers[1];
  EXPECT_EQ(win.window, 7);
  EXPECT_EQ(win.heads, 3);
  EXPECT_EQ(win.dim, 16);
  const LayerConfig& ring = p.layers[2];
  EXPECT_EQ(ring.kind, CacheKind::kRotating);
  EXPECT_EQ(ring.window, 8);
  EXPECT_EQ(ring.capacity, 12);
  EXPECT_EQ(ring.dim, 512);
  EXPECT_EQ(ring.heads, 64);
  EXPECT_EQ(p.layers[3].window, 65536);
  EXPECT_EQ(p.layers[3].capacity, 65536);
  const LayerConfig& gdn = p.layers[4];
  EXPECT_EQ(gdn.kind, CacheKind::kSsm);
  EXPECT_EQ(gdn.heads, 8);
  EXPECT_EQ(gdn.kheads, 2);
  EXPECT_EQ(gdn.dk, 32);
  EXPECT_EQ(gdn.dv, 64);
  EXPECT_EQ(gdn.conv, 1);
  EXPECT_EQ(p.layers[5].kheads, 6);  // defaults to heads
  EXPECT_EQ(p.layers[5].conv, 4);
  EXPECT_EQ(p.layers[6].name, "x_9");
  EXPECT_EQ(p.layers[6].conv, 64);
  EXPECT_EQ(p.layers[6].dk, 512);
  EXPECT_EQ(p.layers[6].dv, 1);
  EXPECT_EQ(p.header_end_line, 9);
  EXPECT_EQ(FindLayer(p, "ring"), 2);
  EXPECT_EQ(FindLayer(p, "x_9"), 6);
  EXPECT_EQ(FindLayer(p, "nope"), -1);
  EXPECT_EQ(FindLayer(p, ""), -1);
}

TEST(TraceParseTest, ThirtyTwoLayersAreAllowed) {
  std::string text = "trace 1\nrows 1\n";
  for (int i = 0; i < 32; ++i) text += "layer l" + std::to_string(i) + " kv\n";
  const Program p = MustParse(text);
  EXPECT_EQ(p.layers.size(), 32u);
  EXPECT_EQ(p.header_end_line, 34);
}

TEST(TraceParseTest, WindowStatement) {
  Statement s = ParseOne("window 4096 ids=5,6//7 right=0,1 left=2,0");
  EXPECT_EQ(s.op(), Op::kWindow);
  EXPECT_EQ(Fields<WindowOp>(s).columns, 4096);
  EXPECT_TRUE(Fields<WindowOp>(s).has_left);
  EXPECT_TRUE(Fields<WindowOp>(s).has_right);
  EXPECT_TRUE(Fields<WindowOp>(s).has_ids);
  EXPECT_EQ(Fields<WindowOp>(s).left, (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(Fields<WindowOp>(s).right, (std::vector<int32_t>{0, 1}));
  ASSERT_EQ(Fields<WindowOp>(s).ids.size(), 3u);
  EXPECT_EQ(Fields<WindowOp>(s).ids[0], (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(Fields<WindowOp>(s).ids[1].empty());
  EXPECT_EQ(Fields<WindowOp>(s).ids[2], (std::vector<int32_t>{7}));

  s = ParseOne("window 1 ids=");
  EXPECT_EQ(Fields<WindowOp>(s).columns, 1);
  EXPECT_FALSE(Fields<WindowOp>(s).has_left);
  EXPECT_FALSE(Fields<WindowOp>(s).has_right);
  EXPECT_TRUE(Fields<WindowOp>(s).has_ids);
  ASSERT_EQ(Fields<WindowOp>(s).ids.size(), 1u);
  EXPECT_TRUE(Fields<WindowOp>(s).ids[0].empty());

  s = ParseOne("window 2 ids=/");
  ASSERT_EQ(Fields<WindowOp>(s).ids.size(), 2u);
  EXPECT_TRUE(Fields<WindowOp>(s).ids[0].empty());
  EXPECT_TRUE(Fields<WindowOp>(s).ids[1].empty());

  s = ParseOne("window 3 left=1");
  EXPECT_TRUE(Fields<WindowOp>(s).has_left);
  EXPECT_FALSE(Fields<WindowOp>(s).has_ids);
  EXPECT_EQ(Fields<WindowOp>(s).left, (std::vector<int32_t>{1}));
  EXPECT_TRUE(Fields<WindowOp>(s).ids.empty());

  s = ParseOne("window 007 ids=2147483647,0");  // leading zeros are decimal
  EXPECT_EQ(Fields<WindowOp>(s).columns, 7);
  EXPECT_EQ(Fields<WindowOp>(s).ids[0], (std::vector<int32_t>{2147483647, 0}));
}

TEST(TraceParseTest, DecodeStatement) {
  Statement s = ParseOne("decode");
  EXPECT_EQ(s.op(), Op::kDecode);
  EXPECT_EQ(Fields<DecodeOp>(s).AsWindow().columns, 1);
  EXPECT_FALSE(Fields<DecodeOp>(s).has_ids);
  s = ParseOne("decode ids=10/20");
  EXPECT_EQ(s.op(), Op::kDecode);
  EXPECT_TRUE(Fields<DecodeOp>(s).has_ids);
  ASSERT_EQ(Fields<DecodeOp>(s).ids.size(), 2u);
  EXPECT_EQ(Fields<DecodeOp>(s).ids[0], (std::vector<int32_t>{10}));
  EXPECT_EQ(Fields<DecodeOp>(s).ids[1], (std::vector<int32_t>{20}));
  // Several ids per row are a run-time matter, not syntax.
  s = ParseOne("decode ids=1,2/");
  EXPECT_EQ(Fields<DecodeOp>(s).ids[0], (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(Fields<DecodeOp>(s).ids[1].empty());
}

TEST(TraceParseTest, TrimArmAcceptReload) {
  Statement s = ParseOne("trim 3");
  EXPECT_EQ(s.op(), Op::kTrim);
  EXPECT_EQ(Fields<TrimOp>(s).count, 3);
  EXPECT_FALSE(Fields<TrimOp>(s).bypass);
  s = ParseOne("trim 0 bypass");
  EXPECT_EQ(Fields<TrimOp>(s).count, 0);
  EXPECT_TRUE(Fields<TrimOp>(s).bypass);
  EXPECT_EQ(ParseOne("arm").op(), Op::kArm);
  EXPECT_EQ(ParseOne("reload").op(), Op::kReload);
  s = ParseOne("accept 2");
  EXPECT_EQ(s.op(), Op::kAccept);
  EXPECT_EQ(Fields<AcceptOp>(s).keep, (std::vector<int32_t>{2}));
  s = ParseOne("accept 0,3,1");
  EXPECT_EQ(Fields<AcceptOp>(s).keep, (std::vector<int32_t>{0, 3, 1}));
}

TEST(TraceParseTest, LayoutStatements) {
  Statement s = ParseOne("fork side_1");
  EXPECT_EQ(s.op(), Op::kFork);
  EXPECT_EQ(Fields<ForkOp>(s).name, "side_1");
  s = ParseOne("use main");
  EXPECT_EQ(s.op(), Op::kUse);
  EXPECT_EQ(Fields<UseOp>(s).name, "main");
  s = ParseOne("join b");
  EXPECT_EQ(s.op(), Op::kJoin);
  EXPECT_EQ(Fields<JoinOp>(s).name, "b");
  s = ParseOne("filter 0,2,5");
  EXPECT_EQ(s.op(), Op::kFilter);
  EXPECT_EQ(Fields<FilterOp>(s).rows, (std::vector<int32_t>{0, 2, 5}));
  s = ParseOne("filter 1");
  EXPECT_EQ(Fields<FilterOp>(s).rows, (std::vector<int32_t>{1}));
  s = ParseOne("extract 1 as one");
  EXPECT_EQ(s.op(), Op::kExtract);
  EXPECT_EQ(Fields<ExtractOp>(s).row, 1);
  EXPECT_EQ(Fields<ExtractOp>(s).name, "one");
}

TEST(TraceParseTest, ExpectSees) {
  Statement s = ParseOne("expect sees k r1 p6: 0,1:7, 2 3:3");
  EXPECT_EQ(s.op(), Op::kExpectSees);
  EXPECT_EQ(Fields<ExpectSees>(s).layer, 1);
  EXPECT_EQ(Fields<ExpectSees>(s).row, 1);
  EXPECT_EQ(Fields<ExpectSees>(s).pos, 6);
  EXPECT_EQ(Fields<ExpectSees>(s).items,
            (std::vector<SeenItem>{{0, 0}, {1, 7}, {2, 2}, {3, 3}}));
  // Separate colon, empty list.
  s = ParseOne("expect sees s r0 p0 :");
  EXPECT_EQ(Fields<ExpectSees>(s).layer, 0);
  EXPECT_EQ(Fields<ExpectSees>(s).pos, 0);
  EXPECT_TRUE(Fields<ExpectSees>(s).items.empty());
  s = ParseOne("expect sees s r0 p0:   # nothing visible");
  EXPECT_TRUE(Fields<ExpectSees>(s).items.empty());
  // Colon glued to the first item, either way.
  s = ParseOne("expect sees s r2 p9:8 9:90");
  EXPECT_EQ(Fields<ExpectSees>(s).row, 2);
  EXPECT_EQ(Fields<ExpectSees>(s).items, (std::vector<SeenItem>{{8, 8}, {9, 90}}));
  s = ParseOne("expect sees s r0 p9 :8,9");
  EXPECT_EQ(Fields<ExpectSees>(s).items, (std::vector<SeenItem>{{8, 8}, {9, 9}}));
  s = ParseOne("expect sees s r0 p1:\t0\t1");
  EXPECT_EQ(Fields<ExpectSees>(s).items, (std::vector<SeenItem>{{0, 0}, {1, 1}}));
}

TEST(TraceParseTest, ExpectOut) {
  Statement s = ParseOne(
      "expect out r r0 p3: -0.5 1e-3 2.5E+2 .25 7. -1 +3 0,4.5");
  EXPECT_EQ(s.op(), Op::kExpectOut);
  EXPECT_EQ(Fields<ExpectOut>(s).layer, 2);
  EXPECT_EQ(Fields<ExpectOut>(s).row, 0);
  EXPECT_EQ(Fields<ExpectOut>(s).pos, 3);
  EXPECT_EQ(Fields<ExpectOut>(s).values, (std::vector<double>{-0.5, 1e-3, 250.0, 0.25, 7.0, -1.0,
                                           3.0, 0.0, 4.5}));
  s = ParseOne("expect out k r1 p0 : 0.123456789");
  EXPECT_EQ(Fields<ExpectOut>(s).layer, 1);
  ASSERT_EQ(Fields<ExpectOut>(s).values.size(), 1u);
  EXPECT_DOUBLE_EQ(Fields<ExpectOut>(s).values[0], 0.123456789);
  s = ParseOne("expect out s r0 p0:1e-400");  // underflow reads as 0
  ASSERT_EQ(Fields<ExpectOut>(s).values.size(), 1u);
  EXPECT_EQ(Fields<ExpectOut>(s).values[0], 0.0);
}

TEST(TraceParseTest, OtherExpectations) {
  Statement s = ParseOne("expect positions 4,0");
  EXPECT_EQ(s.op(), Op::kExpectPositions);
  EXPECT_EQ(Fields<ExpectPositions>(s).positions, (std::vector<int32_t>{4, 0}));
  s = ParseOne("expect equal other");
  EXPECT_EQ(s.op(), Op::kExpectEqual);
  EXPECT_EQ(Fields<ExpectEqual>(s).name, "other");
  s = ParseOne("expect trimmable s yes");
  EXPECT_EQ(s.op(), Op::kExpectTrimmable);
  EXPECT_EQ(Fields<ExpectTrimmable>(s).layer, 0);
  EXPECT_TRUE(Fields<ExpectTrimmable>(s).yes);
  s = ParseOne("expect trimmable r no");
  EXPECT_EQ(Fields<ExpectTrimmable>(s).layer, 2);
  EXPECT_FALSE(Fields<ExpectTrimmable>(s).yes);
  s = ParseOne("expect kind k persisted(batched_kv)");
  EXPECT_EQ(s.op(), Op::kExpectKind);
  EXPECT_EQ(Fields<ExpectKind>(s).layer, 1);
  EXPECT_EQ(Fields<ExpectKind>(s).kind_string, "persisted(batched_kv)");
  s = ParseOne("expect bytes_per_token k 128");
  EXPECT_EQ(s.op(), Op::kExpectBytesPerToken);
  EXPECT_EQ(Fields<ExpectBytesPerToken>(s).layer, 1);
  EXPECT_EQ(Fields<ExpectBytesPerToken>(s).bytes, 128);
  s = ParseOne("expect bytes_per_token r 0");
  EXPECT_EQ(Fields<ExpectBytesPerToken>(s).layer, 2);
  EXPECT_EQ(Fields<ExpectBytesPerToken>(s).bytes, 0);
  EXPECT_TRUE(std::holds_alternative<ArmOp>(ParseOne("arm").operation));
}

TEST(TraceParseTest, ExpectError) {
  Statement s = ParseOne("expect error trim 2 bypass");
  EXPECT_EQ(s.op(), Op::kExpectError);
  std::shared_ptr<Statement> inner = Fields<ExpectError>(s).inner;
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(inner->op(), Op::kTrim);
  EXPECT_EQ(Fields<TrimOp>(*inner).count, 2);
  EXPECT_TRUE(Fields<TrimOp>(*inner).bypass);
  EXPECT_EQ(inner->line, kHeaderLines + 1);
  inner = Fields<ExpectError>(ParseOne("expect error window 3 left=4,0 ids=1/2")).inner;
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(inner->op(), Op::kWindow);
  EXPECT_EQ(Fields<WindowOp>(*inner).columns, 3);
  EXPECT_EQ(Fields<WindowOp>(*inner).left, (std::vector<int32_t>{4, 0}));
  EXPECT_EQ(Fields<WindowOp>(*inner).ids.size(), 2u);
  inner = Fields<ExpectError>(ParseOne("expect error extract 9 as x")).inner;
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(inner->op(), Op::kExtract);
  EXPECT_EQ(Fields<ExtractOp>(*inner).row, 9);
  EXPECT_EQ(Fields<ExtractOp>(*inner).name, "x");
  // List lengths against rows are a run-time matter: 65 rows parse.
  std::string many = "expect error filter 0";
  for (int i = 1; i < 65; ++i) many += "," + std::to_string(i);
  inner = Fields<ExpectError>(ParseOne(many)).inner;
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(Fields<FilterOp>(*inner).rows.size(), 65u);
  EXPECT_EQ(Fields<FilterOp>(*inner).rows.back(), 64);
}

TEST(TraceParseTest, SixtyFourForksAndExtractsAreAllowed) {
  std::string body;
  for (int i = 0; i < 32; ++i) body += "fork f" + std::to_string(i) + "\n";
  for (int i = 0; i < 31; ++i) {
    body += "extract 0 as e" + std::to_string(i) + "\n";
  }
  body += "expect error fork f0\n";
  const Program p = MustParse(std::string(kHeader) + body);
  EXPECT_EQ(p.body.size(), 64u);
}

TEST(TraceParseTest, ErrorToStringAndKindNames) {
  SyntaxError e;
  e.file = "dir/a.trace";
  e.line = 12;
  e.col = 3;
  e.message = "unknown statement 'x'";
  EXPECT_EQ(e.ToString(), "dir/a.trace:12:3: unknown statement 'x'");
  EXPECT_EQ(KindName(CacheKind::kKv), "kv");
  EXPECT_EQ(KindName(CacheKind::kRotating), "rotating");
  EXPECT_EQ(KindName(CacheKind::kSsm), "ssm");
}

TEST(TraceParseTest, FailureLeavesProgramUntouchedAndAllowsNulls) {
  Program p;
  p.rows = 17;
  SyntaxError e;
  EXPECT_FALSE(ParseTrace("trace 1\nrows 2\nfoo\n", "f", &p, &e));
  EXPECT_EQ(p.rows, 17);
  EXPECT_TRUE(p.lines.empty());
  EXPECT_EQ(e.ToString(), "f:3:1: unknown statement 'foo'");
  EXPECT_FALSE(ParseTrace("nope", "f", nullptr, nullptr));
  EXPECT_TRUE(ParseTrace("trace 1\nrows 1\nlayer a kv\n", "f", nullptr,
                         nullptr));
}

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
  EXPECT_TRUE(FailsAt(h + "layer a kv\nlayer b ssm\nlayer a rotating window=2\n",
                      5, 7, "duplicate layer name 'a' (declared on line 3)"));
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
}  // namespace kvspec::trace

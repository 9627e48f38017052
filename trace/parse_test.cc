// Unit tests of the trace parser (trace/parse.cc, docs/TRACE.md):
// valid input. Errors and robustness are in parse_error_test.cc.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "kvspec/trace/parse_internal.h"
#include "kvspec/trace/parse_test_util.h"
#include "kvspec/trace/program.h"

namespace kvspec::trace::parse_test {
namespace {

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
      "layer x_9 ssm conv=64 dk=512 dv=1\n"
      "layer gqa kv heads=2 qheads=8\n"
      "layer gring rotating qheads=64 window=3\n");
  ASSERT_EQ(p.layers.size(), 9u);
  EXPECT_EQ(p.layers[0].QueryHeads(), 1);  // qheads defaults to heads
  EXPECT_EQ(p.layers[1].QueryHeads(), 3);
  EXPECT_EQ(p.layers[7].heads, 2);
  EXPECT_EQ(p.layers[7].QueryHeads(), 8);
  EXPECT_EQ(p.layers[8].heads, 1);
  EXPECT_EQ(p.layers[8].QueryHeads(), 64);
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
  EXPECT_EQ(p.header_end_line, 11);
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

// The body is sized once, from a first pass that counts the lines whose
// first non-blank byte starts a statement (the header's three lines among
// them): comments and blank lines cost no Statement, however they are
// indented (spaces, tabs, a '\r' before the newline). A trace of many
// indented comments holds room for no more than its statement lines.
TEST(TraceParseTest, IndentedCommentsAndBlankLinesReserveNoStatement) {
  const std::string head = "trace 1\nrows 1\nlayer a kv\n";
  const char* const kFillers[] = {"  # note\n", "\t#\n", " \t \n", "   \r\n",
                                  "\t\t# a\r\n", "\n", "# top\n"};
  for (const char* filler : kFillers) {
    for (const int statements : {1, 3}) {
      std::string text = head;
      for (int s = 0; s < statements; ++s) {
        for (int i = 0; i < 500; ++i) text += filler;
        text += s % 2 == 0 ? "  decode\n" : "\tdecode ids=7\n";
      }
      for (int i = 0; i < 500; ++i) text += filler;
      const Program p = MustParse(text);
      EXPECT_EQ(p.body.size(), static_cast<size_t>(statements)) << filler;
      // The header has no comment line, so all of its lines were counted.
      EXPECT_LE(p.body.capacity(), p.body.size() + static_cast<size_t>(p.header_end_line))
          << "filler " << ::testing::PrintToString(std::string(filler))
          << ": the body reserved room for lines that hold no statement";
      EXPECT_EQ(p.header_end_line, 3) << filler;
      EXPECT_EQ(p.lines.size(), 3u + 501u * statements + 500u) << filler;
    }
  }
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
// Views and names.

// The parser reads only the bytes of the view it is given: a view that ends
// in blanks without a newline, inside a larger buffer that goes on with
// more blanks and a word, parses as the view alone.
TEST(TraceParseView, ReadsOnlyTheBytesOfItsView) {
  const std::string buffer = "trace 1\nrows 1\nlayer a kv \t   x";
  const std::string_view text(buffer.data(), buffer.size() - 4);  // ends with " \t"
  ASSERT_EQ(text.substr(text.size() - 2), " \t");
  trace::Program program;
  trace::SyntaxError error;
  ASSERT_TRUE(trace::ParseTrace(text, "view.trace", &program, &error)) << error.ToString();
  ASSERT_EQ(program.layers.size(), 1u);
  ASSERT_EQ(program.lines.size(), 3u);
  EXPECT_EQ(program.lines[2], "layer a kv \t");
}

// `decode` takes ids= only: right= (prepared padding) belongs to windows.
TEST(TraceParseView, DecodeRefusesRightPadding) {
  const std::string head = "trace 1\nrows 1\nlayer a kv\n";
  trace::Program program;
  trace::SyntaxError error;
  EXPECT_FALSE(trace::ParseTrace(head + "decode right=0\n", "t.trace", &program, &error));
  EXPECT_EQ(error.line, 4);
  EXPECT_EQ(error.col, 8);
  EXPECT_EQ(error.message, "decode: unknown option 'right' (expected ids=)");
  trace::Program window;
  EXPECT_TRUE(trace::ParseTrace(head + "window 2 right=0\n", "t.trace", &window, &error))
      << error.ToString();
}

TEST(ParseEdges, InvalidNameAt) {
  using parse_internal::InvalidNameAt;
  constexpr size_t kValid = std::string_view::npos;
  EXPECT_EQ(InvalidNameAt(""), 0u);  // documented: invalid at 0
  EXPECT_EQ(InvalidNameAt(std::string_view("ab", 0)), 0u);  // empty, whatever follows
  EXPECT_EQ(InvalidNameAt("a"), kValid);
  EXPECT_EQ(InvalidNameAt("z"), kValid);
  EXPECT_EQ(InvalidNameAt("`a"), 0u);  // just below 'a'
  EXPECT_EQ(InvalidNameAt("{a"), 0u);  // just above 'z'
  EXPECT_EQ(InvalidNameAt("a_9z"), kValid);
  EXPECT_EQ(InvalidNameAt("ab{"), 2u);
}

}  // namespace
}  // namespace kvspec::trace::parse_test

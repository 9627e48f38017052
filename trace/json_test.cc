// The JSON form of a program (trace/json.h): ProgramToJson escapes strings
// and gives source lines only where it has them; SourceLines gives each
// statement of `kvspec trace --emit --json` the line of the user's trace it
// comes from (the Python runner reports failures there): the emitter echoes
// every line of the original in order but the expectations it regenerates
// (`expect sees`, `expect positions`, `expect out`), so every other
// original line -- statements, comments, blank lines -- has exactly one
// echo, mapped to it. Checked on the corpus's traces with a blank line and
// a comment after every statement, which put a forward and its
// expectations apart, and on the same traces with every line indented.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kvspec/trace/json.h"
#include "kvspec/trace/program.h"
#include "kvspec/runner/runner.h"

#ifndef KVSPEC_SOURCE_DIR
#error "KVSPEC_SOURCE_DIR (the source tree) must be defined"
#endif

namespace kvspec::trace {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (!l.empty() && l.back() == '\r') l.pop_back();  // as the parser and SourceLines
    lines.push_back(l);
  }
  return lines;
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// `expect sees`, `expect positions` and `expect out`, however spaced.
bool RegeneratedByTheEmitter(const std::string& line) {
  std::istringstream words(line);
  std::string first, second;
  words >> first >> second;
  return first == "expect" && (second == "sees" || second == "positions" || second == "out");
}

// The original with `inserted` after every statement (after the header).
std::string WithInserted(const std::string& text, const std::string& inserted) {
  std::string original;
  for (const std::string& l : Lines(text)) {
    original += l + "\n";
    const std::string word = l.substr(0, l.find_first_of(" \t"));
    const bool header = word == "trace" || word == "rows" || word == "layer" ||
                        StartsWith(l, "#") || l.empty();
    if (!header) original += inserted;
  }
  return original;
}

// The text with every non-empty line indented, by blanks and tabs in turn
// (the parser reads words separated by either, leading ones included).
std::string Indented(const std::string& text) {
  std::string indented;
  int n = 0;
  for (const std::string& l : Lines(text)) {
    if (!l.empty()) indented += (n++ % 2 == 0) ? "  " : "\t ";
    indented += l + "\n";
  }
  return indented;
}

TEST(SourceLines, EveryEchoedLineMapsToTheLineItEchoes) {
  const std::string folder = std::string(KVSPEC_SOURCE_DIR) + "/corpus/traces";
  int checked[4] = {0, 0, 0, 0};  // traces checked per variant
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (entry.path().extension() != ".trace") continue;
    std::ifstream f(entry.path());
    std::stringstream text;
    text << f.rdbuf();
    // A blank line after every statement; or a comment, then a blank line;
    // or a blank line after every statement and every line indented (so
    // are the expectations the emitter drops); or a blank line before the
    // first (the first byte of the file is a line of its own).
    const std::string variants[4] = {WithInserted(text.str(), "\n"),
                                     WithInserted(text.str(), "\n# a comment\n"),
                                     Indented(WithInserted(text.str(), "\n")),
                                     "\n" + WithInserted(text.str(), "\n")};
    for (int v = 0; v < 4; ++v) {
      const std::string& original = variants[v];
      RunOptions options;
      options.emit = true;
      std::ostringstream emitted, err;
      if (RunTraceText(original, entry.path().string(), options, emitted, err) != 0) continue;
      ++checked[v];
      const std::vector<std::string> from = Lines(original), to = Lines(emitted.str());
      const std::vector<int> map = SourceLines(original, emitted.str());
      ASSERT_EQ(map.size(), to.size()) << entry.path();
      for (size_t i = 0; i < from.size(); ++i) {
        if (RegeneratedByTheEmitter(from[i])) continue;
        int echoes = 0;
        for (size_t e = 0; e < to.size(); ++e) {
          if (map[e] == static_cast<int>(i) + 1 && to[e] == from[i]) ++echoes;
        }
        EXPECT_EQ(echoes, 1) << entry.path() << ": original line " << i + 1 << " '" << from[i]
                             << "'";
      }
    }
  }
  for (int v = 0; v < 4; ++v) EXPECT_GT(checked[v], 20) << "variant " << v;
}

// JSON strings escape every control character (U+0000..U+001F) as \u00XX
// and pass every other byte through: a file name holding each of them.
TEST(ProgramToJson, EveryControlCharacterIsEscaped) {
  Program p;
  for (int c = 1; c <= 0x20; ++c) p.file += static_cast<char>(c);
  std::string json = ProgramToJson(p);
  ASSERT_EQ(json.back(), '\n');  // the document's own newline
  json.pop_back();
  for (int c = 1; c < 0x20; ++c) {
    char escaped[8];
    std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
    EXPECT_NE(json.find(escaped), std::string::npos) << escaped;
    EXPECT_EQ(json.find(static_cast<char>(c)), std::string::npos) << "raw byte " << c;
  }
  EXPECT_NE(json.find("\\u001f \""), std::string::npos) << json;  // the blank is not escaped
}

// ---------------------------------------------------------------------------
// JSON of a program.

Program Parse(const std::string& text) {
  Program program;
  SyntaxError error;
  EXPECT_TRUE(ParseTrace(text, "t.trace", &program, &error)) << error.ToString();
  return program;
}

TEST(JsonEdges, StringsEscapeQuotesAndBackslashes) {
  Program p = Parse("trace 1\nrows 1\nlayer a kv\nwindow 1\n");
  p.file = "say \"hi\".trace";
  EXPECT_NE(ProgramToJson(p).find("\"file\": \"say \\\"hi\\\".trace\","), std::string::npos)
      << ProgramToJson(p);
  p.file = "dir\\a.trace";
  EXPECT_NE(ProgramToJson(p).find("\"file\": \"dir\\\\a.trace\","), std::string::npos)
      << ProgramToJson(p);
  p.file = "plain/a.trace";
  EXPECT_NE(ProgramToJson(p).find("\"file\": \"plain/a.trace\","), std::string::npos)
      << ProgramToJson(p);
}

// A statement gets "source_line" only when its line has an entry (lines
// 1..size); a layer without a recorded line gets "line": 0.
TEST(JsonEdges, SourceLinesOnlyWhereTheMapHasTheLine) {
  Program p = Parse("trace 1\nrows 1\nlayer a kv\nwindow 1\ndecode\narm\n");
  ASSERT_EQ(p.body.size(), 3u);
  const std::vector<int> map = {11, 12, 13, 14, 15};  // lines 1..5
  Program q = p;
  q.body[2].line = 0;  // a statement without a line (not from the parser)
  const std::string json = ProgramToJson(q, &map);
  EXPECT_NE(json.find("{\"line\": 4, \"source_line\": 14, \"op\": \"window\""),
            std::string::npos) << json;
  EXPECT_NE(json.find("{\"line\": 5, \"source_line\": 15, \"op\": \"decode\""),
            std::string::npos) << json;
  EXPECT_NE(json.find("{\"line\": 0, \"op\": \"arm\""), std::string::npos) << json;
  const std::vector<int> one = {21};  // line 1 only
  Program first = p;
  first.body[0].line = 1;
  const std::string json1 = ProgramToJson(first, &one);
  EXPECT_NE(json1.find("{\"line\": 1, \"source_line\": 21, \"op\": \"window\""),
            std::string::npos) << json1;
  EXPECT_NE(json1.find("{\"line\": 5, \"op\": \"decode\""), std::string::npos) << json1;
  // Layer lines.
  EXPECT_NE(ProgramToJson(p).find("\"name\": \"a\", \"kind\": \"kv\", \"kv\": \"f32\", \"line\": 3,"),
            std::string::npos);
  p.layer_lines.clear();
  EXPECT_NE(ProgramToJson(p).find("\"name\": \"a\", \"kind\": \"kv\", \"kv\": \"f32\", \"line\": 0,"),
            std::string::npos) << ProgramToJson(p);
}

// A bare `expect` (or `expect` and blanks) is no expectation the emitter
// regenerates: SourceLines does not skip over it.
TEST(JsonEdges, BareExpectIsNotARegeneratedLine) {
  EXPECT_EQ(SourceLines("a\nexpect\nb\n", "a\nb\n"), (std::vector<int>{1, 1}));
  EXPECT_EQ(SourceLines("a\nexpect \t\nb\n", "a\nb\n"), (std::vector<int>{1, 1}));
  // A regenerated one is skipped.
  EXPECT_EQ(SourceLines("a\nexpect sees x\nb\n", "a\nb\n"), (std::vector<int>{1, 3}));
}

}  // namespace
}  // namespace kvspec::trace

// trace/json.h SourceLines, which gives each statement of
// `kvspec trace --emit --json` the line of the user's trace it comes from
// (the Python runner reports failures there): the emitter echoes every line
// of the original in order but the expectations it regenerates
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

}  // namespace
}  // namespace kvspec::trace

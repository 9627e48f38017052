// trace/json.h SourceLines, which gives each statement of
// `kvspec trace --emit --json` the line of the user's trace it comes from
// (the Python runner reports failures there): the emitter echoes every line
// of the original in order but the expectations it regenerates
// (`expect sees`, `expect positions`, `expect out`), so every other
// original line -- statements, comments, blank lines -- has exactly one
// echo, mapped to it. Checked on the corpus's traces with a blank line and
// a comment after every statement, which put a forward and its
// expectations apart.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "trace/json.h"
#include "trace/runner.h"

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

TEST(SourceLines, EveryEchoedLineMapsToTheLineItEchoes) {
  const std::string folder = std::string(KVSPEC_SOURCE_DIR) + "/corpus/traces";
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (entry.path().extension() != ".trace") continue;
    std::ifstream f(entry.path());
    std::stringstream text;
    text << f.rdbuf();
    // A blank line after every statement; or a comment, then a blank line.
    for (const char* inserted : {"\n", "\n# a comment\n"}) {
      const std::string original = WithInserted(text.str(), inserted);
      RunOptions options;
      options.emit = true;
      std::ostringstream emitted, err;
      if (RunTraceText(original, entry.path().string(), options, emitted, err) != 0) continue;
      ++checked;
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
  EXPECT_GT(checked, 20);
}

}  // namespace
}  // namespace kvspec::trace

// Running a trace (runner/runner.cc): reading its source (a file, a
// directory, standard input, the 4 MiB cap), the header's layout (a
// refusal blamed on the layer line it names), --emit (only the source
// lines it has, nothing produced inside `expect error`) and `reload`
// (saving the encoded layout, or refusing when it cannot).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kvspec/core/codec/codec.h"
#include "kvspec/core/layout.h"
#include "kvspec/runner/runner.h"
#include "kvspec/trace/program.h"

namespace kvspec::trace {
namespace {

Program Parse(const std::string& text) {
  Program program;
  SyntaxError error;
  EXPECT_TRUE(ParseTrace(text, "t.trace", &program, &error)) << error.ToString();
  return program;
}

struct RunResult {
  int status = -1;
  std::string out, err;
};

RunResult RunText(const std::string& text, const RunOptions& options = {}) {
  std::ostringstream out, err;
  RunResult r;
  r.status = RunTraceText(text, "t.trace", options, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

RunResult RunParsed(const Program& program, const RunOptions& options = {}) {
  std::ostringstream out, err;
  RunResult r;
  r.status = RunProgram(program, options, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// ------------------------------------------------------------ sources
// A file that cannot be read: exit status 2 and `FILE:1:1: cannot open file`.
TEST(TraceRunnerFiles, UnreadableFileIsReported) {
  const std::string path = "/nonexistent-kvspec-dir/missing.trace";
  std::ostringstream out, err;
  EXPECT_EQ(trace::RunTraceFile(path, trace::RunOptions(), out, err), 2);
  EXPECT_EQ(err.str(), path + ":1:1: cannot open file\n");
  EXPECT_EQ(out.str(), "");
}

// A trace file over the 4 MiB cap is refused as a limit (exit 2), naming
// the cap; one of exactly 4 MiB is read.
TEST(TraceRunnerFiles, AFileOverFourMiBIsRefusedNamingTheCap) {
  namespace fs = std::filesystem;
  const fs::path path =
      fs::path(::testing::TempDir()) / ("kvspec_large_" + std::to_string(::getpid()) + ".trace");
  const std::string head = "trace 1\nrows 1\nlayer a kv\nwindow 1\n";
  std::string text = head + std::string((size_t{4} << 20) - head.size() - 1, '#') + "\n";
  ASSERT_EQ(text.size(), size_t{4} << 20);
  for (const bool over : {false, true}) {
    if (over) text += "\n";
    {
      std::ofstream file(path, std::ios::binary);
      file << text;
    }
    std::ostringstream out, err;
    const int code = trace::RunTraceFile(path.string(), trace::RunOptions(), out, err);
    if (over) {
      EXPECT_EQ(code, 2);
      EXPECT_EQ(err.str(), path.string() + ":1:1: file larger than 4 MiB\n");
    } else {
      EXPECT_EQ(code, 0) << err.str();
    }
  }
  fs::remove(path);
}

// A directory given as a trace: exit status 2, said to be a directory (it
// was read as an empty trace).
TEST(TraceRunnerFiles, ADirectoryIsReportedAsOne) {
  const std::string dir = ::testing::TempDir();
  std::ostringstream out, err;
  EXPECT_EQ(trace::RunTraceFile(dir, trace::RunOptions(), out, err), 2);
  EXPECT_EQ(err.str(), dir + ":1:1: a directory, not a trace file\n");
  EXPECT_EQ(out.str(), "");
}

// Standard input that never ends: read a chunk at a time, refused once past
// the 4 MiB cap (it was read whole before the cap was checked: this input
// never ended, and `yes | kvspec trace -` grew without bound). The stream
// counts what was taken from it.
TEST(TraceRunnerFiles, StandardInputIsCappedAtFourMiBWhileItIsRead) {
  class Endless : public std::streambuf {
   public:
    size_t taken = 0;

   protected:
    int_type underflow() override {
      std::memset(chunk_, '#', sizeof(chunk_));
      taken += sizeof(chunk_);
      if (taken > (size_t{64} << 20)) return traits_type::eof();  // a safety stop
      setg(chunk_, chunk_, chunk_ + sizeof(chunk_));
      return traits_type::to_int_type(chunk_[0]);
    }

   private:
    char chunk_[4096];
  } endless;
  std::streambuf* saved = std::cin.rdbuf(&endless);
  std::string text = "unchanged";
  std::ostringstream err;
  const int code = trace::ReadTraceSource("-", &text, err);
  std::cin.rdbuf(saved);
  std::cin.clear();
  EXPECT_EQ(code, 2);
  EXPECT_EQ(err.str(), "<stdin>:1:1: file larger than 4 MiB\n");
  EXPECT_EQ(text, "");
  EXPECT_LE(endless.taken, trace::kMaxTraceBytes + (size_t{128} << 10));
  // A trace on standard input runs as `<stdin>`.
  std::istringstream small("trace 1\nrows 1\nlayer a kv\nexpect positions 1\n");
  saved = std::cin.rdbuf(small.rdbuf());
  std::ostringstream out, err2;
  const int run = trace::RunTraceFile("-", trace::RunOptions(), out, err2);
  std::cin.rdbuf(saved);
  std::cin.clear();
  EXPECT_EQ(run, 1);
  EXPECT_EQ(err2.str(), "<stdin>:4: expected positions 1 got 0\n");
}

// ------------------------------------------------------------ the header's layout
// A program that did not come from the parser (RunProgram takes any
// Program) with a layer Layout::Create refuses: the refusal is reported on
// the line declaring the layer the message names, exit 1, nothing run.
TEST(RunnerEdges, RefusedLayoutIsBlamedOnTheLayerItNames) {
  const std::string text = "trace 1\nrows 1\nlayer ab kv\nlayer b kv heads=2\nwindow 1\n";
  {
    Program p = Parse(text);
    p.layers[1].q_heads = 3;  // not a multiple of 2 heads
    const RunResult r = RunParsed(p);
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err.rfind("t.trace:4: error: layer 'b': bad shape", 0), 0u) << r.err;
    EXPECT_EQ(r.out, "");
  }
  {
    // The first layer: its line, not the other one's ('b' is not 'ab').
    Program p = Parse(text);
    p.layers[0].dim = 0;
    const RunResult r = RunParsed(p);
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err.rfind("t.trace:3: error: layer 'ab': bad shape", 0), 0u) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

// A refusal naming no layer is reported on the header's last line.
TEST(RunnerEdges, RefusedLayoutNamingNoLayerIsBlamedOnTheHeaderEnd) {
  Program p = Parse("trace 1\nrows 1\nlayer a kv\nlayer b kv\n\nwindow 1\n");
  ASSERT_EQ(p.header_end_line, 4);
  p.rows = 0;
  const RunResult r = RunParsed(p);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "t.trace:4: error: a layout needs at least one row\n");
  EXPECT_EQ(r.out, "");
}

// ------------------------------------------------------------ emit
// A program built in code may hold fewer source lines than its statements
// name: `--emit` echoes only the lines it has and reads none past them, also
// when a refused statement past them stops the run there.
TEST(TraceRunnerEmit, EchoesOnlyTheSourceLinesItHas) {
  const std::string text = "trace 1\nrows 1\nlayer a kv\nwindow 2\ntrim 3\n";
  trace::Program program;
  trace::SyntaxError error;
  ASSERT_TRUE(trace::ParseTrace(text, "built.trace", &program, &error)) << error.ToString();
  trace::RunOptions options;
  options.emit = true;
  {
    std::ostringstream out, err;
    EXPECT_EQ(trace::RunProgram(program, options, out, err), 1);
    EXPECT_NE(err.str().find("built.trace:5: error: "), std::string::npos) << err.str();
    EXPECT_EQ(out.str(), "trace 1\nrows 1\nlayer a kv\nwindow 2\nexpect sees a r0 p0: 0\n"
                         "expect sees a r0 p1: 0 1\nexpect positions 2\ntrim 3\n");
  }
  program.lines.resize(3);  // the header only
  {
    std::ostringstream out, err;
    EXPECT_EQ(trace::RunProgram(program, options, out, err), 1);
    EXPECT_EQ(out.str(), "trace 1\nrows 1\nlayer a kv\n");
  }
  std::vector<std::string>().swap(program.lines);  // no text at all
  {
    std::ostringstream out, err;
    EXPECT_EQ(trace::RunProgram(program, options, out, err), 1);
    EXPECT_EQ(out.str(), "");
  }
}

// --emit puts the regenerated expectations after the statements that
// produced them, but not after an operation run inside `expect error`
// (which succeeded here, so the expectation fails).
TEST(RunnerEdges, EmitLeavesOutWhatAnOperationInsideExpectErrorProduced) {
  const std::string text =
      "trace 1\nrows 1\nlayer a kv\nwindow 2\nexpect error trim 1\nexpect error window 1\n";
  RunOptions options;
  options.emit = true;
  const RunResult r = RunText(text, options);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out,
            "trace 1\nrows 1\nlayer a kv\nwindow 2\n"
            "expect sees a r0 p0: 0\nexpect sees a r0 p1: 0 1\nexpect positions 2\n"
            "expect error trim 1\nexpect error window 1\n");
  EXPECT_NE(r.err.find("t.trace:5: expected an error got none"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("t.trace:6: expected an error got none"), std::string::npos) << r.err;
}

// ------------------------------------------------------------ reload
// With save_reloads_dir, every reload writes the encoded layout to
// DIR/<file name>.<line>.kvsl, and the file decodes.
TEST(TraceRunnerReloads, SavedLayoutsAreWritten) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("kvspec_reloads_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  ASSERT_TRUE(fs::create_directories(dir));
  trace::RunOptions options;
  options.save_reloads_dir = dir.string();
  std::ostringstream out, err;
  EXPECT_EQ(trace::RunTraceText("trace 1\nrows 1\nlayer a kv\nwindow 2\nreload\n",
                                "some/where/probe.trace", options, out, err),
            0)
      << err.str();
  const fs::path saved = dir / "probe.trace.5.kvsl";
  ASSERT_TRUE(fs::exists(saved));
  std::ifstream file(saved, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::unique_ptr<Layout> back;
  EXPECT_TRUE(DecodeLayout(bytes, &back).ok());
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back->columns(), 2);
  fs::remove_all(dir);
}

// A reload told to save its bytes where it cannot write is refused naming
// the path (exit 1); the file stops there.
TEST(RunnerEdges, ReloadThatCannotSaveItsBytesIsRefused) {
  const std::string dir = testing::TempDir() + "kvspec_unwritable_reloads/sub";
  std::filesystem::remove_all(testing::TempDir() + "kvspec_unwritable_reloads");
  RunOptions options;
  options.save_reloads_dir = dir;
  const RunResult r =
      RunText("trace 1\nrows 1\nlayer a kv\nwindow 2\nreload\nexpect positions 2\n", options);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "t.trace:5: error: reload: cannot write " + dir + "/t.trace.5.kvsl\n");
  // Where it can write, the same trace passes and leaves the file.
  const std::string ok_dir = testing::TempDir() + "kvspec_saved_reloads";
  std::filesystem::create_directories(ok_dir);
  options.save_reloads_dir = ok_dir;
  const RunResult ok =
      RunText("trace 1\nrows 1\nlayer a kv\nwindow 2\nreload\nexpect positions 2\n", options);
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_TRUE(std::filesystem::exists(ok_dir + "/t.trace.5.kvsl"));
  std::filesystem::remove_all(ok_dir);
}

}  // namespace
}  // namespace kvspec::trace

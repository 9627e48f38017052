// The kvspec command: runs traces (docs/TRACE.md) against the reference
// core and reports what every query saw.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "kvspec/kernels/attention.h"
#include "kvspec/trace/json.h"
#include "kvspec/runner/runner.h"

namespace {

const char kUsage[] =
    "usage: kvspec COMMAND [ARGS]\n"
    "\n"
    "kvspec is the reference for the caches of LLM inference: KV caches,\n"
    "masks and attention kernels, checked by traces.\n"
    "\n"
    "commands:\n"
    "  trace FILE...   run traces; see `kvspec trace --help`\n"
    "  targets         print the Highway target the kernels dispatch to and\n"
    "                  every target this CPU can run (for trace --target)\n"
    "  --help, help    this text\n"
    "\n"
    "exit status: 0 success, 1 a refused operation or failed expectation,\n"
    "2 a syntax error, a limit exceeded, or bad usage.\n";

const char kTraceUsage[] =
    "usage: kvspec trace [--values] [--emit [--json]] [--reference] [--target NAME]\n"
    "                    [--save-reloads DIR] [--max-memory MIB] [--max-work MOPS] FILE...\n"
    "\n"
    "Runs each trace file (`-` reads standard input) as written in the trace\n"
    "format, version 1. For each forward it prints, on standard output, one\n"
    "`sees LAYER rR pP: ITEMS` line per attention layer, row and real query,\n"
    "recovered from the bytes stored in the slots the mask admits. Errors and\n"
    "failed expectations go to standard error as FILE:LINE: ... (syntax\n"
    "errors as FILE:LINE:COL: ...; standard input is named <stdin>). A file\n"
    "or standard input over 4 MiB is refused (exit 2) once that much is read.\n"
    "\n"
    "options:\n"
    "  --values          also print `out LAYER rR pP: V...` lines (always on\n"
    "                    when a trace holds an `expect out` line); attention\n"
    "                    outputs are computed only then (without them a\n"
    "                    forward appends and reads back what each query sees)\n"
    "  --emit            print the trace back instead, with `expect sees` and\n"
    "                    `expect positions` lines (and `expect out` lines\n"
    "                    with --values) filled in from the run\n"
    "  --json            with --emit: print the emitted trace as parsed by\n"
    "                    kvspec's parser, as JSON (trace/json.h; the form\n"
    "                    corpus/emitted/ ships for pure-Python runners)\n"
    "  --reference       run the scalar reference kernels instead of the\n"
    "                    Highway ones (outputs within the stated tolerance)\n"
    "  --target NAME     run the Highway kernels on target NAME (AVX3, AVX2,\n"
    "                    SSE4, SSSE3, SCALAR, ...; `kvspec targets` lists the\n"
    "                    ones this CPU runs), as fuzz and property findings\n"
    "                    name it; default: the best\n"
    "  --save-reloads DIR  write the bytes of every `reload` to\n"
    "                    DIR/FILE.LINE.kvsl (codec seed corpora)\n"
    "  --max-memory MIB  storage budget over all layouts of one trace\n"
    "                    (default 4096): storage, recurrent state and its double\n"
    "                    buffer, forward inputs and outputs, round records,\n"
    "                    forks, extracts, reloads, the read-back and its index,\n"
    "                    each checked before it is allocated; a trace needing\n"
    "                    more stops: exit 2, `FILE:LINE: limit: ... needs N MiB`\n"
    "  --max-work MOPS   work budget of one trace in millions of operations\n"
    "                    (default 42949, seconds on one core): attention\n"
    "                    multiply-adds (when its outputs are observed),\n"
    "                    recurrent steps, bytes read back, 64 per tag\n"
    "                    reported; a trace needing more stops: exit 2,\n"
    "                    `FILE:LINE: limit: work ...`\n"
    "\n"
    "Every layer kind (kv, rotating, ssm) and every statement are supported.\n"
    "\n"
    "exit status: 0 all expectations met, 1 a refused operation or a failed\n"
    "expectation, 2 a syntax error or a limit; over several files the largest.\n";

// --emit --json: emits FILE into a string, parses that with the library's
// parser and prints the program as JSON. Nothing is printed unless the run
// and the parse both succeed.
int EmitJson(const std::string& file, const kvspec::trace::RunOptions& options) {
  std::string original;
  if (const int status = kvspec::trace::ReadTraceSource(file, &original, std::cerr)) {
    return status;
  }
  std::ostringstream emitted;
  const int s = kvspec::trace::RunTraceText(original, kvspec::trace::TraceSourceName(file),
                                            options, emitted, std::cerr);
  if (s != 0) return s;
  kvspec::trace::Program program;
  kvspec::trace::SyntaxError error;
  if (!kvspec::trace::ParseTrace(emitted.str(), file, &program, &error)) {
    std::cerr << error.ToString() << " (in the emitted trace)\n";
    return 2;
  }
  const std::vector<int> source_lines =
      kvspec::trace::SourceLines(original, emitted.str());
  std::cout << kvspec::trace::ProgramToJson(program, &source_lines);
  std::cout.flush();
  return 0;
}

// Every target compiled in that this CPU runs, best first.
std::vector<int64_t> RunnableTargets() {
  hwy::SetSupportedTargetsForTest(0);
  return hwy::SupportedAndGeneratedTargets();
}

// Makes dynamic dispatch use the target named `name` (case-insensitive).
bool SelectTarget(const std::string& name) {
  for (int64_t target : RunnableTargets()) {
    if (strcasecmp(name.c_str(), hwy::TargetName(target)) == 0) {
      hwy::SetSupportedTargetsForTest(target);
      return true;
    }
  }
  std::string known;
  for (int64_t target : RunnableTargets()) known += std::string(" ") + hwy::TargetName(target);
  std::fprintf(stderr, "kvspec trace: unknown or unsupported target '%s' (this CPU runs:%s)\n",
               name.c_str(), known.c_str());
  return false;
}

int Trace(int argc, char** argv) {
  kvspec::trace::RunOptions options;
  std::vector<std::string> files;
  bool json = false;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kTraceUsage, stdout);
      return 0;
    } else if (arg == "--values") {
      options.values = true;
    } else if (arg == "--emit") {
      options.emit = true;
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "--save-reloads") {
      if (i + 1 >= argc) {
        std::fputs("kvspec trace: --save-reloads needs a folder\n", stderr);
        return 2;
      }
      options.save_reloads_dir = argv[++i];
    } else if (arg == "--reference") {
      options.reference_kernels = true;
    } else if (arg == "--target") {
      if (i + 1 >= argc) {
        std::fputs("kvspec trace: --target needs a name (see kvspec targets)\n", stderr);
        return 2;
      }
      if (!SelectTarget(argv[++i])) return 2;
    } else if (arg == "--max-memory") {
      if (i + 1 >= argc) {
        std::fputs("kvspec trace: --max-memory needs a value in MiB\n", stderr);
        return 2;
      }
      char* end = nullptr;
      const unsigned long long mib = std::strtoull(argv[++i], &end, 10);
      if (!end || *end != '\0' || mib == 0 || mib > (1ull << 24)) {
        std::fprintf(stderr, "kvspec trace: bad --max-memory value '%s'\n", argv[i]);
        return 2;
      }
      options.max_bytes = static_cast<size_t>(mib) << 20;
    } else if (arg == "--max-work") {
      char* end = nullptr;
      const unsigned long long mops = i + 1 < argc ? std::strtoull(argv[++i], &end, 10) : 0;
      if (!end || *end != '\0' || mops == 0 || mops > (1ull << 40)) {
        std::fputs("kvspec trace: --max-work needs a value in millions of operations\n",
                   stderr);
        return 2;
      }
      options.max_work = static_cast<uint64_t>(mops) * 1000000;
    } else if (arg.size() > 1 && arg[0] == '-') {
      std::fprintf(stderr, "kvspec trace: unknown option '%s' (see kvspec trace --help)\n",
                   arg.c_str());
      return 2;
    } else {
      files.push_back(arg);
    }
  }
  if (files.empty()) {
    std::fputs("kvspec trace: no trace files given (see kvspec trace --help)\n", stderr);
    return 2;
  }
  if (json && !options.emit) {
    std::fputs("kvspec trace: --json needs --emit\n", stderr);
    return 2;
  }
  int status = 0;
  for (const std::string& file : files) {
    if (json) {
      const int s = EmitJson(file, options);
      if (s > status) status = s;
      continue;
    }
    const int s = kvspec::trace::RunTraceFile(file, options, std::cout, std::cerr);
    std::cout.flush();
    if (s > status) status = s;
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (command == "trace") return Trace(argc - 2, argv + 2);
  if (command == "targets") {
    std::printf("attention: %s\n", kvspec::AttentionTargetName());
    std::printf("runnable:");
    for (int64_t target : RunnableTargets()) std::printf(" %s", hwy::TargetName(target));
    std::printf("\n");
    return 0;
  }
  std::fprintf(stderr, "kvspec: unknown command '%s' (see kvspec --help)\n", command.c_str());
  return 2;
}

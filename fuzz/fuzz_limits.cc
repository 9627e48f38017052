// Near-the-limits fuzz target (hostile input never crashes, hangs or
// exhausts the reference): the input's bytes drive
// testing/limits_generator.h, whose traces sit at or near TRACE.md's limits
// (rows up to 64, heads up to 64, dim/dk/dv up to 512, L up to 4096,
// windows and capacities up to 65536, conv up to 64, ids up to 2^31 - 1,
// rows filled towards 1,000,000 tokens) mixed with small values, and the
// trace runs through kvspec::trace::RunTraceText under a storage budget
// (RunOptions::max_bytes = kMaxBytes) and a work budget
// (RunOptions::max_work = kMaxRunnerWork).
//
// What is checked: the runner finishes (exit 0 or 1) or stops at a limit
// (exit 2); it never crashes (the sanitizers), never hangs (libFuzzer's
// -timeout, 10 s for this target in fuzz/targets.txt) and never allocates
// far beyond its budget: under ASan the live heap during the run must stay
// within kHeapAllowance of what it was before (the budget covers stored
// tokens and states; the allowance leaves room for a forward's inputs and
// outputs, a store's growth while it copies, the content index and the
// runner's lines), besides libFuzzer's -rss_limit_mb / -malloc_limit_mb.
// Every line of standard error must have a form the runner prints.
//
// Nothing is screened: every generated trace runs, and the runner's own
// budgets must stop whatever would take too long or allocate too much.
// KVSPEC_FUZZ_PRINT_TRACE=1 prints each generated trace and its verdict.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "kvspec/fuzz/differential.h"
#include "kvspec/runner/runner.h"
#include "kvspec/testing/fdp_choices.h"
#include "kvspec/testing/limits_generator.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVSPEC_FUZZ_HEAP_HOOKS 1
#endif
#endif
#ifdef KVSPEC_FUZZ_HEAP_HOOKS
#include <sanitizer/allocator_interface.h>
#endif

namespace {

constexpr size_t kMaxBytes = size_t{32} << 20;        // the runner's storage budget
constexpr size_t kHeapAllowance = 3 * kMaxBytes + (size_t{32} << 20);
// The runner's own work budget (RunOptions::max_work, in its operations):
// the default (40 G) keeps a trace to seconds in a release build but not
// under ASan + UBSan (long runs of decodes on a few held columns: the
// timeout-* inputs of corpus/regressions/fuzz_limits/). Such a trace stops
// at the work limit (exit 2, `limit: work ...`), which this target fuzzes too.
constexpr uint64_t kMaxRunnerWork = uint64_t{32} << 20;
constexpr char kTraceName[] = "fuzz_limits.trace";

// ---- The live heap while the runner runs (ASan's allocator hooks).

size_t g_live = 0, g_peak = 0;
bool g_tracking = false;

#ifdef KVSPEC_FUZZ_HEAP_HOOKS
void OnMalloc(const volatile void*, size_t size) {
  if (!g_tracking) return;
  g_live += size;
  g_peak = std::max(g_peak, g_live);
}
void OnFree(const volatile void* p) {
  if (!g_tracking || !p) return;
  const size_t size = __sanitizer_get_allocated_size(const_cast<const void*>(p));
  g_live -= std::min(g_live, size);
}
#endif

// A stream buffer that keeps only the first kKept characters (for the
// report) and counts the rest: a near-limit run may print gigabytes of
// `sees` lines, which are the runner's output, not its memory.
class Capped : public std::streambuf {
 public:
  static constexpr size_t kKept = 4096;
  std::string kept;
  size_t count = 0;

 protected:
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) {
      if (kept.size() < kKept) kept.push_back(static_cast<char>(c));
      ++count;
    }
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const size_t take = std::min(kKept - std::min(kKept, kept.size()), static_cast<size_t>(n));
    kept.append(s, take);
    count += static_cast<size_t>(n);
    return n;
  }
};

// Whether `line` has a form the runner writes to standard error:
// `FILE:LINE: error: ...`, `FILE:LINE: expected ...`, a budget
// `FILE:LINE: limit: ...` or a syntax error or TRACE.md limit
// `FILE:LINE:COL: ...`.
bool KnownErrorLine(const std::string& line) {
  const std::string prefix = std::string(kTraceName) + ":";
  if (line.compare(0, prefix.size(), prefix) != 0) return false;
  size_t i = prefix.size();
  const size_t digits_at = i;
  while (i < line.size() && line[i] >= '0' && line[i] <= '9') ++i;
  if (i == digits_at || i >= line.size() || line[i] != ':') return false;
  const std::string rest = line.substr(i);
  if (rest.rfind(": error: ", 0) == 0 || rest.rfind(": expected ", 0) == 0 ||
      rest.rfind(": limit: ", 0) == 0) {
    return true;
  }
  size_t j = 1;
  while (j < rest.size() && rest[j] >= '0' && rest[j] <= '9') ++j;
  return j > 1 && rest.compare(j, 2, ": ") == 0;
}

[[noreturn]] void Fail(const std::string& text, const std::string& what, int status,
                       const Capped& err) {
  std::fprintf(stderr,
               "fuzz_limits: %s\n==== trace\n%s==== runner: exit %d, standard error "
               "(first %zu of %zu characters)\n%s\n====\n",
               what.c_str(), text.size() > 20000 ? (text.substr(0, 20000) + "...\n").c_str()
                                                 : text.c_str(),
               status, err.kept.size(), err.count, err.kept.c_str());
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
#ifdef KVSPEC_FUZZ_HEAP_HOOKS
  static const bool hooked = __sanitizer_install_malloc_and_free_hooks(OnMalloc, OnFree) != 0;
#else
  static const bool hooked = false;
#endif
  FuzzedDataProvider fdp(data, size);
  kvspec::testing::FdpChoices choices(&fdp);
  const std::string text = kvspec::testing::LimitsGenerator(&choices).Generate();
  static const bool print = std::getenv("KVSPEC_FUZZ_PRINT_TRACE") != nullptr;
  if (print) std::fprintf(stderr, "%s", text.c_str());

  kvspec::trace::RunOptions options;
  options.max_bytes = kMaxBytes;
  options.max_work = kMaxRunnerWork;
  options.values = size % 2 == 1;  // `out` lines half of the time
  Capped out_buf, err_buf;
  std::ostream out(&out_buf), err(&err_buf);
  g_live = g_peak = 0;
  g_tracking = hooked;
  const int status = kvspec::trace::RunTraceText(text, kTraceName, options, out, err);
  g_tracking = false;
  if (print) {
    std::fprintf(stderr, "== exit %d, heap peak %zu MiB, %zu output characters\n%s", status,
                 g_peak >> 20, out_buf.count, err_buf.kept.c_str());
  }
  if (status < 0 || status > 2) Fail(text, "exit status " + std::to_string(status), status, err_buf);
  if (g_peak > kHeapAllowance) {
    Fail(text,
         "the live heap grew by " + std::to_string(g_peak >> 20) + " MiB during the run (budget " +
             std::to_string(kMaxBytes >> 20) + " MiB, allowance " +
             std::to_string(kHeapAllowance >> 20) + " MiB)",
         status, err_buf);
  }
  if ((status == 0) != (err_buf.count == 0)) {
    Fail(text, "exit status and standard error disagree", status, err_buf);
  }
  for (const std::string& line : kvspec::fuzz::SplitLines(err_buf.kept)) {
    if (err_buf.kept.size() < Capped::kKept && !KnownErrorLine(line)) {
      Fail(text, "an unexpected standard error line: " + line, status, err_buf);
    }
  }
  return 0;
}

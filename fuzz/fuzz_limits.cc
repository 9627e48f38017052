// Near-the-limits fuzz target (hostile input never crashes, hangs or
// exhausts the reference): the input's bytes drive a generator of traces
// whose sizes sit at or near TRACE.md's limits (rows up to 64, heads up to
// 64, dim/dk/dv up to 512, L up to 4096, windows and capacities up to 65536,
// conv up to 64, ids up to 2^31 - 1, rows filled towards 1,000,000 tokens),
// mixed with small values (so that the limits meet each other one at a
// time), and the trace runs through kvspec::trace::RunTraceText under a
// storage budget (RunOptions::max_bytes = kMaxBytes) and a work budget
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
// budgets must stop whatever would take too long or allocate too much (the
// work cap and the screen of what the runner did not yet bound, which came
// before it here, were removed once it bounded everything: a 5-minute run
// of each, screen off and then both off, found nothing; docs/fuzzing.md).
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

#include "kvspec/trace/program.h"
#include "kvspec/runner/runner.h"
#include "kvspec/fuzz/differential.h"

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
// the default (40 G) keeps a trace to seconds in a release build, not under
// ASan + UBSan, where long runs of decodes on a few held columns took 4 to
// 14 s of CPU each (read-back sorting every held slot per query; the
// timeout-* inputs of corpus/regressions/fuzz_limits/) though the estimate
// screen let them through. Such a trace now stops at the work limit (exit 2,
// `limit: work ...`), which this target thereby fuzzes too.
constexpr uint64_t kMaxRunnerWork = uint64_t{32} << 20;
constexpr size_t kMaxStatements = 24;
constexpr size_t kMaxText = size_t{1} << 20;  // generated trace text
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

// ---- The generator.

class Generator {
 public:
  explicit Generator(FuzzedDataProvider* fdp) : fdp_(*fdp) {}

  std::string Generate() {
    rows_ = Near(1, 64);
    text_ = "trace 1\nrows " + std::to_string(rows_) + "\n";
    const int layers = Chance(5) ? Near(1, 32) : Range(1, 3);
    for (int l = 0; l < layers; ++l) Layer(l);
    for (size_t i = 0; i < kMaxStatements && fdp_.remaining_bytes() > 0 && text_.size() < kMaxText;
         ++i) {
      Statement();
    }
    return text_;
  }

 private:
  bool Chance(int percent) { return fdp_.ConsumeIntegralInRange<int>(0, 99) < percent; }
  int64_t Range(int64_t lo, int64_t hi) { return fdp_.ConsumeIntegralInRange<int64_t>(lo, hi); }
  // A value in lo..hi, mostly at or near an end: a limit, one below it, a
  // power of two, a small value or any.
  int64_t Near(int64_t lo, int64_t hi) {
    switch (Range(0, 7)) {
      case 0: return hi;
      case 1: return std::max(lo, hi - 1);
      case 2: {
        int64_t p = 1;
        for (int64_t k = Range(0, 31); k > 0 && p * 2 <= hi; --k) p *= 2;
        return std::max(lo, p);
      }
      case 3: return lo;
      case 4: return std::min(hi, lo + Range(0, 3));
      default: return Range(lo, hi);
    }
  }
  void Line(const std::string& s) {
    if (text_.size() + s.size() < kMaxText) text_ += s + "\n";
  }
  std::string Num(int64_t v) { return std::to_string(v); }
  std::string RowList(int64_t lo, int64_t hi) {
    std::string s;
    for (int r = 0; r < rows_; ++r) s += (r ? "," : "") + Num(Near(lo, hi));
    return s;
  }

  void Layer(int l) {
    const int kind = static_cast<int>(Range(0, 2));
    const std::string name = "l" + Num(l);
    if (kind == 2) {
      const int64_t heads = Near(1, 64);
      std::string line = "layer " + name + " ssm heads=" + Num(heads);
      if (Chance(50)) {  // a divisor of heads, or sometimes not (a syntax error)
        int64_t k = Near(1, heads);
        while (!Chance(5) && heads % k != 0) --k;
        line += " kheads=" + Num(k);
      }
      if (Chance(80)) line += " dk=" + Num(Near(1, 512));
      if (Chance(80)) line += " dv=" + Num(Near(1, 512));
      if (Chance(80)) line += " conv=" + Num(Near(1, 64));
      return Line(line);
    }
    std::string line = "layer " + name + (kind == 1 ? " rotating" : " kv") +
                       " heads=" + Num(Near(1, 64)) + " dim=" + Num(Near(1, 512));
    const int64_t window = Near(1, 65536);
    if (kind == 1 || Chance(50)) line += " window=" + Num(window);
    if (kind == 1 && Chance(50)) line += " capacity=" + Num(Near(window, 65536));
    Line(line);
  }

  void Forward() {
    const bool decode = Chance(20);
    const int64_t L = decode ? 1 : Near(1, 4096);
    std::string line = decode ? "decode" : "window " + Num(L);
    if (!decode && Chance(20)) line += " left=" + RowList(0, L);
    if (!decode && Chance(20)) line += " right=" + RowList(0, L);
    if (rows_ * L <= 8192 && Chance(30)) {  // ids up to 2^31 - 1; the count is right when unpadded
      std::string groups;
      for (int r = 0; r < rows_; ++r) {
        if (r) groups += "/";
        const int64_t n = Chance(90) ? L : Range(0, L);
        for (int64_t j = 0; j < n; ++j) groups += (j ? "," : "") + Num(Near(0, 2147483647));
      }
      line += " ids=" + groups;
    }
    // Repeats fill rows towards 1,000,000 tokens (TRACE.md's limit per row).
    const int64_t repeats = Chance(10) ? Near(1, 300) : 1;
    for (int64_t i = 0; i < repeats; ++i) Line(line);
  }

  void Statement() {
    switch (Range(0, 15)) {
      case 0: case 1: case 2: case 3: case 4:
        return Forward();
      case 5:
        return Line("trim " + Num(Near(0, 65536)) + (Chance(50) ? " bypass" : ""));
      case 6:
        return Line("arm");
      case 7:
        return Line("accept " + (Chance(50) ? Num(Near(0, 4096)) : RowList(0, 4096)));
      case 8:
        return Line("fork f" + Num(forks_++));
      case 9:
        return Line("use " + (forks_ && Chance(80) ? "f" + Num(Range(0, forks_ - 1)) : "main"));
      case 10:
        return Line("join " + (forks_ ? "f" + Num(Range(0, forks_ - 1)) : std::string("main")));
      case 11:
        return Line("filter " + Num(Range(0, rows_ - 1)) +
                    (Chance(50) && rows_ > 1 ? "," + Num(rows_ - 1) : ""));
      case 12:
        return Line("extract " + Num(Near(0, rows_)) + " as f" + Num(forks_++));
      case 13:
        return Line("reload");
      case 14:
        return Line("expect positions " + RowList(0, 1000000));
      default:
        return Line("expect equal " + (forks_ ? "f" + Num(Range(0, forks_ - 1))
                                              : std::string("main")));
    }
  }

  FuzzedDataProvider& fdp_;
  std::string text_;
  int64_t rows_ = 1;
  int64_t forks_ = 0;
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
  const std::string text = Generator(&fdp).Generate();
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

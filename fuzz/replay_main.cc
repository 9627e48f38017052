// A main() for builds without libFuzzer: replays inputs through a fuzz
// target's LLVMFuzzerTestOneInput, so every target also builds with any
// compiler and replays its corpus under ctest.
//
//   fuzz_<target>_replay PATH...
//
// Each PATH is a file (one input) or a folder (every regular file under it,
// recursively, in name order). Prints how many inputs were replayed; exits 1
// when a path cannot be read. A failing input kills the process (the target
// traps or a sanitizer aborts); a signal handler names the input first.
// KVSPEC_REPLAY_VERBOSE=1 prints each input's name before it runs.
// KVSPEC_REPLAY_TIMES=N (N >= 1) runs each input once more, then N times
// timed, and prints `time MICROSECONDS BYTES PATH` per input (the mean of
// the N runs, steady clock) and a last `times:` line with the mean,
// median, 90th and 99th percentiles and maximum over the inputs: where a
// target's time goes, input by input (docs/fuzzing.md).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

// The input being replayed, for the signal handler.
char g_current[4096];

void WriteString(const char* s) {
  ssize_t ignored = write(STDERR_FILENO, s, std::strlen(s));
  (void)ignored;
}

extern "C" void OnFatalSignal(int sig) {
  WriteString("replay: the process died on input ");
  WriteString(g_current);
  WriteString("\n");
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

bool ReadFile(const fs::path& path, std::vector<uint8_t>* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  bytes->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

// The files PATH stands for, or false when it cannot be read.
bool CollectInputs(const fs::path& path, std::vector<fs::path>* inputs) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> found;
    fs::recursive_directory_iterator it(path, ec), end;
    if (ec) return false;
    for (; it != end; it.increment(ec)) {
      if (ec) return false;
      if (it->is_regular_file(ec)) found.push_back(it->path());
    }
    if (ec) return false;
    std::sort(found.begin(), found.end());
    inputs->insert(inputs->end(), found.begin(), found.end());
    return true;
  }
  if (fs::is_regular_file(path, ec)) {
    inputs->push_back(path);
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_FOLDER...\n", argv[0]);
    return 2;
  }
  const bool verbose = std::getenv("KVSPEC_REPLAY_VERBOSE") != nullptr;
  int timed_runs = 0;
  if (const char* t = std::getenv("KVSPEC_REPLAY_TIMES")) {
    char* end = nullptr;
    const long n = std::strtol(t, &end, 10);
    if (end == t || *end != '\0' || n < 1 || n > 1000) {
      std::fprintf(stderr, "KVSPEC_REPLAY_TIMES=%s: want a count from 1 to 1000\n", t);
      return 2;
    }
    timed_runs = static_cast<int>(n);
  }
  std::vector<double> times;  // microseconds per input, when timed
  // Keep the handlers a sanitizer runtime installed (its report is better).
  for (int sig : {SIGILL, SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGTRAP}) {
    const auto previous = std::signal(sig, OnFatalSignal);
    if (previous != SIG_DFL) std::signal(sig, previous);
  }
  size_t replayed = 0;
  int status = 0;
  for (int i = 1; i < argc; ++i) {
    std::vector<fs::path> inputs;
    if (!CollectInputs(argv[i], &inputs)) {
      std::fprintf(stderr, "%s: cannot read\n", argv[i]);
      status = 1;
      continue;
    }
    for (const fs::path& input : inputs) {
      std::vector<uint8_t> bytes;
      if (!ReadFile(input, &bytes)) {
        std::fprintf(stderr, "%s: cannot read\n", input.c_str());
        status = 1;
        continue;
      }
      if (verbose) std::fprintf(stderr, "replaying %s\n", input.c_str());
      std::snprintf(g_current, sizeof(g_current), "%s", input.c_str());
      const uint8_t none = 0;  // a valid pointer for an empty input
      const uint8_t* data = bytes.empty() ? &none : bytes.data();
      LLVMFuzzerTestOneInput(data, bytes.size());
      ++replayed;
      if (timed_runs > 0) {
        const auto start = std::chrono::steady_clock::now();
        for (int k = 0; k < timed_runs; ++k) LLVMFuzzerTestOneInput(data, bytes.size());
        const std::chrono::duration<double, std::micro> spent =
            std::chrono::steady_clock::now() - start;
        times.push_back(spent.count() / timed_runs);
        std::printf("time %.1f %zu %s\n", times.back(), bytes.size(), input.c_str());
      }
    }
  }
  std::printf("replayed %zu inputs\n", replayed);
  if (!times.empty()) {
    double sum = 0;
    for (double t : times) sum += t;
    std::sort(times.begin(), times.end());
    const auto at = [&times](double q) {
      return times[std::min(times.size() - 1, static_cast<size_t>(q * times.size()))];
    };
    std::printf("times: %zu inputs, microseconds per input: mean %.1f, median %.1f, "
                "p90 %.1f, p99 %.1f, max %.1f\n",
                times.size(), sum / times.size(), at(0.5), at(0.9), at(0.99), times.back());
  }
  return status;
}

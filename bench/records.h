// Limits measured in the same process as the benchmarks reported against
// them: a Record per probe (median of the runs that lasted at least 0.1 s),
// the process CPU clock, and BM_PeakFma/<target>, shared by the suites that
// report fractions of peak FMA (attention_bench, ssm_bench).
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvspec {
namespace bench {

// Deterministic inputs for the benchmarks and their peers: values in
// [-1, 1) from xorshift64, no <random> state to seed.
class Values {
 public:
  explicit Values(uint64_t seed) : state_(seed | 1) {}
  float Next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return static_cast<float>(state_ >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }
  void Fill(std::vector<float>* v) {
    for (float& x : *v) x = Next();
  }

 private:
  uint64_t state_;
};

// A figure measured earlier in this process: the median over the runs that
// lasted at least 0.1 s (else the latest run), 0 before any run.
struct Record {
  std::vector<double> values;
  double latest = 0;

  void Add(double value, double seconds);
  // A rate: bytes over the seconds they took.
  void AddRate(double bytes, double seconds) {
    if (seconds > 0) Add(bytes / seconds, seconds);
  }
  double Median() const;
};

// Process CPU time, the clock Google Benchmark divides rates by (no
// UseRealTime: it would append /real_time to every name). The benchmarks
// are single-threaded and meant to run pinned, where it tracks wall time.
double ProcessSeconds();

// The threaded benchmarks time the wall clock (the process CPU clock adds
// up every thread). A WallClock started before the loop sets, at Report:
// cpu_per_wall = process CPU seconds / wall seconds (at most `threads`;
// lower when other load takes the cores), `per_call` = wall microseconds
// per iteration, threads and caches (how many the benchmark rotates over).
class WallClock {
 public:
  WallClock();
  void Report(benchmark::State& state, const char* per_call, int threads, size_t caches) const;

 private:
  double cpu_start_;
  double wall_start_;
};

// BM_PeakFma's figures by dispatched target name.
std::map<std::string, Record>& FmaRecords();

// BM_PeakFma/<target>: FmaLoop (bench/limits.h) on `target`, recorded in
// FmaRecords() under the target it dispatched to.
void PeakFma(benchmark::State& state, int64_t target);

// BM_ReadProbe/<target>/<streams>/<KiB> and
// BM_ReadProbeNonTemporal/<target>/<streams>/<KiB> (non_temporal):
// ReadStreams (bench/limits.h) over the first `bytes` of `data` on
// `target`. Probes over at least kDramProbeBytes are recorded for
// BestDramRead().
constexpr size_t kDramProbeBytes = size_t{256} << 20;
void ReadProbe(benchmark::State& state, int64_t target, const void* data, size_t bytes,
               int streams, bool non_temporal = false);
// The best median read rate (bytes per second) of the DRAM-sized read
// probes run so far in this process, 0 before any.
double BestDramRead();

}  // namespace bench
}  // namespace kvspec

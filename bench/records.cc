// Limits measured in this process (bench/records.h).
#include "kvspec/bench/records.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "kvspec/bench/limits.h"
#include "kvspec/bench/dispatch_check.h"

namespace kvspec {
namespace bench {

void Record::Add(double value, double seconds) {
  if (seconds <= 0) return;
  latest = value;
  if (seconds >= 0.1) values.push_back(value);
}

double Record::Median() const {
  if (values.empty()) return latest;
  std::vector<double> v = values;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double ProcessSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

namespace {
double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

WallClock::WallClock() : cpu_start_(ProcessSeconds()), wall_start_(WallSeconds()) {}

void WallClock::Report(benchmark::State& state, const char* per_call, int threads,
                       size_t caches) const {
  const double wall = WallSeconds() - wall_start_;
  const double cpu = ProcessSeconds() - cpu_start_;
  const double iterations = static_cast<double>(state.iterations());
  if (wall > 0 && iterations > 0) {
    state.counters["cpu_per_wall"] = cpu / wall;
    state.counters[per_call] = 1e6 * wall / iterations;
  }
  state.counters["threads"] = threads;
  state.counters["caches"] = static_cast<double>(caches);
}

std::map<std::string, Record>& FmaRecords() {
  static auto* records = new std::map<std::string, Record>();
  return *records;
}

void PeakFma(benchmark::State& state, int64_t target) {
  DispatchCheck scope(target, LimitsTargetName, "FmaLoop");
  if (!scope.Check(state)) return;
  constexpr size_t kIterations = size_t{1} << 20;
  const double start = ProcessSeconds();
  float seed = 0.5f;
  for (auto _ : state) {
    double r = FmaLoop(kIterations, seed);
    benchmark::DoNotOptimize(r);
    seed += 1.0f;
  }
  const double seconds = ProcessSeconds() - start;
  const double flops = FmaLoopFlops(kIterations) * static_cast<double>(state.iterations());
  state.counters["flops"] = benchmark::Counter(flops, benchmark::Counter::kIsRate);
  if (seconds > 0) FmaRecords()[scope.dispatched()].Add(flops / seconds, seconds);
}

std::map<std::string, Record>& DramReadRecords() {
  static auto* records = new std::map<std::string, Record>();
  return *records;
}

void ReadProbe(benchmark::State& state, int64_t target, const void* data, size_t bytes,
               int streams, bool non_temporal) {
  DispatchCheck scope(target, LimitsTargetName, "ReadStreams");
  if (!scope.Check(state)) return;
  const size_t n = static_cast<size_t>(streams);
  const double read = static_cast<double>(ReadStreamsBytes(bytes, n));
  const double start = ProcessSeconds();
  for (auto _ : state) {
    uint64_t sum = ReadStreams(data, bytes, n, non_temporal);
    benchmark::DoNotOptimize(sum);
  }
  const double seconds = ProcessSeconds() - start;
  const double total = read * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(total));
  if (bytes >= kDramProbeBytes) {
    const std::string key = scope.dispatched() + "/" + std::to_string(streams) + "/" +
                            std::to_string(bytes) + (non_temporal ? "/nt" : "");
    DramReadRecords()[key].AddRate(total, seconds);
  }
}

double BestDramRead() {
  double best = 0;
  for (const auto& entry : DramReadRecords()) best = std::max(best, entry.second.Median());
  return best;
}

}  // namespace bench
}  // namespace kvspec

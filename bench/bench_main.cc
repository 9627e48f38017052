// The main() of the benchmark binaries whose benchmarks are registered at
// run time, once per Highway target this CPU supports: each such suite
// defines kvspec::bench::RegisterBenchmarks().
#include <benchmark/benchmark.h>

namespace kvspec::bench {
void RegisterBenchmarks();
}  // namespace kvspec::bench

int main(int argc, char** argv) {
  kvspec::bench::RegisterBenchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

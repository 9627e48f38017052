// Ring writes against memcpy of the same bytes, in the same run.
//
// A wrapped BatchedRotatingCache (1 row, 8 KV heads, head dim 128, window =
// capacity = 4096) takes a decode (1 column) or a window of 16 or 128
// columns per iteration. BM_RingMemcpy/<columns> copies the same K and V
// bytes into a ring buffer of the same size at the same rolling offset: the
// floor a ring write can reach. Compare sec_per_column of BM_RingWrite/N
// with BM_RingMemcpy/N of the same run (goal: ratio <= 1.15).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kvspec/core/kv_cache.h"

namespace kvspec {
namespace {

constexpr int kKvHeads = 8;
constexpr int kHeadDim = 128;
constexpr int32_t kWindow = 4096;
constexpr size_t kColumnBytes = size_t{kKvHeads} * kHeadDim * sizeof(float);  // K or V

void BM_RingMemcpy(benchmark::State& state) {
  const int32_t columns = static_cast<int32_t>(state.range(0));
  // Source laid out as a forward's input, destination as the ring's
  // [heads][slots][dim] storage: one memcpy per head and column, as a ring
  // write must do.
  std::vector<float> k(static_cast<size_t>(columns) * kKvHeads * kHeadDim, 0.5f), v(k);
  std::vector<float> ring_k(static_cast<size_t>(kWindow) * kKvHeads * kHeadDim), ring_v(ring_k);
  size_t at = 0;
  for (auto _ : state) {
    for (int32_t c = 0; c < columns; ++c) {
      for (int h = 0; h < kKvHeads; ++h) {
        const size_t in = (static_cast<size_t>(c) * kKvHeads + h) * kHeadDim;
        const size_t out = (static_cast<size_t>(h) * kWindow + at) * kHeadDim;
        std::memcpy(&ring_k[out], &k[in], kHeadDim * sizeof(float));
        std::memcpy(&ring_v[out], &v[in], kHeadDim * sizeof(float));
      }
      at = at + 1 == static_cast<size_t>(kWindow) ? 0 : at + 1;
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * columns * 2 * kColumnBytes);
  state.counters["sec_per_column"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * columns,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_RingWrite(benchmark::State& state) {
  const int32_t columns = static_cast<int32_t>(state.range(0));
  BatchedRotatingCache cache(1, kKvHeads, kHeadDim, kWindow, kWindow);
  std::vector<float> k(static_cast<size_t>(columns) * kKvHeads * kHeadDim, 0.5f), v(k);
  const ForwardColumns forward = ForwardColumns::Dense(1, columns, /*decode=*/columns == 1);
  // Wrap the ring first, so every measured write overwrites in place.
  std::vector<float> fill(static_cast<size_t>(kWindow) * kKvHeads * kHeadDim, 0.25f);
  if (!cache.Append(ForwardColumns::Dense(1, kWindow), fill.data(), fill.data()).ok() ||
      !cache.Append(forward, k.data(), v.data()).ok()) {
    std::fprintf(stderr, "ring_bench: append failed\n");
    std::abort();
  }
  for (auto _ : state) {
    const Status s = cache.Append(forward, k.data(), v.data());
    benchmark::DoNotOptimize(s.ok());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * columns * 2 * kColumnBytes);
  state.counters["sec_per_column"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * columns,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["physical_slots"] = static_cast<double>(cache.physicalSlots());
}

}  // namespace
}  // namespace kvspec

// Called by bench/bench_main.cc.
namespace kvspec::bench {
void RegisterBenchmarks() {
  for (const int64_t columns : {1, 16, 128}) {
    benchmark::RegisterBenchmark("BM_RingMemcpy", kvspec::BM_RingMemcpy)->Arg(columns);
    benchmark::RegisterBenchmark("BM_RingWrite", kvspec::BM_RingWrite)->Arg(columns);
  }
}
}  // namespace kvspec::bench

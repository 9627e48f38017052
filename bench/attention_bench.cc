// Benchmarks of kvspec::Attend per Highway target: decode (L = 1) and
// window (L = 4, 16, 128) forwards over a batched KV cache, hot (one cache
// reused, as far as it fits in the caches) and cold (rotating through at
// least 1 GiB of distinct caches, so K and V stream from DRAM as they do when
// a model decodes through many layers), and BM_StreamRead, the single-core
// streaming read bandwidth the decode figures are compared with.
//
// Names: BM_Decode/<target>/<cache length>, BM_DecodeHot/<target>/<length>,
// BM_Window/<target>/<context>/<L>, BM_WindowHot/<target>/<context>/<L>,
// BM_DecodeRing/<target>/<length>/<wrapped 0|1> (a rotating cache read in
// place), BM_StreamRead. The label is the target Attend really dispatched to.
//
// Counters: bytes_per_second counts the K and V bytes of the admitted slots
// once per call (the least a kernel must read); items_per_second counts
// attended tokens, one per admitted (query, slot) pair (the cache length for
// a decode; context + i + 1 for window query i). Rates are per CPU second
// (Google Benchmark's default clock; run pinned, where it tracks wall time).
// stream_fraction is bytes_per_second over the BM_StreamRead figure of the
// same process; it appears only when BM_StreamRead ran first (it is
// registered first, so it does unless a filter excludes it).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <time.h>

#include "core/attention.h"
#include "core/cache.h"
#include "core/kv_cache.h"
#include "core/mask.h"
#include "hwy/targets.h"

namespace kvspec {
namespace {

// The head shape of every attention benchmark: a GQA layer of a 7-8B model.
constexpr int kKvHeads = 8;
constexpr int kQueryHeads = 32;
constexpr int kHeadDim = 128;
constexpr int kRows = 1;

constexpr size_t kGiB = size_t{1} << 30;
// Distinct K+V bytes a cold benchmark rotates through.
constexpr size_t kColdBytes = kGiB;
// Bound on the caches of one cold set (reached only by tiny caches).
constexpr size_t kMaxColdCaches = 512;

constexpr int32_t kDecodeLengths[] = {512, 1024, 2048, 4096, 8192, 16384, 32768};
constexpr int32_t kRingLengths[] = {4096, 32768};
constexpr int32_t kWindowContext = 1024;
constexpr int32_t kWindowColumns[] = {4, 16, 128};

// Deterministic values in [-1, 1): xorshift64, no <random> state to seed.
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

// One cache that has just taken a forward of `columns` columns, with the
// mask of that forward.
struct AttentionCase {
  std::unique_ptr<ColumnStore> cache;  // owns what view and mask point to
  KvView view;
  Mask mask;
};

// The one large working set alive at a time (a set of caches of one shape,
// or the StreamRead buffer), so that the process stays near 1.3 GiB
// whatever the filter. Repetitions of one benchmark and the targets of one
// shape (registered next to each other) reuse it; it is built lazily.
// How the cache of a case stores its tokens.
enum class Storage { kPlain = 0, kRingFull = 1, kRingWrapped = 2 };

struct WorkingSet {
  int32_t context = -1;  // tokens stored before the forward
  int32_t columns = -1;  // L of the forward
  Storage storage = Storage::kPlain;
  std::vector<AttentionCase> cases;
  std::vector<uint64_t> stream;  // BM_StreamRead's buffer
};

WorkingSet& Resident() {
  static WorkingSet* set = new WorkingSet();  // never destroyed: no exit-order issues
  return *set;
}

size_t KvBytesPerToken() {
  return static_cast<size_t>(kRows) * kKvHeads * 2 * kHeadDim * sizeof(float);
}

// Builds one cache through the public API: an append of `context + columns`
// columns, then the mask of a forward of its last `columns` columns (a
// decode step when columns == 1) over the view's slot positions. Appending
// the context and the forward separately would give the same slots and
// mask; one append keeps the capacity exact instead of 1.5x.
//
// Rings (window = capacity = context + columns, so every stored token is
// visible to the decode): kRingFull holds exactly `capacity` columns (full,
// not wrapped, phase 0); kRingWrapped first takes half a ring more, so the
// decode reads a wrapped ring in place at phase ~1/2.
AttentionCase MakeCase(int32_t context, int32_t columns, Storage storage,
                       const std::vector<float>& k, const std::vector<float>& v) {
  AttentionCase c;
  const int32_t total = context + columns;
  Status appended;
  if (storage == Storage::kPlain) {
    c.cache = std::make_unique<BatchedKvCache>(kRows, kKvHeads, kHeadDim);
  } else {
    c.cache = std::make_unique<BatchedRotatingCache>(kRows, kKvHeads, kHeadDim, total, total);
    if (storage == Storage::kRingWrapped) {
      appended = c.cache->Append(ForwardColumns::Dense(kRows, total / 2), k.data(), v.data());
    }
  }
  if (appended.ok()) {
    appended = c.cache->Append(ForwardColumns::Dense(kRows, total), k.data(), v.data());
  }
  if (!appended.ok()) {
    std::fprintf(stderr, "attention_bench: Append failed: %s\n", appended.message().c_str());
    std::abort();
  }
  c.view = c.cache->View();
  const ForwardColumns forward = ForwardColumns::Dense(kRows, columns, /*decode=*/columns == 1);
  c.mask = BuildMask(forward, c.cache->positions(), c.cache->window(), c.view);
  return c;
}

// At least `count` caches of the shape (context, columns), each in its own
// memory. Frees the previous working set when the shape differs.
const std::vector<AttentionCase>& Cases(int32_t context, int32_t columns, Storage storage,
                                        size_t count) {
  WorkingSet& set = Resident();
  if (set.context != context || set.columns != columns || set.storage != storage) {
    set = WorkingSet();  // releases caches and the stream buffer first
    set.context = context;
    set.columns = columns;
    set.storage = storage;
  }
  if (set.cases.size() < count) {
    // [rows][context + columns][kv_heads][dim]: the same values for every
    // cache of the set; what matters for a cold read is distinct memory.
    const size_t elements = static_cast<size_t>(kRows) * (context + columns) * kKvHeads * kHeadDim;
    std::vector<float> k(elements), v(elements);
    Values values(0x6B767370656331ull + static_cast<uint64_t>(context) * 131 + columns);
    values.Fill(&k);
    values.Fill(&v);
    set.cases.reserve(count);
    while (set.cases.size() < count) {
      set.cases.push_back(MakeCase(context, columns, storage, k, v));
    }
  }
  return set.cases;
}

// Caches a cold benchmark of this shape rotates through: >= kColdBytes.
size_t ColdCount(int32_t tokens) {
  const size_t bytes = static_cast<size_t>(tokens) * KvBytesPerToken();
  const size_t count = (kColdBytes + bytes - 1) / bytes;
  return std::min(std::max<size_t>(count, 2), kMaxColdCaches);
}

// K+V bytes of the slots the mask admits, counting each slot once, and the
// admitted (query, slot) pairs; the same for every case of a set.
void CountWork(const AttentionCase& c, double* bytes, double* tokens) {
  std::vector<char> any(static_cast<size_t>(c.mask.slots), 0);
  double pairs = 0;
  for (int r = 0; r < c.mask.rows; ++r) {
    for (int32_t q = 0; q < c.mask.queries; ++q) {
      for (int32_t s = 0; s < c.mask.slots; ++s) {
        if (c.mask.Admits(r, q, s)) {
          pairs += 1;
          any[s] = 1;
        }
      }
    }
  }
  const double slots = static_cast<double>(std::count(any.begin(), any.end(), 1));
  *bytes = slots * static_cast<double>(KvBytesPerToken() / kRows);
  *tokens = pairs;
}

// ---------------------------------------------------------------------------
// Single-core streaming read bandwidth, in bytes per second, of the
// BM_StreamRead runs so far (the median of the runs that lasted at least
// 0.1 s, else the latest); 0 when it has not run.
struct StreamRecord {
  std::vector<double> rates;  // runs of at least 0.1 s
  double latest = 0;
};

StreamRecord& Stream() {
  static StreamRecord* record = new StreamRecord();
  return *record;
}

double StreamBytesPerSecond() {
  std::vector<double> rates = Stream().rates;
  if (rates.empty()) return Stream().latest;
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

// Process CPU time, the clock Google Benchmark divides rates by (no
// UseRealTime: it would append /real_time to every name). The benchmarks
// are single-threaded and meant to run pinned, where it tracks wall time.
double ProcessSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Sums a buffer of kColdBytes: four independent integer accumulators, which
// gcc vectorizes at the baseline (SSE2) without any reassociation license.
void BM_StreamRead(benchmark::State& state) {
  WorkingSet& set = Resident();
  if (set.stream.empty()) {
    set = WorkingSet();  // drop any caches before allocating another GiB
    set.stream.resize(kColdBytes / sizeof(uint64_t));
    for (size_t i = 0; i < set.stream.size(); ++i) set.stream[i] = i * 0x9E3779B97F4A7C15ull;
  }
  const uint64_t* data = set.stream.data();
  const size_t n = set.stream.size();
  const double start = ProcessSeconds();
  for (auto _ : state) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < n; i += 4) {
      s0 += data[i];
      s1 += data[i + 1];
      s2 += data[i + 2];
      s3 += data[i + 3];
    }
    uint64_t sum = s0 + s1 + s2 + s3;
    benchmark::DoNotOptimize(sum);
  }
  const double seconds = ProcessSeconds() - start;
  const double bytes = static_cast<double>(state.iterations()) * static_cast<double>(kColdBytes);
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  if (seconds > 0) {
    Stream().latest = bytes / seconds;
    if (seconds >= 0.1) Stream().rates.push_back(Stream().latest);
  }
}

// ---------------------------------------------------------------------------
// Restricts Highway to one target for the life of the object. In Highway
// 1.0.3, SetSupportedTargetsForTest also resets the dispatch table
// (GetChosenTarget().DeInit()), so the next HWY_DYNAMIC_DISPATCH chooses
// again; Matches() checks that Attend really runs on the requested target.
class TargetScope {
 public:
  explicit TargetScope(int64_t target) : target_(target) {
    hwy::SetSupportedTargetsForTest(target);
    dispatched_ = AttentionTargetName();
  }
  ~TargetScope() { hwy::SetSupportedTargetsForTest(0); }
  TargetScope(const TargetScope&) = delete;
  TargetScope& operator=(const TargetScope&) = delete;

  const std::string& dispatched() const { return dispatched_; }
  bool Matches() const { return dispatched_ == hwy::TargetName(target_); }

 private:
  int64_t target_;
  std::string dispatched_;
};

// Attend over the caches of one shape: `rotate` of them in turn (cold) or
// the first one only (hot).
void RunAttention(benchmark::State& state, int64_t target, int32_t context, int32_t columns,
                  bool cold, Storage storage = Storage::kPlain) {
  TargetScope scope(target);
  state.SetLabel(scope.dispatched());
  if (!scope.Matches()) {
    const std::string message = std::string("Attend dispatched to ") + scope.dispatched() +
                                ", not " + hwy::TargetName(target);
    state.SkipWithError(message.c_str());
    return;
  }
  const size_t rotate = cold ? ColdCount(context + columns) : 1;
  const std::vector<AttentionCase>& cases = Cases(context, columns, storage, rotate);

  // q and out: [rows][columns][q_heads][dim]
  const size_t q_elements = static_cast<size_t>(kRows) * columns * kQueryHeads * kHeadDim;
  std::vector<float> q(q_elements), out(q_elements);
  Values values(0x71756572790ull + static_cast<uint64_t>(columns));
  values.Fill(&q);

  double bytes = 0, tokens = 0;
  CountWork(cases[0], &bytes, &tokens);

  size_t next = 0;
  const double start = ProcessSeconds();
  for (auto _ : state) {
    const AttentionCase& c = cases[next];
    next = next + 1 == rotate ? 0 : next + 1;
    Attend(q.data(), kQueryHeads, c.view, c.mask, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double seconds = ProcessSeconds() - start;
  const double iterations = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(bytes * iterations));
  state.SetItemsProcessed(static_cast<int64_t>(tokens * iterations));
  const double stream = StreamBytesPerSecond();
  if (stream > 0 && seconds > 0) {
    state.counters["stream_fraction"] = bytes * iterations / seconds / stream;
  }
  state.counters["caches"] = static_cast<double>(rotate);
}

void RegisterAll() {
  benchmark::RegisterBenchmark("BM_StreamRead", BM_StreamRead)
      ->Unit(benchmark::kMillisecond);

  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  // Shape outermost, so each working set is built once per process and
  // shared by every target's hot and cold benchmark of that shape.
  for (const int32_t length : kDecodeLengths) {
    for (const int64_t target : targets) {
      const std::string name = hwy::TargetName(target);
      for (const bool cold : {true, false}) {
        benchmark::RegisterBenchmark(
            (std::string(cold ? "BM_Decode/" : "BM_DecodeHot/") + name).c_str(),
            [target, cold](benchmark::State& state) {
              RunAttention(state, target, static_cast<int32_t>(state.range(0)) - 1, 1, cold);
            })
            ->Arg(length)
                  ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  // Decode over a ring, read in place: full but not wrapped (/0) against
  // wrapped at phase ~1/2 (/1), same length, cold (goal: wrapped <= 1.05x).
  for (const int32_t length : kRingLengths) {
    for (const int64_t target : targets) {
      for (const Storage storage : {Storage::kRingFull, Storage::kRingWrapped}) {
        benchmark::RegisterBenchmark(
            (std::string("BM_DecodeRing/") + hwy::TargetName(target)).c_str(),
            [target, storage](benchmark::State& state) {
              RunAttention(state, target, static_cast<int32_t>(state.range(0)) - 1, 1,
                           /*cold=*/true, storage);
            })
            ->Args({length, storage == Storage::kRingWrapped ? 1 : 0})
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  for (const int32_t columns : kWindowColumns) {
    for (const int64_t target : targets) {
      const std::string name = hwy::TargetName(target);
      for (const bool cold : {true, false}) {
        benchmark::RegisterBenchmark(
            (std::string(cold ? "BM_Window/" : "BM_WindowHot/") + name).c_str(),
            [target, cold](benchmark::State& state) {
              RunAttention(state, target, static_cast<int32_t>(state.range(0)),
                           static_cast<int32_t>(state.range(1)), cold);
            })
            ->Args({kWindowContext, columns})
                  ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace
}  // namespace kvspec

int main(int argc, char** argv) {
  kvspec::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

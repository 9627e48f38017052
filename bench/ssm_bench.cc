// Benchmarks of the recurrent (gated DeltaNet) cache per Highway target:
// the decode step and verify windows through SsmCacheBase::Forward, a
// speculative rollback with replay against keeping a checkpoint per token,
// and the conv1d update alone, next to the single-core streaming limits of
// the same process.
//
// Shape of every recurrent benchmark: value heads Hv = 16 or 32, key heads
// Hk = Hv / 2 (a GQA-style DeltaNet layer: two value heads share one key
// head), dk = dv = 128, conv kernel K = 4, scalar gate per head. A row's
// state is then Hv*dv*dk*4 bytes of recurrent state (1 MiB at Hv = 16,
// 2 MiB at 32) plus (K-1)*C*4 bytes of conv state, C = 2*Hk*dk + Hv*dv.
//
// Names (the target is the Highway target requested and, checked through
// GatedDeltaTargetName(), the one that ran; the label repeats it):
//   BM_StreamRead, BM_StreamReadWrite, BM_StreamReadWriteInPlace
//   BM_StreamReadHot/<KiB>, BM_StreamReadWriteInPlaceHot/<KiB>
//                                                read, and a = s * a in place,
//                                                over a buffer kept in cache:
//                                                one head's state (64 KiB) and
//                                                each shape's row state (GB/s,
//                                                to set beside hot runs)
//   BM_PeakFma/<target>                          peak FP32 multiply-add rate
//   BM_Decode/<target>/<value heads>/<rows>      cold, one column
//   BM_DecodeHot/<target>/<value heads>/<rows>   hot, one column
//   BM_Window/<target>/<value heads>/<L>         hot, L columns, one row
//   BM_RollbackReplay/<target>/<keep>            arm, verify 8, Rollback(keep)
//   BM_CheckpointPerToken/<target>/<keep>        8 steps + a copy per token,
//                                                restore the keep-th copy
//   BM_ConvStep/<target>/<channels>/<kernel>     ConvStep alone, hot; kernel 1
//                                                is the SiLU's own cost
//   BM_ConvWalk/<target>/<channels>/<kernel>     its loads, stores and
//                                                multiply-adds alone (no SiLU)
//   BM_DecodeThreads, BM_DecodeHotThreads/<target>/<value heads>/<rows>/
//     <threads>/real_time  decode with the heads on a pool (wall clock)
//
// Hot: one cache reused (at Hv = 16 a row's 1 MiB state lives in L3 here,
// L2 is 512 KiB). Cold: rotating through at least 1 GiB of distinct touched
// state (the inactive second buffer of each row is not counted), built once
// per shape, so the state streams from DRAM as it does when a model decodes
// through many layers.
//
// Counters:
//   bytes_per_second   state bytes read + written: per real token and row,
//                      2 * (recurrent + conv state bytes); ConvStep counts
//                      weights, state in and out, x and u.
//   rw_fraction        (cold runs only) bytes_per_second / BM_StreamReadWrite
//                      of this process
//   inplace_fraction   (cold runs only) bytes_per_second /
//                      BM_StreamReadWriteInPlace: the read+write limit of an
//                      in-place state update
//   flops              (hot decode and windows) 7 flops per recurrent state
//                      element and real token: the decay (1), m = S k (2),
//                      the rank-1 update (2) and y = S q (2); the conv and
//                      the q/k normalisation are not counted
//   fma_fraction       flops / BM_PeakFma of the dispatched target
//   us_per_step        microseconds per Forward call (per token for windows:
//                      us_per_token); us_per_round for the speculation pair
//   checkpoint_over_replay  (BM_CheckpointPerToken only) its us_per_round
//                      over BM_RollbackReplay's of the same target and keep
// Rates are per CPU second of the process (Google Benchmark's default);
// run pinned (taskset), where that tracks wall time. The fractions appear
// only when the stream and FMA benchmarks ran earlier in the same process
// (they are registered first).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <time.h>

#ifdef KVSPEC_GGML_PEERS
#include "kvspec/bench/ggml_peers.h"
#endif
#include "kvspec/bench/limits.h"
#include "kvspec/bench/records.h"
#include "kvspec/bench/dispatch_check.h"
#include "kvspec/core/cache.h"
#include "kvspec/kernels/aligned_vector.h"
#include "kvspec/kernels/conv1d.h"
#include "kvspec/kernels/gated_delta.h"
#include "kvspec/kernels/thread_pool.h"
#include "kvspec/core/ssm_cache.h"
#include "hwy/targets.h"

namespace kvspec {
namespace {

using bench::FmaRecords;
using bench::ProcessSeconds;
using bench::Record;

constexpr int kDim = 128;  // dk = dv
constexpr int kConvKernel = 4;
constexpr int kValueHeads[] = {16, 32};
constexpr int kRows[] = {1, 8};
constexpr int32_t kWindowColumns[] = {4, 8, 16};
constexpr int32_t kVerifyColumns = 8;
constexpr int32_t kKeeps[] = {1, 3, 7};
constexpr int kSpeculationValueHeads = 16;
constexpr size_t kConvChannels = 8192;

constexpr size_t kGiB = size_t{1} << 30;
constexpr size_t kColdBytes = kGiB;   // distinct state a cold benchmark walks
constexpr size_t kStreamBytes = kGiB;  // each stream buffer

SsmShape Shape(int value_heads) {
  SsmShape s;
  s.value_heads = value_heads;
  s.key_heads = value_heads / 2;
  s.dk = kDim;
  s.dv = kDim;
  s.conv = kConvKernel;
  s.gate_per_lane = false;
  return s;
}

// State bytes one token of one row reads (and then writes).
size_t RowStateBytes(const SsmShape& s) {
  return (s.RecurrentFloats() + s.ConvFloats()) * sizeof(float);
}

// Deterministic uniform values in [lo, hi): a 64-bit LCG's top 24 bits.
class Uniform {
 public:
  explicit Uniform(uint64_t seed) : x_(seed) {}
  float Next(float lo, float hi) {
    x_ = x_ * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * static_cast<float>(x_ >> 40) * (1.0f / 16777216.0f);
  }
  void Fill(std::vector<float>* v, float lo, float hi) {
    for (float& e : *v) e = Next(lo, hi);
  }

 private:
  uint64_t x_;
};

// The inputs of one forward of `columns` columns over `rows` rows, the same
// for every call: g in (0.90, 0.99) and beta in (0.2, 0.8) keep the state
// bounded and far from denormals however many steps it takes.
struct Inputs {
  std::vector<float> conv_weights;  // [K][C]
  std::vector<float> packed;        // the same, PackConvWeights (once, as a layer owner does)
  std::vector<float> x;             // [rows][L][C]
  std::vector<float> gate;          // [rows][L][Hv]
  std::vector<float> beta;          // [rows][L][Hv]
  std::vector<float> y;             // [rows][L][Hv][dv]

  Inputs(const SsmShape& s, int rows, int32_t columns) {
    const size_t tokens = static_cast<size_t>(rows) * static_cast<size_t>(columns);
    const size_t C = s.Channels();
    conv_weights.resize(static_cast<size_t>(s.conv) * C);
    x.resize(tokens * C);
    gate.resize(tokens * s.GateFloats());
    beta.resize(tokens * static_cast<size_t>(s.value_heads));
    y.resize(tokens * static_cast<size_t>(s.value_heads) * s.dv);
    Uniform u(0x55534D62656E6368ull + static_cast<uint64_t>(rows) * 977 + columns);
    u.Fill(&conv_weights, -0.5f, 0.5f);
    u.Fill(&x, -1.0f, 1.0f);
    u.Fill(&gate, 0.90f, 0.99f);
    u.Fill(&beta, 0.2f, 0.8f);
    packed.resize(conv_weights.size());
    PackConvWeights(conv_weights.data(), packed.data(), C, static_cast<size_t>(s.conv));
  }

  // The IO of token `t` when the forward is taken one column at a time
  // (rows = 1): the t-th column of these inputs.
  SsmIO Token(const SsmShape& s, int32_t t) {
    const size_t at = static_cast<size_t>(t);
    SsmIO io;
    io.conv_weights = conv_weights.data();
    io.packed_conv_weights = packed.data();
    io.x = x.data() + at * s.Channels();
    io.gate = gate.data() + at * s.GateFloats();
    io.beta = beta.data() + at * static_cast<size_t>(s.value_heads);
    io.y = y.data() + at * static_cast<size_t>(s.value_heads) * s.dv;
    return io;
  }
  SsmIO All(const SsmShape& s) { return Token(s, 0); }
};

std::unique_ptr<SsmCacheBase> MakeCache(int rows, const SsmShape& s) {
  if (rows == 1) return std::make_unique<SsmCache>(s);
  return std::make_unique<BatchedSsmCache>(rows, s);
}

// The one large working set alive at a time (a set of caches of one shape
// or the stream buffers), so the process stays near 2.1 GiB whatever the
// filter. Benchmarks of one shape are registered next to each other and
// share it; it is built lazily.
struct WorkingSet {
  int value_heads = -1;
  int rows = -1;
  std::vector<std::unique_ptr<SsmCacheBase>> caches;
  // The probes' buffers start on a cache line, as the caches' storage does.
  AlignedVector<float> stream_a;  // kStreamBytes
  AlignedVector<float> stream_b;  // kStreamBytes (BM_StreamReadWrite's destination)
};

WorkingSet& Resident() {
  static WorkingSet* set = new WorkingSet();  // never destroyed
  return *set;
}

// At least `count` caches of the shape, each its own memory (every state
// byte written at construction, so no page faults while timing).
const std::vector<std::unique_ptr<SsmCacheBase>>& Caches(int value_heads, int rows,
                                                         size_t count) {
  WorkingSet& set = Resident();
  if (set.value_heads != value_heads || set.rows != rows) {
    set = WorkingSet();  // release the previous set (and stream buffers) first
    set.value_heads = value_heads;
    set.rows = rows;
  }
  set.caches.reserve(count);
  while (set.caches.size() < count) set.caches.push_back(MakeCache(rows, Shape(value_heads)));
  return set.caches;
}

size_t ColdCount(const SsmShape& s, int rows) {
  const size_t bytes = static_cast<size_t>(rows) * RowStateBytes(s);
  return std::max<size_t>((kColdBytes + bytes - 1) / bytes, 2);
}

AlignedVector<float>& StreamBuffer(AlignedVector<float> WorkingSet::*which) {
  WorkingSet& set = Resident();
  if (set.value_heads != -1) set = WorkingSet();  // drop caches before another GiB
  AlignedVector<float>& buffer = set.*which;
  if (buffer.empty()) {
    buffer.resize(kStreamBytes / sizeof(float));
    for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<float>(i & 1023);
  }
  return buffer;
}

Record& StreamRead() {
  static Record* r = new Record();
  return *r;
}
Record& StreamReadWrite() {
  static Record* r = new Record();
  return *r;
}
Record& StreamReadWriteInPlace() {
  static Record* r = new Record();
  return *r;
}

// Sums 1 GiB as 32-bit integers, four independent accumulators (vectorised
// by gcc at the SSE2 baseline without any reassociation licence).
void BM_StreamRead(benchmark::State& state) {
  const AlignedVector<float>& a = StreamBuffer(&WorkingSet::stream_a);
  const uint32_t* data = reinterpret_cast<const uint32_t*>(a.data());
  const size_t n = a.size();
  const double start = ProcessSeconds();
  for (auto _ : state) {
    uint32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < n; i += 4) {
      s0 += data[i];
      s1 += data[i + 1];
      s2 += data[i + 2];
      s3 += data[i + 3];
    }
    uint32_t sum = s0 + s1 + s2 + s3;
    benchmark::DoNotOptimize(sum);
  }
  const double bytes = static_cast<double>(state.iterations()) * kStreamBytes;
  StreamRead().AddRate(bytes, ProcessSeconds() - start);
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}

// b = s * a over 1 GiB into another 1 GiB: counts the bytes read plus the
// bytes written (the write-allocate reads of b are extra traffic the
// counter does not credit).
void BM_StreamReadWrite(benchmark::State& state) {
  AlignedVector<float>& a = StreamBuffer(&WorkingSet::stream_a);
  AlignedVector<float>& b = StreamBuffer(&WorkingSet::stream_b);
  const float* src = a.data();
  float* dst = b.data();
  const size_t n = a.size();
  float scale = 0.5f;
  benchmark::DoNotOptimize(scale);
  const double start = ProcessSeconds();
  for (auto _ : state) {
    for (size_t i = 0; i < n; ++i) dst[i] = scale * src[i];
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(state.iterations()) * 2.0 * kStreamBytes;
  StreamReadWrite().AddRate(bytes, ProcessSeconds() - start);
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}

// a = s * a over 1 GiB in place (s alternating 2 and 1/2, exact): the
// access pattern of an in-place state update, no write-allocate traffic.
void BM_StreamReadWriteInPlace(benchmark::State& state) {
  AlignedVector<float>& a = StreamBuffer(&WorkingSet::stream_a);
  float* data = a.data();
  const size_t n = a.size();
  float scale = 2.0f;
  const double start = ProcessSeconds();
  for (auto _ : state) {
    benchmark::DoNotOptimize(scale);
    for (size_t i = 0; i < n; ++i) data[i] *= scale;
    benchmark::ClobberMemory();
    scale = 1.0f / scale;
  }
  const double bytes = static_cast<double>(state.iterations()) * 2.0 * kStreamBytes;
  StreamReadWriteInPlace().AddRate(bytes, ProcessSeconds() - start);
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}

// The hot counterpart: a = s * a in place over a buffer of `bytes` (the
// state bytes of one row of a BM_DecodeHot shape) that stays in cache from
// one iteration to the next, in vectors of the dispatched target
// (bench::ScaleInPlace). A GB/s figure to set beside the hot step, not a
// DRAM limit.
void BM_StreamReadWriteInPlaceHot(benchmark::State& state, size_t bytes) {
  AlignedVector<float> a(bytes / sizeof(float));
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i & 1023);
  float scale = 2.0f;
  const double start = ProcessSeconds();
  for (auto _ : state) {
    benchmark::DoNotOptimize(scale);
    bench::ScaleInPlace(a.data(), a.size(), scale);
    benchmark::ClobberMemory();
    scale = 1.0f / scale;
  }
  const double seconds = ProcessSeconds() - start;
  const double total = static_cast<double>(state.iterations()) * 2.0 * static_cast<double>(bytes);
  state.SetBytesProcessed(static_cast<int64_t>(total));
  if (state.iterations() > 0) {
    state.counters["us_per_pass"] = 1e6 * seconds / static_cast<double>(state.iterations());
  }
  state.SetLabel(bench::LimitsTargetName());
}

// Reads a buffer of `bytes` kept in cache (bench::ReadStreams, one stream):
// the read-only counterpart of BM_StreamReadWriteInPlaceHot.
void BM_StreamReadHot(benchmark::State& state, size_t bytes) {
  AlignedVector<float> a(bytes / sizeof(float));
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i & 1023);
  const size_t read = bench::ReadStreamsBytes(bytes, 1);
  const double start = ProcessSeconds();
  for (auto _ : state) {
    uint64_t sum = bench::ReadStreams(a.data(), bytes, 1);
    benchmark::DoNotOptimize(sum);
  }
  const double seconds = ProcessSeconds() - start;
  state.SetBytesProcessed(static_cast<int64_t>(static_cast<double>(state.iterations()) *
                                               static_cast<double>(read)));
  if (state.iterations() > 0) {
    state.counters["us_per_pass"] = 1e6 * seconds / static_cast<double>(state.iterations());
  }
  state.SetLabel(bench::LimitsTargetName());
}

// ---------------------------------------------------------------------------

bool Failed(benchmark::State& state, const Status& s, const char* what) {
  if (s.ok()) return false;
  const std::string message = std::string(what) + ": " + s.message();
  state.SkipWithError(message.c_str());
  return true;
}

// Sets bytes_per_second from `bytes` per iteration and, for cold runs, the
// stream fractions.
void ReportBandwidth(benchmark::State& state, double bytes_per_iteration, double seconds,
                     bool cold) {
  const double bytes = bytes_per_iteration * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  if (seconds <= 0 || !cold) return;
  const double rate = bytes / seconds;
  if (StreamReadWrite().Median() > 0) {
    state.counters["rw_fraction"] = rate / StreamReadWrite().Median();
  }
  if (StreamReadWriteInPlace().Median() > 0) {
    state.counters["inplace_fraction"] = rate / StreamReadWriteInPlace().Median();
  }
}

// One Forward of `columns` columns per iteration over the caches of the
// shape: all of a cold set in turn, or the first one only (hot).
void RunForward(benchmark::State& state, int64_t target, int value_heads, int rows,
                int32_t columns, bool cold) {
  bench::DispatchCheck scope(target, GatedDeltaTargetName, "GatedDeltaStep");
  if (!scope.Check(state)) return;
  const SsmShape shape = Shape(value_heads);
  const size_t rotate = cold ? ColdCount(shape, rows) : 1;
  const auto& caches = Caches(value_heads, rows, rotate);
  Inputs inputs(shape, rows, columns);
  const SsmIO io = inputs.All(shape);
  const ForwardColumns forward = ForwardColumns::Dense(rows, columns, /*decode=*/columns == 1);

  size_t next = 0;
  const double start = ProcessSeconds();
  for (auto _ : state) {
    const Status s = caches[next]->Forward(forward, io);
    if (Failed(state, s, "Forward")) return;
    next = next + 1 == rotate ? 0 : next + 1;
    benchmark::ClobberMemory();
  }
  const double seconds = ProcessSeconds() - start;
  const double iterations = static_cast<double>(state.iterations());
  ReportBandwidth(state, 2.0 * static_cast<double>(RowStateBytes(shape)) * rows * columns,
                  seconds, cold);
  if (!cold && seconds > 0) {
    const double flops = 7.0 * static_cast<double>(shape.RecurrentFloats()) * rows * columns *
                         iterations;
    state.counters["flops"] = benchmark::Counter(flops, benchmark::Counter::kIsRate);
    const auto fma = FmaRecords().find(scope.dispatched());
    if (fma != FmaRecords().end() && fma->second.Median() > 0) {
      state.counters["fma_fraction"] = flops / seconds / fma->second.Median();
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(iterations * rows * columns));
  if (iterations > 0) {
    const double us = 1e6 * seconds / iterations;
    if (columns == 1) {
      state.counters["us_per_step"] = us;
    } else {
      state.counters["us_per_token"] = us / columns;
    }
  }
  state.counters["caches"] = static_cast<double>(rotate);
  state.counters["state_MiB"] =
      static_cast<double>(RowStateBytes(shape)) * rows * rotate / (1024.0 * 1024.0);
}

// ---------------------------------------------------------------------------
// Speculation: a verify window of kVerifyColumns tokens of which `keep` are
// accepted, on one row of Hv = 16, hot.

// us_per_round of BM_RollbackReplay per "<target>/<keep>" (median of runs).
std::map<std::string, Record>& ReplayRounds() {
  static auto* m = new std::map<std::string, Record>();
  return *m;
}

// Sets us_per_round from the process time since `start`; false when no
// iteration ran. *us: the time per round; *seconds: in all.
bool UsPerRound(benchmark::State& state, double start, double* us, double* seconds) {
  *seconds = ProcessSeconds() - start;
  const double iterations = static_cast<double>(state.iterations());
  if (iterations <= 0) return false;
  *us = 1e6 * *seconds / iterations;
  state.counters["us_per_round"] = *us;
  return true;
}

// (a) The cache's own round: ArmRound (no copy), the verify Forward of the
// window (reads the snapshot buffer, writes the other), Rollback(keep)
// (replays the first keep recorded tokens from the snapshot).
void RunRollbackReplay(benchmark::State& state, int64_t target, int32_t keep) {
  bench::DispatchCheck scope(target, GatedDeltaTargetName, "GatedDeltaStep");
  if (!scope.Check(state)) return;
  const SsmShape shape = Shape(kSpeculationValueHeads);
  SsmCache cache(shape);
  Inputs inputs(shape, 1, kVerifyColumns);
  const SsmIO io = inputs.All(shape);
  const ForwardColumns window = ForwardColumns::Dense(1, kVerifyColumns);
  const std::vector<int32_t> keeps = {keep};
  const double start = ProcessSeconds();
  for (auto _ : state) {
    if (Failed(state, cache.ArmRound(), "ArmRound")) return;
    if (Failed(state, cache.Forward(window, io), "Forward")) return;
    if (Failed(state, cache.Rollback(keeps), "Rollback")) return;
    benchmark::ClobberMemory();
  }
  double us = 0, seconds = 0;
  if (UsPerRound(state, start, &us, &seconds)) {
    // The per-round time, as a rate record keyed by the pair's name.
    ReplayRounds()[std::string(hwy::TargetName(target)) + "/" + std::to_string(keep)].Add(
        us, seconds);
  }
  state.SetItemsProcessed(static_cast<int64_t>(static_cast<double>(state.iterations()) *
                                               kVerifyColumns));
}

// (b) What an engine without replay does: the window token by token through
// Forward, a full copy of the row's state (conv + recurrent) after every
// token, then the copy taken after token `keep` restored as the live state.
// SsmCacheBase has no state setter, so the restore writes the row's active
// buffer through the pointer ConvState() returns (the buffer is
// [conv | recurrent], contiguous). Positions keep counting all 8 tokens;
// that does not change the work.
void RunCheckpointPerToken(benchmark::State& state, int64_t target, int32_t keep) {
  bench::DispatchCheck scope(target, GatedDeltaTargetName, "GatedDeltaStep");
  if (!scope.Check(state)) return;
  const SsmShape shape = Shape(kSpeculationValueHeads);
  SsmCache cache(shape);
  Inputs inputs(shape, 1, kVerifyColumns);
  const ForwardColumns step = ForwardColumns::Dense(1, 1, /*decode=*/true);
  const size_t row_floats = shape.ConvFloats() + shape.RecurrentFloats();
  // [window][conv | recurrent]; checkpoint t is the state after token t + 1.
  std::vector<float> checkpoints(static_cast<size_t>(kVerifyColumns) * row_floats, 0.0f);
  std::vector<SsmIO> ios;
  for (int32_t t = 0; t < kVerifyColumns; ++t) ios.push_back(inputs.Token(shape, t));
  const double start = ProcessSeconds();
  for (auto _ : state) {
    for (int32_t t = 0; t < kVerifyColumns; ++t) {
      if (Failed(state, cache.Forward(step, ios[t]), "Forward")) return;
      std::memcpy(&checkpoints[static_cast<size_t>(t) * row_floats], cache.ConvState(0),
                  row_floats * sizeof(float));
    }
    if (keep > 0) {
      float* live = const_cast<float*>(cache.ConvState(0));
      std::memcpy(live, &checkpoints[static_cast<size_t>(keep - 1) * row_floats],
                  row_floats * sizeof(float));
    }
    benchmark::ClobberMemory();
  }
  double us = 0, seconds = 0;
  if (UsPerRound(state, start, &us, &seconds)) {
    const auto found =
        ReplayRounds().find(std::string(hwy::TargetName(target)) + "/" + std::to_string(keep));
    if (found != ReplayRounds().end() && found->second.Median() > 0) {
      state.counters["checkpoint_over_replay"] = us / found->second.Median();
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(static_cast<double>(state.iterations()) *
                                               kVerifyColumns));
}

// ---------------------------------------------------------------------------
// ConvStep alone, hot, in place as the cache calls it (packed weights and
// the state in the kernel's order, kernels/conv1d.h). K = 1 is the SiLU's
// own cost: one multiply per channel, no state, the same SiLU. With `walk`
// (BM_ConvWalk), bench::ConvTraffic on the same buffers instead: the step's
// loads, stores and multiply-adds without the SiLU, on the same target.
void RunConvStep(benchmark::State& state, int64_t target, size_t channels, size_t kernel,
                 bool walk = false) {
  bench::DispatchCheck scope(target, GatedDeltaTargetName, "GatedDeltaStep");
  if (!scope.Check(state)) return;
  std::vector<float> w(kernel * channels), packed(kernel * channels),
      conv_state((kernel - 1) * channels), x(channels), u(channels);
  Uniform values(0x636F6E76ull);
  values.Fill(&w, -0.5f, 0.5f);
  values.Fill(&conv_state, -1.0f, 1.0f);
  values.Fill(&x, -1.0f, 1.0f);
  PackConvWeights(w.data(), packed.data(), channels, kernel);
  const double start = ProcessSeconds();
  for (auto _ : state) {
    if (walk) {
      bench::ConvTraffic(packed.data(), conv_state.data(), x.data(), u.data(), channels, kernel);
    } else {
      ConvStep(packed.data(), conv_state.data(), conv_state.data(), x.data(), u.data(), channels,
               kernel);
    }
    benchmark::ClobberMemory();
  }
  const double seconds = ProcessSeconds() - start;
  // weights + state read + state written + x + u
  const double bytes =
      static_cast<double>((kernel + 2 * (kernel - 1) + 2) * channels * sizeof(float));
  ReportBandwidth(state, bytes, seconds, /*cold=*/false);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(channels));
  if (state.iterations() > 0) {
    state.counters["us_per_step"] = 1e6 * seconds / static_cast<double>(state.iterations());
  }
}

// ---------------------------------------------------------------------------
// Multi-core decode: BM_DecodeThreads/<target>/<value heads>/<rows>/<threads>
// (cold) and BM_DecodeHotThreads/... (hot), the shapes of BM_Decode and
// BM_DecodeHot with the gated delta step's value heads as tasks on a pool
// of `threads` (SsmIO::pool; 1: one thread, the same code path). Timed on
// the wall clock (/real_time): bytes_per_second per wall second;
// cpu_per_wall = process CPU seconds / wall seconds; us_per_step wall.
void RunForwardThreads(benchmark::State& state, int64_t target, int value_heads, int rows,
                       bool cold, int threads) {
  bench::DispatchCheck scope(target, GatedDeltaTargetName, "GatedDeltaStep");
  if (!scope.Check(state)) return;
  const SsmShape shape = Shape(value_heads);
  const size_t rotate = cold ? ColdCount(shape, rows) : 1;
  const auto& caches = Caches(value_heads, rows, rotate);
  Inputs inputs(shape, rows, 1);
  ThreadPool pool(threads);
  SsmIO io = inputs.All(shape);
  io.pool = &pool;
  const ForwardColumns forward = ForwardColumns::Dense(rows, 1, /*decode=*/true);
  size_t next = 0;
  const bench::WallClock clock;
  for (auto _ : state) {
    const Status s = caches[next]->Forward(forward, io);
    if (Failed(state, s, "Forward")) return;
    next = next + 1 == rotate ? 0 : next + 1;
    benchmark::ClobberMemory();
  }
  clock.Report(state, "us_per_step", threads, rotate);
  const double iterations = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(
      2.0 * static_cast<double>(RowStateBytes(shape)) * rows * iterations));
  state.SetItemsProcessed(static_cast<int64_t>(iterations * rows));
  if (!cold) {
    state.counters["flops"] = benchmark::Counter(
        7.0 * static_cast<double>(shape.RecurrentFloats()) * rows * iterations,
        benchmark::Counter::kIsRate);
  }
}

// The threaded decodes at batch 1 and 8, Hv = 16, for the best target only.
void RegisterThreaded(const std::vector<int64_t>& targets) {
  if (targets.empty()) return;
  const int64_t target = targets.front();
  for (const int rows : kRows) {
    for (const bool cold : {true, false}) {
      for (const int threads : {1, 2}) {
        const std::string name =
            std::string(cold ? "BM_DecodeThreads/" : "BM_DecodeHotThreads/") +
            hwy::TargetName(target);
        benchmark::RegisterBenchmark(name.c_str(),
                                     [target, rows, cold, threads](benchmark::State& state) {
                                       RunForwardThreads(state, target, kSpeculationValueHeads,
                                                         rows, cold, threads);
                                     })
            ->Args({kSpeculationValueHeads, rows, threads})
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

// ---------------------------------------------------------------------------
void RegisterAll() {
  benchmark::RegisterBenchmark("BM_StreamRead", BM_StreamRead)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_StreamReadWrite", BM_StreamReadWrite)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_StreamReadWriteInPlace", BM_StreamReadWriteInPlace)
      ->Unit(benchmark::kMillisecond);

  // Hot probes over one head's state (64 KiB at dk = dv = 128, the block
  // the step passes over twice) and over each shape's row state.
  std::vector<size_t> hot_bytes = {sizeof(float) * static_cast<size_t>(kDim * kDim)};
  for (const int value_heads : kValueHeads) hot_bytes.push_back(RowStateBytes(Shape(value_heads)));
  for (const size_t bytes : hot_bytes) {
    const std::string kib = std::to_string(bytes / 1024);
    benchmark::RegisterBenchmark(("BM_StreamReadHot/" + kib).c_str(),
                                 [bytes](benchmark::State& state) { BM_StreamReadHot(state, bytes); })
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(
        ("BM_StreamReadWriteInPlaceHot/" + kib).c_str(),
        [bytes](benchmark::State& state) { BM_StreamReadWriteInPlaceHot(state, bytes); })
        ->Unit(benchmark::kMicrosecond);
  }

  const std::vector<int64_t> targets = testing::AllTargets();
  for (const int64_t target : targets) {
    benchmark::RegisterBenchmark((std::string("BM_PeakFma/") + hwy::TargetName(target)).c_str(),
                                 [target](benchmark::State& state) { bench::PeakFma(state, target); })
        ->Unit(benchmark::kMillisecond);
  }
  // Shape outermost, so each cold set is built once and shared by the
  // targets and the hot runs of that shape.
  for (const int value_heads : kValueHeads) {
    for (const int rows : kRows) {
      for (const int64_t target : targets) {
        for (const bool cold : {true, false}) {
          const std::string name =
              std::string(cold ? "BM_Decode/" : "BM_DecodeHot/") + hwy::TargetName(target);
          benchmark::RegisterBenchmark(name.c_str(), [target, value_heads, rows,
                                                      cold](benchmark::State& state) {
            RunForward(state, target, value_heads, rows, 1, cold);
          })
              ->Args({value_heads, rows})
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
  for (const int value_heads : kValueHeads) {
    for (const int64_t target : targets) {
      for (const int32_t columns : kWindowColumns) {
        const std::string name = std::string("BM_Window/") + hwy::TargetName(target);
        benchmark::RegisterBenchmark(
            name.c_str(),
            [target, value_heads, columns](benchmark::State& state) {
              RunForward(state, target, value_heads, 1, columns, /*cold=*/false);
            })
            ->Args({value_heads, columns})
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  // Each replay run right before its checkpoint peer, so the ratio counter
  // finds it.
  for (const int64_t target : targets) {
    for (const int32_t keep : kKeeps) {
      const std::string tname = hwy::TargetName(target);
      benchmark::RegisterBenchmark(("BM_RollbackReplay/" + tname).c_str(),
                                   [target, keep](benchmark::State& state) {
                                     RunRollbackReplay(state, target, keep);
                                   })
          ->Arg(keep)
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(("BM_CheckpointPerToken/" + tname).c_str(),
                                   [target, keep](benchmark::State& state) {
                                     RunCheckpointPerToken(state, target, keep);
                                   })
          ->Arg(keep)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  for (const int64_t target : targets) {
    for (const size_t kernel : {static_cast<size_t>(kConvKernel), size_t{1}}) {
      benchmark::RegisterBenchmark(
          ("BM_ConvStep/" + std::string(hwy::TargetName(target))).c_str(),
          [target, kernel](benchmark::State& state) {
            RunConvStep(state, target, kConvChannels, kernel);
          })
          ->Args({static_cast<int64_t>(kConvChannels), static_cast<int64_t>(kernel)})
          ->Unit(benchmark::kMicrosecond);
    }
    benchmark::RegisterBenchmark(
        ("BM_ConvWalk/" + std::string(hwy::TargetName(target))).c_str(),
        [target](benchmark::State& state) {
          RunConvStep(state, target, kConvChannels, kConvKernel, /*walk=*/true);
        })
        ->Args({static_cast<int64_t>(kConvChannels), kConvKernel})
        ->Unit(benchmark::kMicrosecond);
  }
  RegisterThreaded(targets);
}


#ifdef KVSPEC_GGML_PEERS
// ---------------------------------------------------------------------------
// ggml's GATED_DELTA_NET and SSM_CONV + SILU on the same shapes
// (bench/ggml_peers.h). Our BM_Decode[Hot] time a whole Forward (conv step,
// q/k normalisation, gated delta step); the ggml peer times the
// GATED_DELTA_NET op alone, so the ratio understates ours.

// Largest |a - b| over the largest |b|.
float RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  float largest = 0, error = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    largest = std::max(largest, std::fabs(b[i]));
    error = std::max(error, std::fabs(a[i] - b[i]));
  }
  return largest > 0 ? error / largest : error;
}

// The peers compute what our kernels compute: one gated delta step (4 value
// heads = 4 key heads of 128, as ggml maps value head h to key head h % Hk
// and we to h / (Hv / Hk)) against GatedDeltaStep, outputs and states
// within 1e-4 of the largest; one conv step + SiLU over 64 channels, K = 4,
// against ConvStep within 1e-5. Checked once per process; a mismatch fails
// every ggml run.
bool GgmlMatchesKernels(benchmark::State& state) {
  static std::string verdict;  // "" not yet checked, "ok", or the failure
  if (verdict.empty()) {
    verdict = "ok";
    GatedDeltaShape g;
    g.value_heads = 4;
    g.key_heads = 4;
    g.dk = kDim;
    g.dv = kDim;
    const size_t hv = g.value_heads, d = kDim;
    Uniform values(0x636865636Bull);
    std::vector<float> q(hv * d), k(hv * d), v(hv * d), gate(hv), beta(hv), trace(hv * d * d);
    values.Fill(&q, -1.0f, 1.0f);
    values.Fill(&k, -0.1f, 0.1f);
    values.Fill(&v, -1.0f, 1.0f);
    values.Fill(&gate, 0.90f, 0.99f);
    values.Fill(&beta, 0.2f, 0.8f);
    values.Fill(&trace, -0.1f, 0.1f);
    // Ours: q scaled by 1/sqrt(dk) beforehand (PrepareQueryKey's last step),
    // state in kernel order.
    std::vector<float> q_scaled(q), state_in(trace.size()), state_out(trace.size()), y(hv * d);
    for (float& x : q_scaled) x *= 1.0f / std::sqrt(static_cast<float>(d));
    GatedDeltaStateFromTrace(trace.data(), state_in.data(), g);
    GatedDeltaStep(state_in.data(), state_out.data(), q_scaled.data(), k.data(), v.data(),
                   gate.data(), beta.data(), y.data(), g);
    std::vector<float> ours(trace.size());
    GatedDeltaStateToTrace(state_out.data(), ours.data(), g);
    std::vector<float> log_g(hv), ggml_y(hv * d), ggml_state(trace.size());
    for (size_t h = 0; h < hv; ++h) log_g[h] = std::log(gate[h]);
    bench::GgmlDeltaShape shape;
    shape.value_heads = static_cast<int>(hv);
    shape.key_heads = static_cast<int>(hv);
    shape.dim = kDim;
    bench::GgmlDeltaOnce(shape, q.data(), k.data(), v.data(), log_g.data(), beta.data(),
                         trace.data(), ggml_y.data(), ggml_state.data());
    const float ey = RelativeError(ggml_y, y), es = RelativeError(ggml_state, ours);
    if (!(ey <= 1e-4f && es <= 1e-4f)) {
      verdict = "ggml GATED_DELTA_NET differs from GatedDeltaStep: output " + std::to_string(ey) +
                ", state " + std::to_string(es) + " of the largest";
    }
    // Conv: ours w [K][C], state [K-1][C], x [C]; ggml window and weights [C][K].
    const size_t channels = 64, kernel = kConvKernel;
    std::vector<float> w(kernel * channels), conv(( kernel - 1) * channels), x(channels),
        u(channels), window(kernel * channels), wt(kernel * channels), ggml_u(channels);
    values.Fill(&w, -0.5f, 0.5f);
    values.Fill(&conv, -1.0f, 1.0f);
    values.Fill(&x, -1.0f, 1.0f);
    for (size_t c = 0; c < channels; ++c) {
      for (size_t j = 0; j < kernel; ++j) {
        window[c * kernel + j] = j + 1 < kernel ? conv[j * channels + c] : x[c];
        wt[c * kernel + j] = w[j * channels + c];
      }
    }
    std::vector<float> conv_out(conv.size()), packed(w.size()), blocked(conv.size());
    PackConvWeights(w.data(), packed.data(), channels, kernel);
    ConvStateFromTrace(conv.data(), blocked.data(), channels, kernel);
    ConvStep(packed.data(), blocked.data(), conv_out.data(), x.data(), u.data(), channels,
             kernel);
    bench::GgmlConvOnce(channels, kernel, window.data(), wt.data(), ggml_u.data());
    const float eu = RelativeError(ggml_u, u);
    if (verdict == "ok" && !(eu <= 1e-5f)) {
      verdict = "ggml SSM_CONV + SILU differs from ConvStep: " + std::to_string(eu) +
                " of the largest";
    }
  }
  if (verdict == "ok") return true;
  state.SkipWithError(verdict.c_str());
  return false;
}

void RegisterGgmlPeers() {
  for (const int value_heads : kValueHeads) {
    for (const bool cold : {true, false}) {
      bench::GgmlDeltaShape shape;
      shape.value_heads = value_heads;
      shape.key_heads = value_heads / 2;
      shape.dim = kDim;
      benchmark::RegisterBenchmark(cold ? "BM_DecodeGgml" : "BM_DecodeHotGgml",
                                   [shape, cold](benchmark::State& state) {
                                     if (!GgmlMatchesKernels(state)) return;
                                     bench::GgmlDeltaBenchmark(state, shape, cold, kColdBytes);
                                   })
          ->Args({value_heads, 1})
          ->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::RegisterBenchmark("BM_ConvStepGgml", [](benchmark::State& state) {
    if (!GgmlMatchesKernels(state)) return;
    bench::GgmlConvBenchmark(state, kConvChannels, kConvKernel);
  })->Args({static_cast<int64_t>(kConvChannels), kConvKernel})->Unit(benchmark::kMicrosecond);
}
#endif  // KVSPEC_GGML_PEERS

}  // namespace
}  // namespace kvspec

// Called by bench/bench_main.cc.
namespace kvspec::bench {
void RegisterBenchmarks() {
  kvspec::RegisterAll();
#ifdef KVSPEC_GGML_PEERS
  kvspec::RegisterGgmlPeers();
#endif
}
}  // namespace kvspec::bench

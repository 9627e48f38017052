// Benchmarks of kvspec::Attend per Highway target, with the physical limits
// they are bounded by measured in the same run:
// - BM_StreamRead: single-stream read bandwidth over 1 GiB (gcc's SSE2
//   baseline); BM_ReadProbe/<target>/<streams>/<KiB>: 1, 2, 4 or 8 streams
//   read side by side with prefetching, Highway vector loads of the target,
//   over 1 GiB (DRAM) and, 4 streams, over 32 KiB (L1) and 256 KiB (L2);
//   BM_ReadProbeNonTemporal/<target>/<streams>/1048576: the DRAM probes
//   with the lines requested by prefetchnta, as Attend requests some rows.
//   The read limit of a cold run (decode attention reads every admitted key
//   and value once) is the best of the DRAM probes, StreamRead and
//   BM_DecodeWalk of the same shape. BM_StreamReadWrite: read+write
//   bandwidth (in-place update of 1 GiB, both directions counted);
//   BM_PeakFma/<target>: peak FP32 multiply-add rate of one core on that
//   target (the limit of window attention over many queries).
// - BM_Decode/<target>/<f32|bf16|q8_0|q4_0>/<head dim>/<cache length>: one
//   decode query over a batched KV cache of 8 KV heads x 4 query heads each
//   (32 query heads), cold (rotating through at least 1 GiB of distinct
//   caches, as when a model decodes through many layers); BM_DecodeHot: the
//   same shape on one cache reused. bf16: the same keys and values stored as
//   bfloat16 (KvView::k_bf16), half the bytes; q8_0 and q4_0: quantized
//   into ggml's blocks (kernels/quantize.h), 34 and 18 bytes per 32 values.
// - BM_Quantize/<target>/<q8_0|q4_0>/<head dim>: one token written (its
//   keys and values of 8 KV heads quantized, bench/quantize_bench.cc);
//   BM_QuantizeGgml/...: ggml's CPU quantize_row_q8_0 / _q4_0 on the same.
// - BM_DecodeBlas/f32/<head dim>/<cache length>: the peer, decode written
//   the way a user who knows GQA would with OpenBLAS (single-threaded): per
//   KV head, one cblas_sgemm for the scores of its 4 query heads, a softmax,
//   one cblas_sgemm for their outputs.
// - BM_DecodeWalk/<f32|bf16>/<head dim>/<cache length>: the decode's memory
//   walk over the same cold caches (rows in the same blocks and order, the
//   next block prefetched) with no arithmetic: what the access pattern alone
//   reaches, the decode's ceiling on this core.
// - BM_DecodeFmaWalk/<f32|bf16>/<head dim>/<cache length>: the same walk
//   with the decode's multiply-adds (4 query heads per row, 16 accumulators)
//   and the requests Attend makes on this CPU, without its lane sums,
//   softmax or gather: what the decode's loads and arithmetic alone reach in
//   its order (report.py's bound row for the 0.85 goal).
// - BM_DecodeFmaWalk4/<f32|bf16>/<head dim>/<cache length>: the FmaWalk's
//   work with each head's keys and values in four segments side by side
//   (four sequential streams): a bound for a design Attend does not take.
// - BM_DecodeSliding/<target>/f32/<head dim>/<cache length>/<window>: a
//   decode through a sliding window of 4096 over a longer plain cache: cost
//   should follow the visible length (masked-out slots are never read).
// - BM_DecodeRing/<target>/<length>/<wrapped 0|1>: a rotating cache read in
//   place, full but not wrapped against wrapped at phase ~1/2.
// - BM_Window[Hot]/<target>/<context>/<L>: a forward of L causal queries
//   after `context` stored tokens.
// - BM_DecodeThreads, BM_DecodeHotThreads/<target>/<f32|bf16>/<head dim>/
//   <length>/<threads>/real_time: decode on a pool of 1 or 2 threads
//   (flash-decoding; see RunAttentionThreads), wall-clock rates.
// The label is the target Attend really dispatched to.
//
// Counters: bytes_per_second counts the K and V bytes of the admitted slots
// once per call (the least a kernel must read); items_per_second counts
// attended (query, slot) pairs. read_fraction (cold runs of kvspec only:
// not hot runs, the peer or the walks, which give GB/s) = bytes_per_second
// over the read limit above, medians of this process; fma_fraction (window
// benchmarks) =
// flops per second (4 * head_dim per query head and attended pair) over
// BM_PeakFma of the same target. They appear only when the limit ran
// first in the same process (it is registered first, so it does unless a
// filter excludes it). Rates are per CPU second; run pinned (bench/run).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <time.h>

#ifdef KVSPEC_GGML_PEERS
#include "kvspec/bench/ggml_peers.h"
#endif
#include "kvspec/bench/limits.h"
#include "kvspec/bench/records.h"
#include "kvspec/bench/dispatch_check.h"
#include "kvspec/kernels/aligned_vector.h"
#include "kvspec/kernels/attention.h"
#include "kvspec/kernels/kv_blocks.h"
#include "kvspec/kernels/quantize.h"
#include "kvspec/kernels/thread_pool.h"
#include "kvspec/core/cache.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/mask_builder.h"
#include "hwy/targets.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace kvspec {
namespace {

using bench::FmaRecords;
using bench::ProcessSeconds;
using bench::Record;
using bench::Values;

// The head shape of every attention benchmark: 8 KV heads, 4 query heads
// each (a GQA layer of a 7-8B model at head dim 128).
constexpr int kKvHeads = 8;
constexpr int kGroup = 4;
constexpr int kQueryHeads = kKvHeads * kGroup;
constexpr int kRows = 1;

constexpr size_t kGiB = size_t{1} << 30;
// Distinct K+V bytes a cold benchmark rotates through.
constexpr size_t kColdBytes = kGiB;
// Bound on the caches of one cold set (reached only by tiny caches).
constexpr size_t kMaxColdCaches = 512;

constexpr int kHeadDims[] = {64, 128, 256};
constexpr int32_t kDecodeLengths[] = {4096, 16384, 32768};
constexpr int32_t kHotLengths[] = {512, 4096};
constexpr int32_t kRingLengths[] = {4096, 32768};
constexpr int32_t kWindowContext = 1024;
constexpr int32_t kWindowColumns[] = {16, 64, 128, 512};
constexpr int kDefaultDim = 128;

// The storage of keys and values: fp32, bf16, or ggml's q8_0 and q4_0 blocks.
enum class DType { kF32 = 0, kBF16 = 1, kQ8_0 = 2, kQ4_0 = 3 };
KvType KvTypeOf(DType t) {
  const KvType types[] = {KvType::kF32, KvType::kBf16, KvType::kQ8_0, KvType::kQ4_0};
  return types[static_cast<int>(t)];
}
const char* DTypeName(DType t) { return KvTypeName(KvTypeOf(t)); }
// Bytes of `values` stored values (a multiple of 32 for q8_0 and q4_0).
size_t DTypeBytes(DType t, size_t values) {
  return KvRowBytes(KvTypeOf(t), static_cast<int>(values));
}

// How the cache of a case stores its tokens.
enum class Storage { kPlain = 0, kRingFull = 1, kRingWrapped = 2 };

struct Shape {
  int32_t context = -1;  // tokens stored before the forward
  int32_t columns = -1;  // L of the forward
  Storage storage = Storage::kPlain;
  int dim = kDefaultDim;
  DType dtype = DType::kF32;
  int32_t window = kNoWindow;  // a sliding window applied by the mask
  bool operator!=(const Shape& o) const {
    return context != o.context || columns != o.columns || storage != o.storage ||
           dim != o.dim || dtype != o.dtype || window != o.window;
  }
};

// One cache that has just taken a forward of `columns` columns, with the
// mask of that forward. The cache is built through the public API (append,
// then the forward's mask over its slot positions); its storage is then
// copied (fp32) or converted (bf16) into arrays the case owns, with the
// same strides, and the cache is released.
struct AttentionCase {
  AlignedVector<float> k, v;  // 64-byte aligned, as the library's caches
  AlignedVector<uint16_t> k16, v16;
  AlignedVector<BlockQ8_0> k8, v8;
  AlignedVector<BlockQ4_0> k4, v4;
  std::vector<int32_t> slot_pos;
  KvView view;
  Mask mask;
};

// The one large working set alive at a time (a set of caches of one shape,
// or a bandwidth buffer), so that the process stays near 1.3 GiB whatever
// the filter. Repetitions of one benchmark and the targets of one shape
// (registered next to each other) reuse it; it is built lazily.
struct WorkingSet {
  Shape shape;
  std::vector<std::unique_ptr<AttentionCase>> cases;
  AlignedVector<uint64_t> stream;  // the bandwidth probes' buffer (64-byte aligned)
};

WorkingSet& Resident() {
  static WorkingSet* set = new WorkingSet();  // never destroyed: no exit-order issues
  return *set;
}

size_t KvBytesPerToken(int dim, DType dtype) {
  return static_cast<size_t>(kRows) * kKvHeads * 2 * DTypeBytes(dtype, static_cast<size_t>(dim));
}

// Rings (window = capacity = context + columns, so every stored token is
// visible to the decode): kRingFull holds exactly `capacity` columns (full,
// not wrapped, phase 0); kRingWrapped first takes half a ring more, so the
// decode reads a wrapped ring in place at phase ~1/2.
std::unique_ptr<AttentionCase> MakeCase(const Shape& shape, const std::vector<float>& k,
                                        const std::vector<float>& v) {
  const int32_t total = shape.context + shape.columns;
  std::unique_ptr<ColumnStore> cache;
  Status appended;
  if (shape.storage == Storage::kPlain) {
    cache = std::make_unique<BatchedKvCache>(kRows, kKvHeads, shape.dim);
  } else {
    cache = std::make_unique<BatchedRotatingCache>(kRows, kKvHeads, shape.dim, total, total);
    if (shape.storage == Storage::kRingWrapped) {
      appended = cache->Append(ForwardColumns::Dense(kRows, total / 2), k.data(), v.data());
    }
  }
  if (appended.ok()) {
    appended = cache->Append(ForwardColumns::Dense(kRows, total), k.data(), v.data());
  }
  if (!appended.ok()) {
    std::fprintf(stderr, "attention_bench: Append failed: %s\n", appended.message().c_str());
    std::abort();
  }
  auto c = std::make_unique<AttentionCase>();
  const KvView view = cache->View();
  const ForwardColumns forward =
      ForwardColumns::Dense(kRows, shape.columns, /*decode=*/shape.columns == 1);
  c->mask = BuildMask(forward, cache->positions(),
                      shape.window != kNoWindow ? shape.window : cache->window(), view);
  const size_t elements = view.row_stride * static_cast<size_t>(view.rows);
  c->slot_pos.assign(view.slot_pos, view.slot_pos + view.slot_stride * view.rows);
  c->view = view;
  c->view.slot_pos = c->slot_pos.data();
  c->mask.slot_pos = c->slot_pos.data();
  if (shape.dtype == DType::kF32) {
    c->k.assign(view.k, view.k + elements);
    c->v.assign(view.v, view.v + elements);
    c->view.k = c->k.data();
    c->view.v = c->v.data();
  } else if (shape.dtype == DType::kBF16) {
    c->k16.resize(elements);
    c->v16.resize(elements);
    for (size_t i = 0; i < elements; ++i) {
      c->k16[i] = FloatToBf16(view.k[i]);
      c->v16[i] = FloatToBf16(view.v[i]);
    }
    c->view.k = nullptr;
    c->view.v = nullptr;
    c->view.k_bf16 = c->k16.data();
    c->view.v_bf16 = c->v16.data();
  } else {
    // Every stored row (held or not) quantized once, as a cache writes it.
    const size_t blocks = elements / kKvBlockValues;
    const bool q8 = shape.dtype == DType::kQ8_0;
    if (q8) {
      c->k8.resize(blocks);
      c->v8.resize(blocks);
    } else {
      c->k4.resize(blocks);
      c->v4.resize(blocks);
    }
    const size_t per_row = static_cast<size_t>(shape.dim) / kKvBlockValues;
    for (size_t row = 0; row < elements / static_cast<size_t>(shape.dim); ++row) {
      const float* krow = view.k + row * shape.dim;
      const float* vrow = view.v + row * shape.dim;
      void* kd = q8 ? static_cast<void*>(&c->k8[row * per_row]) : &c->k4[row * per_row];
      void* vd = q8 ? static_cast<void*>(&c->v8[row * per_row]) : &c->v4[row * per_row];
      if (!StoreKvRow(KvTypeOf(shape.dtype), krow, shape.dim, kd).ok() ||
          !StoreKvRow(KvTypeOf(shape.dtype), vrow, shape.dim, vd).ok()) {
        std::fprintf(stderr, "attention_bench: StoreKvRow refused dim %d\n", shape.dim);
        std::abort();
      }
    }
    c->view.k = nullptr;
    c->view.v = nullptr;
    c->view.k_q8_0 = q8 ? c->k8.data() : nullptr;
    c->view.v_q8_0 = q8 ? c->v8.data() : nullptr;
    c->view.k_q4_0 = q8 ? nullptr : c->k4.data();
    c->view.v_q4_0 = q8 ? nullptr : c->v4.data();
  }
  return c;
}

// At least `count` caches of the shape, each in its own memory. Frees the
// previous working set when the shape differs.
const std::vector<std::unique_ptr<AttentionCase>>& Cases(const Shape& shape, size_t count) {
  WorkingSet& set = Resident();
  if (set.shape != shape) {
    set = WorkingSet();  // releases caches and the stream buffer first
    set.shape = shape;
  }
  if (set.cases.size() < count) {
    // [rows][context + columns][kv_heads][dim]: the same values for every
    // cache of the set; what matters for a cold read is distinct memory.
    const size_t elements = static_cast<size_t>(kRows) * (shape.context + shape.columns) *
                            kKvHeads * static_cast<size_t>(shape.dim);
    std::vector<float> k(elements), v(elements);
    Values values(0x6B767370656331ull + static_cast<uint64_t>(shape.context) * 131 +
                  static_cast<uint64_t>(shape.columns));
    values.Fill(&k);
    values.Fill(&v);
    set.cases.reserve(count);
    while (set.cases.size() < count) set.cases.push_back(MakeCase(shape, k, v));
  }
  return set.cases;
}

// Caches a cold benchmark of this shape rotates through: >= kColdBytes.
size_t ColdCount(const Shape& shape) {
  const size_t bytes = static_cast<size_t>(shape.context + shape.columns) *
                       KvBytesPerToken(shape.dim, shape.dtype);
  const size_t count = (kColdBytes + bytes - 1) / bytes;
  return std::min(std::max<size_t>(count, 2), kMaxColdCaches);
}

// K+V bytes of the slots the mask admits, counting each slot once, and the
// admitted (query, slot) pairs; the same for every case of a set.
void CountWork(const AttentionCase& c, const Shape& shape, double* bytes, double* pairs) {
  std::vector<char> any(static_cast<size_t>(c.mask.slots), 0);
  double n = 0;
  for (int r = 0; r < c.mask.rows; ++r) {
    for (int32_t q = 0; q < c.mask.queries; ++q) {
      for (int32_t s = 0; s < c.mask.slots; ++s) {
        if (c.mask.Admits(r, q, s)) {
          n += 1;
          any[s] = 1;
        }
      }
    }
  }
  const double slots = static_cast<double>(std::count(any.begin(), any.end(), 1));
  *bytes = slots * static_cast<double>(KvBytesPerToken(shape.dim, shape.dtype) / kRows);
  *pairs = n;
}

Record& StreamRecord() {
  static Record* record = new Record();
  return *record;
}
const AlignedVector<uint64_t>& StreamBuffer() {
  WorkingSet& set = Resident();
  if (set.stream.empty()) {
    set = WorkingSet();  // drop any caches before allocating another GiB
    set.stream.resize(kColdBytes / sizeof(uint64_t));
    for (size_t i = 0; i < set.stream.size(); ++i) set.stream[i] = i * 0x9E3779B97F4A7C15ull;
  }
  return set.stream;
}

// Sums a buffer of kColdBytes: four independent integer accumulators, which
// gcc vectorizes at the baseline (SSE2) without any reassociation license.
void BM_StreamRead(benchmark::State& state) {
  const AlignedVector<uint64_t>& buffer = StreamBuffer();
  const uint64_t* data = buffer.data();
  const size_t n = buffer.size();
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
  if (seconds > 0) StreamRecord().Add(bytes / seconds, seconds);
}

// Adds one to every word of a kColdBytes buffer in place; counts the bytes
// read and the bytes written.
void BM_StreamReadWrite(benchmark::State& state) {
  AlignedVector<uint64_t>& buffer = const_cast<AlignedVector<uint64_t>&>(StreamBuffer());
  uint64_t* data = buffer.data();
  const size_t n = buffer.size();
  for (auto _ : state) {
    for (size_t i = 0; i < n; ++i) data[i] += 1;
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(2.0 * static_cast<double>(state.iterations()) *
                                               static_cast<double>(kColdBytes)));
}

// ---------------------------------------------------------------------------


// BM_DecodeWalk's rates by shape.
std::map<std::string, Record>& WalkRecords() {
  static auto* records = new std::map<std::string, Record>();
  return *records;
}
std::string ShapeKey(const Shape& shape) {
  return std::to_string(shape.context) + "/" + std::to_string(shape.columns) + "/" +
         std::to_string(static_cast<int>(shape.storage)) + "/" + std::to_string(shape.dim) + "/" +
         DTypeName(shape.dtype) + "/" + std::to_string(shape.window);
}

// The read limit of a cold run of `shape`: the best of the read probes
// (BM_ReadProbe over 1 GiB, BM_StreamRead) and of BM_DecodeWalk of the same
// shape run so far in this process; 0 before any.
double ReadLimit(const Shape& shape) {
  double limit = std::max(bench::BestDramRead(), StreamRecord().Median());
  const auto walk = WalkRecords().find(ShapeKey(shape));
  if (walk != WalkRecords().end()) limit = std::max(limit, walk->second.Median());
  return limit;
}

// Sets bytes_per_second and items_per_second from the K+V bytes and the
// attended pairs of one call, and read_fraction (bytes per second over
// `limit`) when `limit` is positive: cold runs only.
void ReportReads(benchmark::State& state, double bytes, double pairs, double seconds,
                 double limit) {
  const double iterations = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(bytes * iterations));
  state.SetItemsProcessed(static_cast<int64_t>(pairs * iterations));
  if (limit > 0 && seconds > 0) {
    state.counters["read_fraction"] = bytes * iterations / seconds / limit;
  }
}

// Attend over the caches of one shape: ColdCount of them in turn (cold) or
// the first one only (hot).
// What an Attend benchmark of one shape runs over: the caches it rotates
// through, the queries and outputs ([rows][columns][q_heads][dim]) and the
// work of one call.
struct AttentionRun {
  AttentionRun(const Shape& shape, bool cold)
      : rotate(cold ? ColdCount(shape) : 1), cases(Cases(shape, rotate)) {
    const size_t q_elements =
        static_cast<size_t>(kRows) * shape.columns * kQueryHeads * static_cast<size_t>(shape.dim);
    q.resize(q_elements);
    out.resize(q_elements);
    Values values(0x71756572790ull + static_cast<uint64_t>(shape.columns));
    values.Fill(&q);
    CountWork(*cases[0], shape, &bytes, &pairs);
  }
  // The case of the next call: each in turn.
  const AttentionCase& Next() {
    const AttentionCase& c = *cases[next];
    next = next + 1 == rotate ? 0 : next + 1;
    return c;
  }
  const size_t rotate;
  const std::vector<std::unique_ptr<AttentionCase>>& cases;
  std::vector<float> q, out;
  double bytes = 0, pairs = 0;
  size_t next = 0;
};

void RunAttention(benchmark::State& state, int64_t target, const Shape& shape, bool cold) {
  bench::DispatchCheck scope(target, AttentionTargetName, "Attend");
  if (!scope.Check(state)) return;
  AttentionRun run(shape, cold);
  const double start = ProcessSeconds();
  for (auto _ : state) {
    const AttentionCase& c = run.Next();
    Attend(run.q.data(), kQueryHeads, c.view, c.mask, run.out.data());
    benchmark::DoNotOptimize(run.out.data());
    benchmark::ClobberMemory();
  }
  const double seconds = ProcessSeconds() - start;
  const double iterations = static_cast<double>(state.iterations());
  ReportReads(state, run.bytes, run.pairs, seconds, cold ? ReadLimit(shape) : 0.0);
  if (shape.columns > 1 && seconds > 0) {
    // q.k and w.v: a multiply-add (2 flops) per lane each, per query head
    // (all kQueryHeads of them) and attended (query, slot) pair.
    const double flops = run.pairs * iterations * kQueryHeads * 4.0 * shape.dim;
    state.counters["flops"] = benchmark::Counter(flops, benchmark::Counter::kIsRate);
    const auto fma = FmaRecords().find(scope.dispatched());
    if (fma != FmaRecords().end() && fma->second.Median() > 0) {
      state.counters["fma_fraction"] = flops / seconds / fma->second.Median();
    }
  }
  state.counters["caches"] = static_cast<double>(run.rotate);
}

// Runs `peer` (which writes kQueryHeads * dim outputs of a decode of `q`
// over case `c`) and Attend on the same case, and fails the benchmark when
// an output differs by more than tolerance times the largest |output| of
// Attend (decode outputs are averages of values in [-1, 1), far below 1).
template <typename Peer>
bool PeerMatchesAttend(benchmark::State& state, const char* name, const std::vector<float>& q,
                       Peer peer, const AttentionCase& c, float tolerance) {
  std::vector<float> want(q.size()), got(q.size());
  Attend(q.data(), kQueryHeads, c.view, c.mask, want.data());
  peer(got.data());
  float largest = 0;
  for (const float x : want) largest = std::max(largest, std::fabs(x));
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= tolerance * largest)) {
      const std::string message = std::string(name) + " differs from Attend at output " +
                                  std::to_string(i) + ": " + std::to_string(got[i]) + " vs " +
                                  std::to_string(want[i]);
      state.SkipWithError(message.c_str());
      return false;
    }
  }
  return true;
}

// The peer: decode as a user who knows grouped-query attention writes it
// with OpenBLAS (one thread): per KV head, the scores of that head's kGroup
// query heads in one sgemm (S = Q K^T / sqrt(dim), kGroup x slots), a
// softmax per query head, then one sgemm for the outputs (O = W V, rows
// scaled by 1 / sum), so each key and value row is read once per call, as
// Attend reads it. Keys and values of every slot (a decode admits them all)
// are read straight from the cache's [heads][slots][dim] storage.
void BM_DecodeBlas(benchmark::State& state, const Shape& shape) {
  openblas_set_num_threads(1);
  const size_t rotate = ColdCount(shape);
  const auto& cases = Cases(shape, rotate);
  const size_t q_elements = static_cast<size_t>(kRows) * kQueryHeads * shape.dim;
  std::vector<float> q(q_elements), out(q_elements);
  Values values(0x71756572790ull + 1);
  values.Fill(&q);
  double bytes = 0, pairs = 0;
  CountWork(*cases[0], shape, &bytes, &pairs);
  const int n = cases[0]->view.slots;
  const int dim = shape.dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  std::vector<float> w(static_cast<size_t>(kGroup) * static_cast<size_t>(n));
  const auto decode = [&](const AttentionCase& c) {
    for (int kh = 0; kh < kKvHeads; ++kh) {
      const float* k = c.view.Key(0, kh, 0);
      const float* v = c.view.Value(0, kh, 0);
      const float* qg = &q[static_cast<size_t>(kh * kGroup) * dim];
      float* og = &out[static_cast<size_t>(kh * kGroup) * dim];
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, kGroup, n, dim, scale, qg, dim, k, dim,
                  0.0f, w.data(), n);
      float inverse[kGroup];
      for (int g = 0; g < kGroup; ++g) {
        float* wg = &w[static_cast<size_t>(g) * n];
        const float max = *std::max_element(wg, wg + n);
        float sum = 0;
        for (int t = 0; t < n; ++t) {
          wg[t] = std::exp(wg[t] - max);
          sum += wg[t];
        }
        inverse[g] = 1.0f / sum;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kGroup, dim, n, 1.0f, w.data(), n, v,
                  dim, 0.0f, og, dim);
      for (int g = 0; g < kGroup; ++g) {
        cblas_sscal(dim, inverse[g], og + static_cast<size_t>(g) * dim, 1);
      }
    }
  };
  // The peer computes what Attend computes (checked once per shape).
  if (!PeerMatchesAttend(state, "BM_DecodeBlas", q, [&](float* o) {
        decode(*cases[0]);
        std::copy(out.begin(), out.end(), o);
      }, *cases[0], 1e-4f)) {
    return;
  }
  size_t next = 0;
  const double start = ProcessSeconds();
  for (auto _ : state) {
    const AttentionCase& c = *cases[next];
    next = next + 1 == rotate ? 0 : next + 1;
    decode(c);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double seconds = ProcessSeconds() - start;
  ReportReads(state, bytes, pairs, seconds, 0.0);
  state.counters["caches"] = static_cast<double>(rotate);
}

// A case's keys and values, as bytes of the shape's storage (fp32 or bf16).
std::array<const char*, 2> KvBytes(const AttentionCase& c, DType dtype) {
  if (dtype == DType::kF32) {
    return {reinterpret_cast<const char*>(c.view.k), reinterpret_cast<const char*>(c.view.v)};
  }
  return {reinterpret_cast<const char*>(c.view.k_bf16),
          reinterpret_cast<const char*>(c.view.v_bf16)};
}

// The frame of the decode's walks: per iteration, the next cold case of the
// rotation, and per KV head walk(first row of its keys, true), then
// walk(first row of its values, false), rows dim elements of the shape's
// storage apart, as the decode reads them. Reports the reads as the decode
// does and returns the bytes of one call and the CPU seconds of the loop.
template <typename Walk>
std::pair<double, double> WalkEveryHead(benchmark::State& state, const Shape& shape,
                                        Walk&& walk) {
  const size_t rotate = ColdCount(shape);
  const auto& cases = Cases(shape, rotate);
  double bytes = 0, pairs = 0;
  CountWork(*cases[0], shape, &bytes, &pairs);
  const size_t head_bytes = DTypeBytes(shape.dtype, cases[0]->view.head_stride);
  size_t next = 0;
  const double start = ProcessSeconds();
  for (auto _ : state) {
    const AttentionCase& c = *cases[next];
    next = next + 1 == rotate ? 0 : next + 1;
    const auto bases = KvBytes(c, shape.dtype);
    for (int kh = 0; kh < kKvHeads; ++kh) {
      const size_t at = static_cast<size_t>(kh) * head_bytes;
      walk(bases[0] + at, /*keys=*/true);
      walk(bases[1] + at, /*keys=*/false);
    }
  }
  const double seconds = ProcessSeconds() - start;
  ReportReads(state, bytes, pairs, seconds, 0.0);
  state.counters["caches"] = static_cast<double>(rotate);
  return {bytes, seconds};
}

// The slots of the shape's cold cases.
size_t ColdSlots(const Shape& shape) {
  return static_cast<size_t>(Cases(shape, ColdCount(shape))[0]->view.slots);
}

// The decode's memory walk without its arithmetic: per KV head, the keys
// then the values of every slot, in blocks of 8 KiB of rows in slot order,
// the next block's rows prefetched one per row read (as Attend does, but
// into L1 where Attend asks for L2: the walk with Attend's hint was not
// faster), one 4-byte load per 64-byte line. What the access pattern alone reaches on
// this core: part of the decode's read limit when it beats the probes.
void BM_DecodeWalk(benchmark::State& state, const Shape& shape) {
  const size_t row_bytes = DTypeBytes(shape.dtype, static_cast<size_t>(shape.dim));
  const size_t slots = ColdSlots(shape);
  const size_t block = std::max<size_t>(8, 8192 / row_bytes);
  uint64_t sum = 0;
  const auto [bytes, seconds] = WalkEveryHead(state, shape, [&](const char* head, bool /*keys*/) {
    for (size_t t0 = 0; t0 < slots; t0 += block) {
      const size_t t1 = std::min(slots, t0 + block);
      for (size_t t = t0; t < t1; ++t) {
        if (t + block < slots) {
          const char* ahead = head + (t + block) * row_bytes;
          for (size_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(ahead + b);
        }
        const char* row = head + t * row_bytes;
        for (size_t b = 0; b < row_bytes; b += 64) {
          uint32_t word;
          std::memcpy(&word, row + b, sizeof(word));
          sum += word;
        }
      }
    }
    benchmark::DoNotOptimize(sum);
  });
  WalkRecords()[ShapeKey(shape)].AddRate(bytes * static_cast<double>(state.iterations()), seconds);
}

// The decode's loads and multiply-adds alone, in Attend's order, with the
// requests Attend makes on this CPU: per KV head, the keys in four
// segments side by side (bench::DecodeTrafficInSegments) where Attend
// reads them so (AttentionScoresInSegments), else in the walk's order
// (bench::DecodeTraffic), then the values in the walk's order; every vector
// loaded and multiplied into the group's accumulators, without the lane
// sums, the softmax or the gather of admitted slots. Reported as the bound
// of the decode's goals it misses.
void BM_DecodeFmaWalk(benchmark::State& state, const Shape& shape) {
  const size_t slots = ColdSlots(shape) / 4 * 4;
  const size_t dim = static_cast<size_t>(shape.dim);
  const bool bf16 = shape.dtype != DType::kF32;
  const bool segments =
      AttentionScoresInSegments() &&
      DTypeBytes(shape.dtype, dim) < AttentionRequestsOn(bf16).segments_below;
  const std::vector<float> q(static_cast<size_t>(kGroup) * shape.dim, 0.01f);
  float sum = 0;
  WalkEveryHead(state, shape, [&](const char* head, bool keys) {
    sum += keys && segments ? bench::DecodeTrafficInSegments(head, bf16, slots, dim, q.data())
                            : bench::DecodeTraffic(head, bf16, slots, dim, q.data());
    benchmark::DoNotOptimize(sum);
  });
}

// The FmaWalk's loads and multiply-adds with the values of each head, as
// well as its keys, in four segments read side by side
// (bench::DecodeTrafficInSegments): what the same work reaches from four
// sequential streams for both. A bound for a design that sums each
// output's values in four segments (Attend sums them in slot order).
void BM_DecodeFmaWalk4(benchmark::State& state, const Shape& shape) {
  const size_t slots = ColdSlots(shape) / 4 * 4;
  const bool bf16 = shape.dtype != DType::kF32;
  const std::vector<float> q(static_cast<size_t>(kGroup) * shape.dim, 0.01f);
  float sum = 0;
  WalkEveryHead(state, shape, [&](const char* head, bool /*keys*/) {
    sum += bench::DecodeTrafficInSegments(head, bf16, slots, static_cast<size_t>(shape.dim),
                                          q.data());
    benchmark::DoNotOptimize(sum);
  });
}

// ---------------------------------------------------------------------------
// Multi-core decode (flash-decoding, kernels/attention.h AttendOptions):
// BM_DecodeThreads/<target>/<f32|bf16>/<head dim>/<length>/<threads> (cold)
// and BM_DecodeHotThreads/... (hot), the shapes of BM_Decode and
// BM_DecodeHot, chunks of kAttendDecodeChunk admitted slots on a pool of
// `threads` (1: the same chunked arithmetic on one thread). Timed on the
// wall clock (Google Benchmark appends /real_time): bytes_per_second per
// wall second; cpu_per_wall = process CPU seconds / wall seconds (at most
// the thread count; lower when the machine's other load takes the cores);
// us_per_call wall microseconds per decode.
void RunAttentionThreads(benchmark::State& state, int64_t target, const Shape& shape, bool cold,
                         int threads) {
  bench::DispatchCheck scope(target, AttentionTargetName, "Attend");
  if (!scope.Check(state)) return;
  AttentionRun run(shape, cold);
  ThreadPool pool(threads);
  AttendOptions options;
  options.pool = &pool;
  options.chunk = kAttendDecodeChunk;
  const bench::WallClock clock;
  for (auto _ : state) {
    const AttentionCase& c = run.Next();
    AttendWith(run.q.data(), kQueryHeads, c.view, c.mask, run.out.data(), options);
    benchmark::DoNotOptimize(run.out.data());
    benchmark::ClobberMemory();
  }
  clock.Report(state, "us_per_call", threads, run.rotate);
  const double iterations = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(run.bytes * iterations));
  state.SetItemsProcessed(static_cast<int64_t>(run.pairs * iterations));
}

// The threaded decodes, for the best target only (the others scale alike).
void RegisterThreaded(const std::vector<int64_t>& targets) {
  if (targets.empty()) return;
  const int64_t target = targets.front();
  for (const bool cold : {true, false}) {
    const std::vector<int32_t> lengths =
        cold ? std::vector<int32_t>{16384, 32768}
             : std::vector<int32_t>(std::begin(kHotLengths), std::end(kHotLengths));
    for (const int32_t length : lengths) {
      for (const DType dtype : {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
        Shape shape;
        shape.context = length - 1;
        shape.columns = 1;
        shape.dim = kDefaultDim;
        shape.dtype = dtype;
        for (const int threads : {1, 2}) {
          const std::string name =
              std::string(cold ? "BM_DecodeThreads/" : "BM_DecodeHotThreads/") +
              hwy::TargetName(target) + "/" + DTypeName(dtype);
          benchmark::RegisterBenchmark(name.c_str(),
                                       [target, shape, cold, threads](benchmark::State& state) {
                                         RunAttentionThreads(state, target, shape, cold, threads);
                                       })
              ->Args({kDefaultDim, length, threads})
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
}

void RegisterAll() {
  benchmark::RegisterBenchmark("BM_StreamRead", BM_StreamRead)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_StreamReadWrite", BM_StreamReadWrite)
      ->Unit(benchmark::kMillisecond);
  const std::vector<int64_t> targets = testing::AllTargets();
  for (const int64_t target : targets) {
    benchmark::RegisterBenchmark((std::string("BM_PeakFma/") + hwy::TargetName(target)).c_str(),
                                 [target](benchmark::State& state) { bench::PeakFma(state, target); })
        ->Unit(benchmark::kMillisecond);
  }
  // The read probes: 1, 2, 4 and 8 streams over 1 GiB (DRAM), 4 streams
  // over 32 KiB (L1) and 256 KiB (L2), every target; then the DRAM probes
  // with the lines requested non-temporally, as Attend requests some of its
  // rows on some CPUs (AttentionRequestsOn).
  for (const bool non_temporal : {false, true}) {
    for (const int64_t target : targets) {
      for (const int streams : {1, 2, 4, 8, -32, -256}) {
        if (non_temporal && streams < 0) continue;
        const size_t bytes =
            streams > 0 ? kColdBytes : size_t{1024} * static_cast<size_t>(-streams);
        const int n = streams > 0 ? streams : 4;
        const std::string name = std::string(non_temporal ? "BM_ReadProbeNonTemporal/"
                                                           : "BM_ReadProbe/") +
                                 hwy::TargetName(target) + "/" + std::to_string(n) + "/" +
                                 std::to_string(bytes / 1024);
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) {
          const AlignedVector<uint64_t>& buffer = StreamBuffer();
          bench::ReadProbe(state, target, buffer.data(), bytes, n, non_temporal);
        })->Unit(bytes >= bench::kDramProbeBytes ? benchmark::kMillisecond
                                                 : benchmark::kNanosecond);
      }
    }
  }

  // Shape outermost, so each working set is built once per process and
  // shared by every target's benchmark of that shape (and by the peer).
  const auto decode = [&](int dim, DType dtype, int32_t length, bool cold) {
    Shape shape;
    shape.context = length - 1;
    shape.columns = 1;
    shape.dim = dim;
    shape.dtype = dtype;
    if (cold && dtype == DType::kF32) {
      benchmark::RegisterBenchmark("BM_DecodeBlas/f32",
                                   [shape](benchmark::State& state) { BM_DecodeBlas(state, shape); })
          ->Args({dim, length})
          ->Unit(benchmark::kMicrosecond);
    }
    if (cold && (dtype == DType::kF32 || dtype == DType::kBF16)) {  // the walks read f32 or bf16
      benchmark::RegisterBenchmark((std::string("BM_DecodeWalk/") + DTypeName(dtype)).c_str(),
                                   [shape](benchmark::State& state) { BM_DecodeWalk(state, shape); })
          ->Args({dim, length})
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(
          (std::string("BM_DecodeFmaWalk/") + DTypeName(dtype)).c_str(),
          [shape](benchmark::State& state) { BM_DecodeFmaWalk(state, shape); })
          ->Args({dim, length})
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(
          (std::string("BM_DecodeFmaWalk4/") + DTypeName(dtype)).c_str(),
          [shape](benchmark::State& state) { BM_DecodeFmaWalk4(state, shape); })
          ->Args({dim, length})
          ->Unit(benchmark::kMicrosecond);
    }
    for (const int64_t target : targets) {
      const std::string name = std::string(cold ? "BM_Decode/" : "BM_DecodeHot/") +
                               hwy::TargetName(target) + "/" + DTypeName(dtype);
      benchmark::RegisterBenchmark(name.c_str(),
                                   [target, shape, cold](benchmark::State& state) {
                                     RunAttention(state, target, shape, cold);
                                   })
          ->Args({dim, length})
          ->Unit(benchmark::kMicrosecond);
    }
  };
  for (const int dim : kHeadDims) {
    for (const int32_t length : kDecodeLengths) {
      for (const DType dtype : {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
        decode(dim, dtype, length, true);
      }
    }
  }
  for (const int32_t length : kHotLengths) {
    for (const DType dtype : {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
      decode(kDefaultDim, dtype, length, false);
    }
  }
  // Decode over a plain cache of `length` tokens through a sliding window
  // of 4096: the masked-out slots are skipped, so the time should be that
  // of a 4096-token decode (bytes_per_second counts the admitted slots).
  for (const int32_t length : {16384, 32768}) {
    Shape shape;
    shape.context = length - 1;
    shape.columns = 1;
    shape.window = 4096;
    for (const int64_t target : targets) {
      benchmark::RegisterBenchmark(
          (std::string("BM_DecodeSliding/") + hwy::TargetName(target) + "/f32").c_str(),
          [target, shape](benchmark::State& state) {
            RunAttention(state, target, shape, /*cold=*/true);
          })
          ->Args({kDefaultDim, length, shape.window})
          ->Unit(benchmark::kMicrosecond);
    }
  }
  // Decode over a ring, read in place: full but not wrapped (/0) against
  // wrapped at phase ~1/2 (/1), same length, cold (goal: wrapped <= 1.05x).
  for (const int32_t length : kRingLengths) {
    for (const Storage storage : {Storage::kRingFull, Storage::kRingWrapped}) {
      Shape shape;
      shape.context = length - 1;
      shape.columns = 1;
      shape.storage = storage;
      for (const int64_t target : targets) {
        benchmark::RegisterBenchmark(
            (std::string("BM_DecodeRing/") + hwy::TargetName(target)).c_str(),
            [target, shape](benchmark::State& state) {
              RunAttention(state, target, shape, /*cold=*/true);
            })
            ->Args({length, storage == Storage::kRingWrapped ? 1 : 0})
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  for (const int32_t columns : kWindowColumns) {
    Shape shape;
    shape.context = kWindowContext;
    shape.columns = columns;
    for (const int64_t target : targets) {
      for (const bool cold : {true, false}) {
        benchmark::RegisterBenchmark(
            (std::string(cold ? "BM_Window/" : "BM_WindowHot/") + hwy::TargetName(target)).c_str(),
            [target, shape, cold](benchmark::State& state) {
              RunAttention(state, target, shape, cold);
            })
            ->Args({kWindowContext, columns})
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  RegisterThreaded(targets);
}


#ifdef KVSPEC_GGML_PEERS
// ---------------------------------------------------------------------------
// ggml's FLASH_ATTN_EXT on the same shapes (bench/ggml_peers.h), f32 and f16
// K/V (ggml reads f16, not bf16: compare f16 with our bf16, both 2 bytes).

// The peer computes what Attend computes: on one small decode (256 slots)
// and one small window, f32 K/V within 1e-4 of the largest output (this
// pins the head mapping, scale and mask); f16 K/V (queries, keys and values
// rounded to f16 first, for both) within 2e-2: ggml converts the query to
// f16 and accumulates the f16 values in an f16 accumulator, 2^-11 relative
// per step, about sqrt(256) * 2^-11 = 8e-3 over 256 slots (measured here:
// 5.5e-3). Checked once per process, before the first ggml benchmark; a
// mismatch fails every ggml run.
// q8_0 and q4_0 K/V: the same blocks on both sides (ggml's quantize_row_*_ref
// equals ours, BM_QuantizeGgml checks it), but ggml quantizes the query to
// q8_0 for its dot products with the keys (q8_0's and q4_0's vec_dot_type),
// so its scores carry that rounding too: a looser bound than f16's.
constexpr float kGgmlQuantTolerance = 5e-2f;

bool GgmlMatchesAttend(benchmark::State& state) {
  static int verdict = -1;  // -1 not yet checked
  if (verdict >= 0) {
    if (verdict == 0) state.SkipWithError("ggml FLASH_ATTN_EXT differs from Attend (see above)");
    return verdict == 1;
  }
  verdict = 1;
  for (const int32_t columns : {1, 16}) {
    for (const DType dtype : {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
      const bool f16 = dtype == DType::kBF16;  // ggml's f16 for our bf16 row
      const bool quant = dtype == DType::kQ8_0 || dtype == DType::kQ4_0;
      Shape shape;
      shape.context = columns == 1 ? 255 : 64;
      shape.columns = columns;
      shape.dim = 64;
      Values values(0x636865636Bull + static_cast<uint64_t>(columns));
      const size_t n = static_cast<size_t>(shape.context + shape.columns);
      std::vector<float> k(n * kKvHeads * shape.dim), v(k.size());
      std::vector<float> q(static_cast<size_t>(columns) * kQueryHeads * shape.dim);
      values.Fill(&k);
      values.Fill(&v);
      values.Fill(&q);
      if (f16) {
        bench::GgmlRoundToF16(k.data(), k.size());
        bench::GgmlRoundToF16(v.data(), v.size());
        bench::GgmlRoundToF16(q.data(), q.size());
      }
      Shape ours = shape;  // q8_0 and q4_0: our blocks; f32 otherwise (f16 values)
      if (quant) ours.dtype = dtype;
      const std::unique_ptr<AttentionCase> c = MakeCase(ours, k, v);
      const std::unique_ptr<AttentionCase> plain = MakeCase(shape, k, v);
      // K/V as ggml takes them, [kv_heads][slots][dim].
      const size_t slots = static_cast<size_t>(c->view.slots);
      std::vector<float> kd(kKvHeads * slots * shape.dim), vd(kd.size());
      for (int kh = 0; kh < kKvHeads; ++kh) {
        for (int32_t t = 0; t < c->view.slots; ++t) {
          const size_t at = (static_cast<size_t>(kh) * slots + t) * shape.dim;
          std::copy(plain->view.Key(0, kh, t), plain->view.Key(0, kh, t) + shape.dim,
                    kd.begin() + at);
          std::copy(plain->view.Value(0, kh, t), plain->view.Value(0, kh, t) + shape.dim,
                    vd.begin() + at);
        }
      }
      bench::GgmlAttentionShape g;
      g.dim = shape.dim;
      g.kv_heads = kKvHeads;
      g.q_heads = kQueryHeads;
      g.n_kv = c->view.slots;
      g.columns = columns;
      g.f16 = f16;
      g.quant = KvTypeOf(dtype);
      if (!quant) g.quant = KvType::kF32;
      const std::string name = std::string("ggml FLASH_ATTN_EXT ") +
                               (quant ? DTypeName(dtype) : f16 ? "f16" : "f32") +
                               (columns == 1 ? " decode" : " window");
      if (!PeerMatchesAttend(
              state, name.c_str(), q,
              [&](float* o) { bench::GgmlAttendOnce(g, q.data(), kd.data(), vd.data(), o); }, *c,
              quant ? kGgmlQuantTolerance : f16 ? 2e-2f : 1e-4f)) {
        verdict = 0;
        return false;
      }
    }
  }
  return true;
}

void RegisterGgmlPeers() {
  const auto add = [](const std::string& name, bench::GgmlAttentionShape shape, bool cold,
                      std::vector<int64_t> args) {
    benchmark::RegisterBenchmark(name.c_str(), [shape, cold](benchmark::State& state) {
      if (!GgmlMatchesAttend(state)) return;
      bench::GgmlAttentionBenchmark(state, shape, cold, kColdBytes);
    })->Args(args)->Unit(benchmark::kMicrosecond);
  };
  for (const int dim : kHeadDims) {
    for (const int32_t length : kDecodeLengths) {
      for (const bool f16 : {false, true}) {
        bench::GgmlAttentionShape shape;
        shape.dim = dim;
        shape.kv_heads = kKvHeads;
        shape.q_heads = kQueryHeads;
        shape.n_kv = length;
        shape.f16 = f16;
        add(std::string("BM_DecodeGgml/") + (f16 ? "f16" : "f32"), shape, true, {dim, length});
      }
      for (const KvType quant : {KvType::kQ8_0, KvType::kQ4_0}) {
        bench::GgmlAttentionShape shape;
        shape.dim = dim;
        shape.kv_heads = kKvHeads;
        shape.q_heads = kQueryHeads;
        shape.n_kv = length;
        shape.quant = quant;
        add(std::string("BM_DecodeGgml/") + KvTypeName(quant), shape, true, {dim, length});
      }
    }
  }
  for (const int32_t length : kHotLengths) {
    for (const bool f16 : {false, true}) {
      bench::GgmlAttentionShape shape;
      shape.dim = kDefaultDim;
      shape.kv_heads = kKvHeads;
      shape.q_heads = kQueryHeads;
      shape.n_kv = length;
      shape.f16 = f16;
      add(std::string("BM_DecodeHotGgml/") + (f16 ? "f16" : "f32"), shape, false,
          {kDefaultDim, length});
    }
  }
  for (const int32_t columns : kWindowColumns) {
    for (const bool f16 : {false, true}) {
      for (const bool cold : {true, false}) {
        bench::GgmlAttentionShape shape;
        shape.dim = kDefaultDim;
        shape.kv_heads = kKvHeads;
        shape.q_heads = kQueryHeads;
        shape.n_kv = kWindowContext + columns;
        shape.columns = columns;
        shape.f16 = f16;
        add(std::string(cold ? "BM_WindowGgml/" : "BM_WindowHotGgml/") + (f16 ? "f16" : "f32"),
            shape, cold, {kWindowContext, columns});
      }
    }
  }
}
#endif  // KVSPEC_GGML_PEERS

}  // namespace
}  // namespace kvspec

// Called by bench/bench_main.cc.
namespace kvspec::bench {
void RegisterQuantizeBenchmarks();  // bench/quantize_bench.cc

void RegisterBenchmarks() {
  kvspec::RegisterAll();
  RegisterQuantizeBenchmarks();
#ifdef KVSPEC_GGML_PEERS
  kvspec::RegisterGgmlPeers();
#endif
}
}  // namespace kvspec::bench

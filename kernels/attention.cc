// Attention kernel: the Highway version (per target), dispatched once per
// call. This file holds the blocking of slots and queries; the SIMD
// arithmetic of a block is in attention-inl.h, the scalar reference in
// attention_reference.cc.
//
// Per (row, KV head), for all the row's queries at once: the slots in
// logical order are cut into blocks of about 16 KiB of keys (or values);
// each block, read from memory once, serves every query that admits some
// of its slots while it sits in L1 (a window of L queries reads the cache
// once, not L times). Per query: the scores of the group's query heads over
// its admitted slots in logical order, a softmax per head, then the values
// of its admitted slots in logical order (a lone query's softmax numerators
// computed along its values, SoftmaxAlong). Which block a slot falls in
// changes no arithmetic (ScoreBlock, ValueBlock), so outputs do not depend
// on the layout.
//
// The per-block work goes through small sink structs (ScoreSink,
// ValueSink) holding copies of what they need, not capturing lambdas (a
// lambda in the score path once cost decode about 25%). Their Add stays out
// of line, as the lambdas here were, so the hot loops compile as before
// (inlined into the block loop, the benchmarks measured the same within
// noise).
#include "kvspec/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>  // __get_cpuid: the CPU family, for AttentionRequestsOn
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kvspec/kernels/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kvspec/kernels/attention-inl.h"
#include "kvspec/kernels/thread_pool.h"

HWY_BEFORE_NAMESPACE();
namespace kvspec {
namespace HWY_NAMESPACE {

// The shape of one Attend call and the blocking derived from it.
struct AttendPlan {
  int dim = 0;
  int q_heads = 0;
  int kv_heads = 0;
  int group = 0;  // query heads per KV head
  int32_t queries = 0;
  int32_t slots = 0;
  int32_t first_slot = 0;  // logical order: first_slot .. slots-1, 0 .. first_slot-1
  float scale = 0.0f;      // 1 / sqrt(dim)
  size_t padded = 0;       // a head's score row: slots rounded up past a whole vector
  size_t per_query = 0;    // a query's scores: [group][padded]
  int32_t block = 0;       // slots per block
  int32_t tile = 0;        // queries per tile
  AttentionRequests requests;  // how rows are requested ahead (AttentionRequestsOn)
};

template <typename T>
HWY_INLINE AttendPlan MakePlan(int q_heads, const KvView& kv, const Mask& mask) {
  const DF d;
  const size_t N = hn::Lanes(d);
  AttendPlan p;
  p.dim = kv.dim;
  p.q_heads = q_heads;
  p.kv_heads = kv.kv_heads;
  p.group = q_heads / kv.kv_heads;
  p.queries = mask.queries;
  p.slots = mask.slots;
  p.first_slot = mask.first_slot;
  p.scale = 1.0f / std::sqrt(static_cast<float>(p.dim));
  p.padded = (static_cast<size_t>(p.slots) + N) / N * N;
  p.per_query = static_cast<size_t>(p.group) * p.padded;
  // Slots per block: 8 KiB of keys for a decode (smaller blocks start the
  // prefetch of the next sooner), 16 KiB when many queries share each block.
  const size_t block_bytes = p.queries == 1 ? 8192 : 16384;
  p.block = static_cast<int32_t>(
      std::max<size_t>(8, block_bytes / (static_cast<size_t>(p.dim) * sizeof(T))));
  // Queries go in tiles of 32: a tile's scores ([32][group][slots]) stay
  // in L2 or L3 between its score, softmax and value passes, where those of
  // a forward of 512 queries would not, and each tile reads the admitted
  // keys and values once (window forward of 512 queries after 1024 tokens:
  // 16% faster than untiled, 64 queries: 12%; 16-query tiles lost at 128).
  // A query's arithmetic does not depend on its tile.
  p.tile = std::min<int32_t>(p.queries, 32);
  p.requests = AttentionRequestsOn(sizeof(T) == 2);
  return p;
}

// Scratch reused across calls on this thread (grown, never shrunk).
template <typename T>
struct AttendScratch {
  std::vector<float> scores;         // [tile][group][padded]
  std::vector<float> acc;            // [tile][group][dim]
  std::vector<float> sums;           // [tile][group]
  std::vector<size_t> count;         // [tile]: slots admitted so far
  std::vector<int32_t> block_pos;    // two blocks' candidate slots (this one and
  std::vector<const T*> block_rows;  // the next): positions and rows
  std::vector<const T*> ptrs;        // one query's admitted rows in a block
  std::vector<int32_t> all_pos;      // a lone query's admitted slots of a head
  std::vector<const T*> all_rows;    // (ScoresInSegments): positions and rows,
  std::vector<float> side;           // and its score blocks before the transpose
  std::vector<float> along;          // a lone query's SoftmaxAlong: [group] maxima,
                                     // [group][lanes] sum vectors

  void Prepare(const AttendPlan& p) {
    const size_t nq = static_cast<size_t>(p.tile);
    if (scores.size() < nq * p.per_query) scores.resize(nq * p.per_query);
    if (acc.size() < nq * p.group * p.dim) acc.resize(nq * p.group * p.dim);
    if (sums.size() < nq * p.group) sums.resize(nq * p.group);
    count.assign(nq, 0);
    block_pos.resize(2 * static_cast<size_t>(p.block));
    block_rows.resize(2 * static_cast<size_t>(p.block));
    ptrs.resize(static_cast<size_t>(p.block));
  }
};

template <typename T>
AttendScratch<T>& ThreadScratch() {
  thread_local AttendScratch<T> scratch;
  return scratch;
}

// scratch.along sized for p: [group] maxima, then [group][lanes] sums.
template <typename T>
HWY_INLINE float* AlongBuffer(const AttendPlan& p, AttendScratch<T>& scratch) {
  const size_t size = static_cast<size_t>(p.group) * (hn::Lanes(DF()) + 1);
  if (scratch.along.size() < size) scratch.along.resize(size);
  return scratch.along.data();
}

// Queries [q0, q1) of row r, with their admitted position ranges
// [lo[qi], hi[qi]] and the positions of the row's slots (physical order).
struct QueryTile {
  int r = 0;
  int32_t q0 = 0, q1 = 0;
  const int32_t* pos = nullptr;  // [slots]
  const int32_t* lo = nullptr;   // [queries]
  const int32_t* hi = nullptr;   // [queries]
  // No query of the tile admits a slot outside [min_lo, max_hi].
  int32_t min_lo = 0, max_hi = 0;
};

HWY_INLINE QueryTile MakeTile(const Mask& mask, int r, int32_t q0, int32_t q1) {
  QueryTile tile;
  tile.r = r;
  tile.q0 = q0;
  tile.q1 = q1;
  tile.pos = mask.slot_pos + r * mask.slot_stride;
  tile.lo = mask.lo.data() + static_cast<size_t>(r) * mask.queries;
  tile.hi = mask.hi.data() + static_cast<size_t>(r) * mask.queries;
  int32_t min_lo = std::numeric_limits<int32_t>::max();
  int32_t max_hi = std::numeric_limits<int32_t>::min();
  for (int32_t qi = q0; qi < q1; ++qi) {
    min_lo = std::min(min_lo, tile.lo[qi]);
    max_hi = std::max(max_hi, tile.hi[qi]);
  }
  tile.min_lo = min_lo;
  tile.max_hi = max_hi;
  return tile;
}

// A block's candidate slots (those some query of the tile may admit):
// positions, rows, and the range of the positions.
template <typename T>
struct Block {
  int32_t* pos;
  const T** rows;
  size_t n;
  int32_t min, max;
};

// out[i] = first + i * dim for i < n (n a multiple of the vector length of
// 32-bit lanes): with 64-bit pointers, whole vectors of addresses at a time
// (bench/alternate/gather-rows.patch, 11 rounds, Zen 5: cold decode 0.97 of
// the time at dim 64, 0.99 at 128, 1.00 at 256, 0.98-0.99 in L2).
template <typename T>
HWY_INLINE void StoreRows(const T* first, size_t dim, size_t n, const T** HWY_RESTRICT out) {
  if constexpr (sizeof(const T*) == sizeof(uint64_t)) {
    const hn::ScalableTag<uint64_t> du;
    const size_t M = hn::Lanes(du);
    const uint64_t row_bytes = static_cast<uint64_t>(dim) * sizeof(T);
    auto address = hn::Add(hn::Set(du, reinterpret_cast<uint64_t>(first)),
                           hn::Mul(hn::Iota(du, 0), hn::Set(du, row_bytes)));
    const auto step = hn::Set(du, row_bytes * M);
    for (size_t i = 0; i < n; i += M) {
      hn::StoreU(address, du, reinterpret_cast<uint64_t*>(out + i));
      address = hn::Add(address, step);
    }
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = first + i * dim;
  }
}

// Fills *b with the candidate slots among the logical slots [t0, min(t0 +
// block, end)) of one head (head: the row of its slot 0), in logical order.
// The slots go in at most two runs of consecutive physical slots (a ring
// wraps once), a vector of positions at a time: a vector whose positions
// every query may read (a decode's, mostly) is stored whole, the others
// slot by slot. The block is the same either way. Against the slot-by-slot
// loop alone (bench/alternate/run bench/alternate/gather.patch: 15 rounds
// in one process, Ice Lake-SP, AVX3, 8 KV heads x 4, 16384 tokens): cold
// bf16 decode 0.91 of the time at dim 64 and 0.95 at dim 128 (medians of
// the rounds' ratios), fp32 0.96-1.00; in L2, bf16 dim 64 0.82.
template <typename T>
HWY_INLINE void GatherBlock(const AttendPlan& p, const QueryTile& tile, const T* head, int32_t t0,
                            int32_t end, Block<T>* b) {
  const hn::ScalableTag<int32_t> di;
  const int32_t N = static_cast<int32_t>(hn::Lanes(di));
  const int32_t slots = p.slots;
  const size_t dim = static_cast<size_t>(p.dim);
  const int32_t min_lo = tile.min_lo;
  const int32_t max_hi = tile.max_hi;
  const int32_t* pos = tile.pos;
  const int32_t t1 = std::min(end, t0 + p.block);
  // Locals, not *b, in the loop: the stores to b->pos could alias them.
  int32_t* bpos = b->pos;
  const T** brows = b->rows;
  size_t n = 0;
  int32_t bmin = std::numeric_limits<int32_t>::max();
  int32_t bmax = std::numeric_limits<int32_t>::min();
  const auto vlo = hn::Set(di, min_lo);
  const auto vhi = hn::Set(di, max_hi);
  auto vmin = hn::Set(di, bmin);
  auto vmax = hn::Set(di, bmax);
  const auto one = [&](int32_t s) {
    const int32_t position = pos[s];
    if (position < min_lo || position > max_hi) return;  // no query reads it
    bpos[n] = position;
    brows[n++] = head + static_cast<size_t>(s) * dim;
    bmin = std::min(bmin, position);
    bmax = std::max(bmax, position);
  };
  for (int32_t t = t0; t < t1;) {
    const int32_t s0 = p.first_slot + t < slots ? p.first_slot + t : p.first_slot + t - slots;
    const int32_t s1 = s0 + std::min(t1 - t, slots - s0);  // the run: physical [s0, s1)
    t += s1 - s0;
    int32_t s = s0;
    for (; s + N <= s1; s += N) {
      const auto v = hn::LoadU(di, pos + s);
      if (hn::AllFalse(di, hn::Or(hn::Lt(v, vlo), hn::Gt(v, vhi)))) {
        hn::StoreU(v, di, bpos + n);
        vmin = hn::Min(vmin, v);
        vmax = hn::Max(vmax, v);
        StoreRows(head + static_cast<size_t>(s) * dim, dim, static_cast<size_t>(N), brows + n);
        n += static_cast<size_t>(N);
        continue;
      }
      for (int32_t i = s; i < s + N; ++i) one(i);
    }
    for (; s < s1; ++s) one(s);
  }
  b->n = n;
  b->min = std::min(bmin, hn::GetLane(hn::MinOfLanes(di, vmin)));
  b->max = std::max(bmax, hn::GetLane(hn::MaxOfLanes(di, vmax)));
}

// The rows of b whose positions lie in [lo, hi], in order, into out; their
// number.
template <typename T>
HWY_INLINE size_t AdmittedRows(const Block<T>& b, int32_t lo, int32_t hi,
                               const T** HWY_RESTRICT out) {
  size_t n = 0;
  for (size_t i = 0; i < b.n; ++i) {
    if (b.pos[i] >= lo && b.pos[i] <= hi) out[n++] = b.rows[i];
  }
  return n;
}

// Calls sink.Add(query, rows, n, ahead) for every block of the logical
// slots [begin, end) of one head, in order, and every query of the tile with
// n > 0 admitted slots in it (rows in logical order). A query whose range
// covers the block's positions takes the block's list as it is; one that
// misses them skips it. The first call of a block also gets the next
// block's candidate rows (ahead) to request along its computation, the
// others none: memory keeps working while a block computes, as one core's
// hardware prefetcher alone does not (decode over 32768 fp32 tokens: 25%
// less time here than with the next block's prefetches issued at once
// before its computation).
//
// Where to (AttentionRequestsOn): on Intel cores, and for bf16 on AMD
// Zen 5 and later, into L1 (prefetcht0), as the decode's walk
// (BM_DecodeWalk) does; for fp32 on AMD Zen 5 and later non-temporally
// (prefetchnta), elsewhere into L2 (prefetcht1), and in both of those with
// fp32 storage each block's rows requested again into L1 as its
// computation starts.
// Measured with bench/alternate/run bench/alternate/prefetch-l1.patch (on:
// into L1; off: into L2 and the fp32 request at the start) on an Ice Lake-SP
// core (AVX3), five runs of 11-21 rounds in one process, the medians of the
// rounds' on/off ratios: cold decode (16384 tokens) 0.95-0.97 at fp32 dim 64,
// 0.97-1.00 at dim 128, 1.00-1.02 at dim 256, bf16 0.93-1.01; in L2, fp32
// 0.76-0.95 (the start-of-block requests stalled on L1's miss buffers while
// the lines came from L2); window attention (64 queries after 1024 tokens,
// three of the runs) 0.99-1.02. On a Zen 4 core the requests into L1 stalled
// the core on its miss buffers (cold fp32 decode, dim 128, 16384 tokens: 16.0
// ms CPU against 9.6 into L2, one binary, back to back), and on a Zen 5 core
// (AVX3) the fp32 request at the start of each block made cold fp32 decode of
// 16384 and 32768 tokens, dims 64 to 256, 6-21% faster in five alternated
// rounds (medians of 3 each), the window the same within the spread; with
// bf16, whose widening makes a block's computation longer, it was 5-7% slower
// at dim 64 and up to 14% faster at dim 256 (the best of three rounds each),
// so bf16 does without it. On another Zen 5 (AMD family 0x1A, AVX3, stop 37)
// bf16 with the next block requested into L1 along the computation instead
// of L2 (bench/alternate/l1-along-bf16.patch, 21 rounds) took 0.87 of the
// time at dim 64, 0.96 at 128 and 0.93 at 256 cold, 0.97-0.99 in L2, while
// fp32 into L1 (prefetch-l1.patch, 15 rounds) took 1.07-1.10 cold: bf16 goes
// into L1 there. Zen 4 keeps L2 for both (its bf16 was not measured). On a
// Zen 5 (stop 43), fp32 requests non-temporal instead of into L2, with the
// keys in segments non-temporal too (ScorePass), took 0.953 of the time cold
// at dim 64, 0.973 at 128, 0.952 at 256, 0.98-1.02 in L2, window 0.994
// (bench/alternate/non-temporal.patch, 15 rounds); presumably because a
// head's keys and values (4 MiB each at dim 64 over 16384 tokens) no longer
// pass through L2 and push out the scores and the transpose's buffer there
// (not measured: these VMs have no cache counters). bf16's requests into L1
// made non-temporal instead gained nothing (7 rounds: 0.99-1.00 cold, and
// 1.29 in L2 at dim 256).
template <typename T, class Sink>
HWY_INLINE void ForEachBlock(const AttendPlan& p, const QueryTile& tile, const T* head,
                             AttendScratch<T>& scratch, Sink& sink, int32_t begin,
                             int32_t end) {
  const int32_t slots = end;
  const int32_t block = p.block;
  const size_t row_bytes = static_cast<size_t>(p.dim) * sizeof(T);
  const T** ptrs = scratch.ptrs.data();
  Block<T> cur{scratch.block_pos.data(), scratch.block_rows.data(), 0, 0, 0};
  Block<T> next{cur.pos + block, cur.rows + block, 0, 0, 0};
  GatherBlock(p, tile, head, begin, end, &cur);
  for (int32_t t0 = begin; t0 < slots; t0 += block) {
    next.n = 0;
    if (t0 + block < slots) GatherBlock(p, tile, head, t0 + block, end, &next);
    Ahead<T> ahead{next.rows, next.n, p.requests.along};  // for the block's first call only
    if (p.requests.block_start_l1) {
      for (size_t k = 0; k < cur.n; ++k) PrefetchSpan(cur.rows[k], row_bytes, RowRequest::kL1);
    }
    for (int32_t qi = tile.q0; qi < tile.q1 && cur.n > 0; ++qi) {
      const int32_t lo = tile.lo[qi];
      const int32_t hi = tile.hi[qi];
      if (hi < cur.min || lo > cur.max) continue;
      if (lo <= cur.min && hi >= cur.max) {
        sink.Add(qi, cur.rows, cur.n, ahead);
        ahead.n = 0;
        continue;
      }
      const size_t n = AdmittedRows(cur, lo, hi, ptrs);
      if (n > 0) {
        sink.Add(qi, ptrs, n, ahead);
        ahead.n = 0;
      }
    }
    // No query used the block: request the next one all the same.
    PrefetchRows(ahead, 0, ahead.n, row_bytes);
    std::swap(cur, next);
  }
}

// Appends, per query of the tile, the scores of one KV head's query heads
// over a block's admitted slots: scores [t][g][count[t] ..).
template <typename T>
struct ScoreSink {
  const float* q;  // [rows][queries][q_heads][dim]
  size_t r;
  int32_t queries;
  int q_heads;
  int kh;
  int group;
  int dim;
  float scale;
  size_t padded;
  size_t per_query;
  int32_t q0;
  float* scores;  // [tile][group][padded]
  size_t* count;  // [tile]

  ScoreSink(const AttendPlan& p, const QueryTile& tile, int kv_head, const float* all_q,
            AttendScratch<T>& scratch)
      : q(all_q),
        r(static_cast<size_t>(tile.r)),
        queries(p.queries),
        q_heads(p.q_heads),
        kh(kv_head),
        group(p.group),
        dim(p.dim),
        scale(p.scale),
        padded(p.padded),
        per_query(p.per_query),
        q0(tile.q0),
        scores(scratch.scores.data()),
        count(scratch.count.data()) {}

  HWY_NOINLINE void Add(int32_t qi, const T* const* keys, size_t n, Ahead<T> ahead) {
    const size_t t = static_cast<size_t>(qi - q0);  // in the tile
    const float* qh = q + ((r * queries + qi) * q_heads + kh * group) * dim;
    Scores(qh, group, dim, keys, n, scale, &scores[t * per_query + count[t]], padded, ahead);
    count[t] += n;
  }

#if KVSPEC_SUMS_OF_16
  // The scores of the tile's only query over all n of its admitted rows of
  // the head (keys, in logical order) at once, in segments.
  // The heads' largest scores go to maxima [group].
  void AddSegments(const T* const* keys, size_t n, float* side,
                   const AttentionRequests& requests, float* maxima) {
    const float* qh = q + ((r * queries + q0) * q_heads + kh * group) * dim;
    ScoresInSegments(qh, group, dim, keys, n, scale, scores, padded, side, requests, maxima);
    count[0] = n;
  }
#endif
};

// The scores of one KV head over the logical slots [begin, end): a lone
// query's admitted rows gathered whole and scored in segments
// (ScoresInSegments) where there are enough of them, they are shorter than
// AttentionRequests::segments_below and the target has SumsOf16, else
// block by block (ForEachBlock). The same bits either way. On a Zen 5 (stop
// 43, bench/alternate/segments-below.patch), fp32 rows of dim 256 block by
// block took 0.944 of the time cold over 16384 tokens (15 rounds) and
// 0.922 over 32768 (9 rounds); rows of 256 and 512 bytes took 1.006-1.093
// of the time so (SEG_MAX_ROW=256 with no-segments.patch, 9 rounds).
// Returns whether the heads' largest scores are known too, in
// scratch.along[0, group) (ScoresInSegments takes them along its transpose,
// for StartSoftmaxAlong).
template <typename T>
HWY_INLINE bool ScorePass(const AttendPlan& p, const QueryTile& tile, const T* k_head,
                          AttendScratch<T>& scratch, ScoreSink<T>& sink, int32_t begin,
                          int32_t end) {
#if KVSPEC_SUMS_OF_16
  if (tile.q1 - tile.q0 == 1 && p.group % 4 == 0 &&
      static_cast<size_t>(end - begin) >= kSegmentsFrom &&
      static_cast<size_t>(p.dim) * sizeof(T) < p.requests.segments_below) {
    const size_t most = static_cast<size_t>(end - begin);
    if (scratch.all_pos.size() < most) {
      scratch.all_pos.resize(most);
      scratch.all_rows.resize(most);
    }
    if (scratch.side.size() < most * p.group) scratch.side.resize(most * p.group);
    AttendPlan whole = p;
    whole.block = end - begin;
    Block<T> all{scratch.all_pos.data(), scratch.all_rows.data(), 0, 0, 0};
    GatherBlock(whole, tile, k_head, begin, end, &all);
    if (all.n >= kSegmentsFrom) {
      sink.AddSegments(all.rows, all.n, scratch.side.data(), p.requests, AlongBuffer(p, scratch));
      return true;
    } else if (all.n > 0) {
      sink.Add(tile.q0, all.rows, all.n, Ahead<T>());
    }
    return false;
  }
#endif
  ForEachBlock(p, tile, k_head, scratch, sink, begin, end);
  return false;
}

// A lone query's softmax numerators computed along its value pass instead
// of before it: each block's numerators just before the block's values need
// them, so that the exponentials compute while memory fetches the values
// (SoftmaxTile's separate pass leaves memory idle). The same arithmetic as
// SoftmaxTile in the same order, so the same bits: per head, MaxOf over all
// the scores first, then exp(score - max) a whole vector at a time from
// slot 0 (a last partial vector's padding lanes set to the max, as
// ExpShifted does), whole vectors summed into one vector accumulator in
// order, its lanes reduced, then the tail in order (SumOf). Measured with
// bench/alternate/run --rounds 21 bench/alternate/softmax-along.patch on a
// Zen 5 core (AVX3), cold decode of 16384 tokens, 8 KV heads x 4 (medians
// of the rounds' ratios): 0.947 of the time at fp32 dim 64, 0.965 at 128,
// 1.003 at 256 (bf16 0.956, 0.972, 0.992); in L2 (128 tokens) 0.98-1.01,
// but 1.037 at fp32 dim 256; stop 42 in the README.
struct SoftmaxAlong {
  float* scores = nullptr;     // [group][padded]
  size_t padded = 0;
  int group = 0;
  size_t total = 0;            // admitted slots
  size_t done = 0;             // numerators computed: [0, done)
  const float* max = nullptr;  // [group]
  float* sums = nullptr;       // [group][lanes], zero at the start

  // The numerators of slots [0, need) (and up to the end of its vector).
  HWY_INLINE void Upto(size_t need) {
    const DF d;
    const size_t N = hn::Lanes(d);
    need = std::min(need, total);
    for (; done < need; done += N) {
      for (int g = 0; g < group; ++g) {
        float* sc = scores + static_cast<size_t>(g) * padded;
        if (done + N > total) {
          for (size_t i = total; i < done + N; ++i) sc[i] = max[g];  // padding lanes
        }
        const VF e = hn::Exp(d, hn::Sub(hn::LoadU(d, sc + done), hn::Set(d, max[g])));
        hn::StoreU(e, d, sc + done);
        if (done + N <= total) {
          float* sum = sums + static_cast<size_t>(g) * N;
          hn::StoreU(hn::Add(hn::LoadU(d, sum), e), d, sum);
        }
      }
    }
  }

  // The numerators left, and the heads' sums into out [group].
  HWY_INLINE void Finish(float* HWY_RESTRICT out) {
    const DF d;
    const size_t N = hn::Lanes(d);
    Upto(total);
    for (int g = 0; g < group; ++g) {
      const float* sc = scores + static_cast<size_t>(g) * padded;
      float sum = hn::GetLane(hn::SumOfLanes(d, hn::LoadU(d, sums + static_cast<size_t>(g) * N)));
      for (size_t j = total / N * N; j < total; ++j) sum += sc[j];
      out[g] = sum;
    }
  }
};

// The SoftmaxAlong of a lone query with total > 0 admitted slots whose
// scores are in scratch.scores: the maxima now (unless have_max: ScorePass
// left them in scratch.along), the rest along the values.
template <typename T>
HWY_INLINE SoftmaxAlong StartSoftmaxAlong(const AttendPlan& p, size_t total,
                                          AttendScratch<T>& scratch, bool have_max) {
  const size_t N = hn::Lanes(DF());
  const size_t group = static_cast<size_t>(p.group);
  float* buffer = AlongBuffer(p, scratch);
  for (size_t g = 0; g < group && !have_max; ++g) {
    buffer[g] = MaxOf(&scratch.scores[g * p.padded], total);
  }
  std::fill(buffer + group, buffer + group * (N + 1), 0.0f);
  SoftmaxAlong along;
  along.scores = scratch.scores.data();
  along.padded = p.padded;
  along.group = p.group;
  along.total = total;
  along.max = buffer;
  along.sums = buffer + group;
  return along;
}

// Adds, per query of the tile, a block's admitted values weighted by the
// softmax numerators to acc [t][g][dim].
template <typename T>
struct ValueSink {
  int group;
  int dim;
  size_t padded;
  size_t per_query;
  int32_t q0;
  const float* scores;  // [tile][group][padded]
  float* acc;           // [tile][group][dim]
  size_t* count;        // [tile]
  SoftmaxAlong* along = nullptr;  // a lone query's numerators, still to compute

  ValueSink(const AttendPlan& p, const QueryTile& tile, AttendScratch<T>& scratch)
      : group(p.group),
        dim(p.dim),
        padded(p.padded),
        per_query(p.per_query),
        q0(tile.q0),
        scores(scratch.scores.data()),
        acc(scratch.acc.data()),
        count(scratch.count.data()) {}

  HWY_NOINLINE void Add(int32_t qi, const T* const* values, size_t n, Ahead<T> ahead) {
    float* a = &acc[static_cast<size_t>(qi - q0) * group * dim];
    if (along != nullptr) along->Upto(count[0] + n);
    const float* w = &scores[(qi - q0) * per_query + count[qi - q0]];
    int g = 0;
    for (; g + 4 <= group; g += 4) {
      ValueBlock<4>(w + g * padded, padded, values, n, dim, a + static_cast<size_t>(g) * dim,
                    ahead);
      ahead.n = 0;
    }
    for (; g < group; ++g) {
      ValueBlock<1>(w + g * padded, padded, values, n, dim, a + static_cast<size_t>(g) * dim,
                    ahead);
      ahead.n = 0;
    }
    count[qi - q0] += n;
  }
};

// The softmax numerators in place of the scores, and their sums, for the
// nq queries of a tile and each head (queries that admit nothing skipped).
HWY_INLINE void SoftmaxTile(const AttendPlan& p, int32_t nq, float* HWY_RESTRICT scores,
                            const size_t* HWY_RESTRICT count, float* HWY_RESTRICT sums) {
  for (int32_t t = 0; t < nq; ++t) {
    for (int g = 0; g < p.group; ++g) {
      float* s = &scores[t * p.per_query + g * p.padded];
      const size_t n = count[t];
      if (n == 0) continue;
      ExpShifted(s, n, MaxOf(s, n));
      sums[t * p.group + g] = SumOf(s, n);
    }
  }
}

// The outputs of one KV head's query heads for the tile's queries:
// acc / sum, or zeros for a query that sees nothing.
HWY_INLINE void WriteTile(const AttendPlan& p, const QueryTile& tile, int kh,
                          const float* HWY_RESTRICT acc, const float* HWY_RESTRICT sums,
                          const size_t* HWY_RESTRICT count, float* HWY_RESTRICT out) {
  const int group = p.group;
  const int dim = p.dim;
  for (int32_t qi = tile.q0; qi < tile.q1; ++qi) {
    const size_t t = static_cast<size_t>(qi - tile.q0);
    float* o =
        out + ((static_cast<size_t>(tile.r) * p.queries + qi) * p.q_heads + kh * group) * dim;
    if (count[t] == 0) {  // a query that sees nothing gets zeros
      std::memset(o, 0, sizeof(float) * group * dim);
      continue;
    }
    const float* a = &acc[t * group * dim];
    for (int g = 0; g < group; ++g) {
      const float sum = sums[t * group + g];
      for (int i = 0; i < dim; ++i) o[g * dim + i] = a[g * dim + i] / sum;
    }
  }
}

// One KV head kh for the queries of a tile: the scores over their admitted
// slots, a softmax per head, the weighted values, the outputs. k_head and
// v_head: the head's stored rows of slot 0.
template <typename T>
HWY_INLINE void AttendHead(const AttendPlan& p, const QueryTile& tile, int kh,
                           const float* HWY_RESTRICT q, const T* k_head, const T* v_head,
                           AttendScratch<T>& scratch, float* HWY_RESTRICT out) {
  const int32_t nq = tile.q1 - tile.q0;
  std::fill(scratch.count.begin(), scratch.count.end(), 0);
  ScoreSink<T> score_sink(p, tile, kh, q, scratch);
  const bool have_max = ScorePass(p, tile, k_head, scratch, score_sink, 0, p.slots);
  const size_t total = scratch.count[0];
  const bool along = nq == 1 && total > 0;  // a lone query: SoftmaxAlong
  SoftmaxAlong softmax;
  if (along) {
    softmax = StartSoftmaxAlong(p, total, scratch, have_max);
  } else {
    SoftmaxTile(p, nq, scratch.scores.data(), scratch.count.data(), scratch.sums.data());
  }
  std::fill(scratch.acc.begin(), scratch.acc.begin() + static_cast<size_t>(nq) * p.group * p.dim,
            0.0f);
  std::fill(scratch.count.begin(), scratch.count.end(), 0);
  ValueSink<T> value_sink(p, tile, scratch);
  if (along) value_sink.along = &softmax;
  ForEachBlock(p, tile, v_head, scratch, value_sink, 0, p.slots);
  if (along) softmax.Finish(scratch.sums.data());
  WriteTile(p, tile, kh, scratch.acc.data(), scratch.sums.data(), scratch.count.data(), out);
}

// Flash-decoding (AttendOptions::chunk > 0): a query alone in its tile
// whose admitted slots, in logical order, fill more than one chunk of
// `chunk` slots is split: each chunk's softmax partial (per head: the
// chunk's largest score m, the sum of its exp(score - m) and the values
// weighted by them) is computed on its own, possibly on another thread, and
// the partials are merged in chunk order (MergeChunks). Chunk boundaries
// count admitted slots, so they depend neither on the thread count nor on
// where the slots sit; a query with at most `chunk` admitted slots takes
// the one-pass path and gets Attend's bits.

// Floats of one chunk's partial: [group] maxima, [group] sums, [group][dim].
HWY_INLINE size_t PartialFloats(const AttendPlan& p) {
  return static_cast<size_t>(p.group) * (static_cast<size_t>(p.dim) + 2);
}

// The logical slots where the chunks of query qi of row r begin (each at an
// admitted slot; the last chunk ends at p.slots).
HWY_INLINE void ChunkStarts(const AttendPlan& p, const Mask& mask, int r, int32_t qi,
                            int32_t chunk, std::vector<int32_t>* starts) {
  starts->clear();
  const int32_t* pos = mask.slot_pos + r * mask.slot_stride;
  const size_t at = static_cast<size_t>(r) * mask.queries + static_cast<size_t>(qi);
  const int32_t lo = mask.lo[at], hi = mask.hi[at];
  int64_t count = 0;
  for (int32_t t = 0; t < p.slots; ++t) {
    const int32_t s = p.first_slot + t < p.slots ? p.first_slot + t : p.first_slot + t - p.slots;
    if (pos[s] < lo || pos[s] > hi) continue;
    if (count % chunk == 0) starts->push_back(t);
    ++count;
  }
}

// One chunk of one KV head for the single query of `tile`: its partial.
template <typename T>
HWY_INLINE void AttendChunk(const AttendPlan& p, const QueryTile& tile, int kh,
                            const float* HWY_RESTRICT q, const T* k_head, const T* v_head,
                            int32_t begin, int32_t end, AttendScratch<T>& scratch,
                            float* HWY_RESTRICT partial) {
  const int group = p.group;
  const size_t dim = static_cast<size_t>(p.dim);
  std::fill(scratch.count.begin(), scratch.count.end(), 0);
  ScoreSink<T> score_sink(p, tile, kh, q, scratch);
  const bool have_max = ScorePass(p, tile, k_head, scratch, score_sink, begin, end);
  const size_t n = scratch.count[0];  // >= 1: a chunk begins at an admitted slot
  SoftmaxAlong softmax = StartSoftmaxAlong(p, n, scratch, have_max);
  std::copy_n(softmax.max, group, partial);
  std::fill(scratch.acc.begin(), scratch.acc.begin() + group * dim, 0.0f);
  std::fill(scratch.count.begin(), scratch.count.end(), 0);
  ValueSink<T> value_sink(p, tile, scratch);
  value_sink.along = &softmax;
  ForEachBlock(p, tile, v_head, scratch, value_sink, begin, end);
  softmax.Finish(partial + group);
  std::copy_n(scratch.acc.begin(), group * dim, partial + 2 * group);
}

// out[g][i] = (sum_c e_c acc_c[g][i]) / (sum_c e_c sum_c[g]) with
// e_c = exp(m_c[g] - max_c m_c[g]), over the chunks in order: the same
// arithmetic whichever threads computed the partials.
HWY_INLINE void MergeChunks(const AttendPlan& p, const float* HWY_RESTRICT partials,
                            size_t chunks, float* HWY_RESTRICT out) {
  const DF d;
  const int N = static_cast<int>(hn::Lanes(d));
  const int group = p.group;
  const int dim = p.dim;
  const size_t stride = PartialFloats(p);
  for (int g = 0; g < group; ++g) {
    float m = partials[g];
    for (size_t c = 1; c < chunks; ++c) m = std::max(m, partials[c * stride + g]);
    float* o = out + static_cast<size_t>(g) * dim;
    std::fill(o, o + dim, 0.0f);
    float sum = 0.0f;
    for (size_t c = 0; c < chunks; ++c) {
      const float* part = partials + c * stride;
      const float e = std::exp(part[g] - m);
      sum = std::fma(e, part[group + g], sum);
      const float* a = part + 2 * group + static_cast<size_t>(g) * dim;
      const VF ev = hn::Set(d, e);
      int i = 0;
      for (; i + N <= dim; i += N) {
        hn::StoreU(hn::MulAdd(ev, hn::LoadU(d, a + i), hn::LoadU(d, o + i)), d, o + i);
      }
      for (; i < dim; ++i) {
        o[i] = hn::GetLane(hn::MulAdd(ev, hn::Set(d, a[i]), hn::Set(d, o[i])));
      }
    }
    for (int i = 0; i < dim; ++i) o[i] = o[i] / sum;
  }
}

// One task of an Attend call: a KV head for a tile of queries (chunk < 0),
// or one chunk of a KV head for a split query.
struct AttendTask {
  int r = 0;
  int32_t q0 = 0, q1 = 0;
  int kh = 0;
  int32_t begin = 0, end = 0;  // logical slots of the chunk
  int32_t chunk = -1;
  size_t partial = 0;          // offset of the chunk's partial
};

// A split query's KV head: its chunks are tasks [first, first + chunks).
struct AttendMerge {
  size_t first = 0;
  size_t chunks = 0;
  float* out = nullptr;  // [group][dim]
};

// The task lists of a call, kept by the calling thread across calls (grown,
// never shrunk, like AttendScratch): after the first call of a shape,
// Attend allocates nothing.
struct AttendTasks {
  std::vector<AttendTask> tasks;
  std::vector<AttendMerge> merges;
  std::vector<int32_t> starts;
  std::vector<float> partials;
};

AttendTasks& ThreadTasks() {
  thread_local AttendTasks lists;
  return lists;
}

// What a task needs, behind one pointer (a std::function holding it needs
// no allocation).
template <typename T>
struct AttendCall {
  const AttendPlan* p;
  const float* q;
  const KvView* kv;
  const Mask* mask;
  const T* k_base;
  const T* v_base;
  float* out;
  AttendTasks* lists;

  void Run(size_t i) const {
    const AttendTask& task = lists->tasks[i];
    AttendScratch<T>& scratch = ThreadScratch<T>();
    scratch.Prepare(*p);
    const QueryTile tile = MakeTile(*mask, task.r, task.q0, task.q1);
    const size_t head = task.r * kv->row_stride + task.kh * kv->head_stride;
    if (task.chunk < 0) {
      AttendHead(*p, tile, task.kh, q, k_base + head, v_base + head, scratch, out);
    } else {
      AttendChunk(*p, tile, task.kh, q, k_base + head, v_base + head, task.begin, task.end,
                  scratch, &lists->partials[task.partial]);
    }
  }
};

template <typename T>
void AttendTyped(const float* HWY_RESTRICT q, int q_heads, const KvView& kv, const Mask& mask,
                 const T* k_base, const T* v_base, float* HWY_RESTRICT out,
                 const AttendOptions& options) {
  const AttendPlan p = MakePlan<T>(q_heads, kv, mask);
  AttendTasks& lists = ThreadTasks();
  lists.tasks.clear();
  lists.merges.clear();
  size_t partial_floats = 0;
  for (int r = 0; r < mask.rows; ++r) {
    for (int32_t q0 = 0; q0 < p.queries; q0 += p.tile) {
      const int32_t q1 = std::min(p.queries, q0 + p.tile);
      std::vector<int32_t>& starts = lists.starts;
      starts.clear();
      if (options.chunk > 0 && q1 - q0 == 1) ChunkStarts(p, mask, r, q0, options.chunk, &starts);
      for (int kh = 0; kh < p.kv_heads; ++kh) {
        AttendTask task;
        task.r = r;
        task.q0 = q0;
        task.q1 = q1;
        task.kh = kh;
        if (starts.size() < 2) {
          lists.tasks.push_back(task);
          continue;
        }
        AttendMerge merge;
        merge.first = lists.tasks.size();
        merge.chunks = starts.size();
        merge.out = out + ((static_cast<size_t>(r) * p.queries + q0) * p.q_heads +
                           static_cast<size_t>(kh) * p.group) * p.dim;
        lists.merges.push_back(merge);
        for (size_t c = 0; c < starts.size(); ++c) {
          task.begin = starts[c];
          task.end = c + 1 < starts.size() ? starts[c + 1] : p.slots;
          task.chunk = static_cast<int32_t>(c);
          task.partial = partial_floats;
          partial_floats += PartialFloats(p);
          lists.tasks.push_back(task);
        }
      }
    }
  }
  if (lists.partials.size() < partial_floats) lists.partials.resize(partial_floats);
  const AttendCall<T> call{&p, q, &kv, &mask, k_base, v_base, out, &lists};
  const AttendCall<T>* c = &call;
  RunTasks(options.pool, lists.tasks.size(), [c](size_t i) { c->Run(i); });
  for (const AttendMerge& merge : lists.merges) {
    MergeChunks(p, &lists.partials[lists.tasks[merge.first].partial], merge.chunks, merge.out);
  }
}

void AttendImpl(const float* HWY_RESTRICT q, int q_heads, const KvView& kv,
                const Mask& mask, float* HWY_RESTRICT out, const AttendOptions& options) {
  if (kv.bf16()) {
    AttendTyped(q, q_heads, kv, mask, kv.k_bf16, kv.v_bf16, out, options);
  } else {
    AttendTyped(q, q_heads, kv, mask, kv.k, kv.v, out, options);
  }
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }
bool SegmentsKeys() { return KVSPEC_SUMS_OF_16 != 0; }

}  // namespace HWY_NAMESPACE
}  // namespace kvspec
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvspec {

HWY_EXPORT(AttendImpl);
HWY_EXPORT(TargetName);
HWY_EXPORT(SegmentsKeys);

AttentionRequests AttentionRequestsOn(bool bf16) {
  // 0: elsewhere, 1: Intel, 2: AMD family 0x1A (Zen 5) or later.
#if HWY_ARCH_X86 && (defined(__GNUC__) || defined(__clang__))
  static const int cpu = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_is("intel")) return 1;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__builtin_cpu_is("amd") || !__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    const unsigned base = (eax >> 8) & 0xF;
    const unsigned family = base == 0xF ? base + ((eax >> 20) & 0xFF) : base;
    return family >= 0x1A ? 2 : 0;
  }();
#else
  const int cpu = 0;
#endif
  AttentionRequests r;
  if (cpu == 1 || (cpu == 2 && bf16)) {
    r.along = RowRequest::kL1;
  } else {
    r.along = cpu == 2 ? RowRequest::kNonTemporal : RowRequest::kL2;
    r.block_start_l1 = !bf16;
  }
  r.segments = cpu == 2 ? RowRequest::kNonTemporal : RowRequest::kL1;
  if (cpu == 2) {
    if (bf16) r.segments_ahead_short = 4096;  // SegmentsAheadBytes
    r.segments_below = 1024;
  }
  return r;
}

// Precondition, enforced in every build: q_heads >= 1, kv_heads >= 1 and
// q_heads a multiple of kv_heads (each KV head serves a whole group of query
// heads). Callers validate shapes first (Layout::Create refuses such a
// layer), so a violation is a programming error: it aborts with a message
// rather than reading out of bounds.
void AttendWith(const float* q, int q_heads, const KvView& kv, const Mask& mask, float* out,
                const AttendOptions& options) {
  if (q_heads < 1 || kv.kv_heads < 1 || q_heads % kv.kv_heads != 0) {
    std::fprintf(stderr, "kvspec::Attend: %d query heads over %d KV heads (need a multiple)\n",
                 q_heads, kv.kv_heads);
    std::abort();
  }
  if (options.chunk < 0 || options.chunk % kAttendChunkMultiple != 0) {
    std::fprintf(stderr, "kvspec::Attend: chunk %d is not a non-negative multiple of %d\n",
                 options.chunk, kAttendChunkMultiple);
    std::abort();
  }
  HWY_DYNAMIC_DISPATCH(AttendImpl)(q, q_heads, kv, mask, out, options);
}

void Attend(const float* q, int q_heads, const KvView& kv, const Mask& mask, float* out) {
  AttendWith(q, q_heads, kv, mask, out, AttendOptions());
}

const char* AttentionTargetName() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }
bool AttentionScoresInSegments() { return HWY_DYNAMIC_DISPATCH(SegmentsKeys)(); }

}  // namespace kvspec
#endif  // HWY_ONCE

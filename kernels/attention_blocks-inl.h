// The blocking of an Attend call (kernels/attention.cc), per Highway target:
// its plan (block and tile sizes), the scratch reused across calls, the
// query tiles, and the walk over one head's slots in blocks (ForEachBlock)
// that hands each block's admitted rows to a score or value pass.
//
// Included by attention.cc once per target (foreach_target), hence the
// toggle guard instead of #pragma once.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "kvspec/kernels/attention.h"  // AttentionRequests, AttentionRequestsOn
#include "kvspec/kernels/kv_view.h"
#include "kvspec/kernels/mask.h"

#if defined(KVSPEC_KERNELS_ATTENTION_BLOCKS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVSPEC_KERNELS_ATTENTION_BLOCKS_INL_H_
#undef KVSPEC_KERNELS_ATTENTION_BLOCKS_INL_H_
#else
#define KVSPEC_KERNELS_ATTENTION_BLOCKS_INL_H_
#endif

#include "hwy/highway.h"
#include "kvspec/kernels/attention-inl.h"

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
      std::max<size_t>(8, block_bytes / RowBytes<T>(static_cast<size_t>(p.dim))));
  // Queries go in tiles of 32: a tile's scores ([32][group][slots]) stay
  // in L2 or L3 between its score, softmax and value passes, where those of
  // a forward of 512 queries would not, and each tile reads the admitted
  // keys and values once (a window forward of 512 queries about 16% faster
  // than untiled). A query's arithmetic does not depend on its tile.
  p.tile = std::min<int32_t>(p.queries, 32);
  // q8_0 and q4_0 rows, shorter still than bf16's, take bf16's requests.
  p.requests = AttentionRequestsOn(sizeof(T) != sizeof(float));
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

// out[i] = first + i * dim for i < n, dim in units of T (n a multiple of the vector length of
// 32-bit lanes): with 64-bit pointers, whole vectors of addresses at a time
// (cold decode up to 3% faster at dim 64 than one address at a time).
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
// slot by slot. The block is the same either way. Against slot by slot
// alone: cold bf16 decode about 5-9% faster on AVX-512; see
// docs/benchmarks.md.
template <typename T>
HWY_INLINE void GatherBlock(const AttendPlan& p, const QueryTile& tile, const T* head, int32_t t0,
                            int32_t end, Block<T>* b) {
  const hn::ScalableTag<int32_t> di;
  const int32_t N = static_cast<int32_t>(hn::Lanes(di));
  const int32_t slots = p.slots;
  const size_t dim = RowUnits<T>(static_cast<size_t>(p.dim));  // a row, in units of T
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
// hardware prefetcher alone does not (a cold fp32 decode of 32768 tokens
// about 25% faster than with the next block requested at once before its
// computation). Where the requests bring the rows, and whether each
// block's rows are requested again into L1 as its computation starts,
// depends on the CPU (AttentionRequestsOn, attention_requests.cc).
template <typename T, class Sink>
HWY_INLINE void ForEachBlock(const AttendPlan& p, const QueryTile& tile, const T* head,
                             AttendScratch<T>& scratch, Sink& sink, int32_t begin,
                             int32_t end) {
  const int32_t slots = end;
  const int32_t block = p.block;
  const size_t row_bytes = RowBytes<T>(static_cast<size_t>(p.dim));
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

}  // namespace HWY_NAMESPACE
}  // namespace kvspec
HWY_AFTER_NAMESPACE();

#endif  // KVSPEC_KERNELS_ATTENTION_BLOCKS_INL_H_ toggle

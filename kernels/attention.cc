// Attention kernels: Highway version (per target) and scalar reference.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvspec {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// N lanes of stored keys or values as fp32: fp32 storage, or bf16 storage
// (the upper half of an fp32) widened exactly.
HWY_INLINE VF LoadLanes(DF d, const float* HWY_RESTRICT p) { return hn::LoadU(d, p); }
HWY_INLINE VF LoadLanes(DF d, const uint16_t* HWY_RESTRICT p) {
  const hn::Rebind<uint16_t, DF> d16;
  const hn::RebindToUnsigned<DF> d32;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(d32, hn::LoadU(d16, p))));
}
HWY_INLINE float Element(const float* p, int i) { return p[i]; }
HWY_INLINE float Element(const uint16_t* p, int i) { return Bf16ToFloat(p[i]); }

// out[i] = the sum of the lanes of v_i, for four vectors at once. Each sum
// follows one tree whatever the other vectors hold: lanes (0 + 2) + (1 + 3)
// within each 128-bit block, then the blocks in order, so a score does not
// depend on which vectors share its reduction.
HWY_INLINE void SumsOf4(DF d, VF v0, VF v1, VF v2, VF v3, float* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_SCALAR
  (void)d;
  out[0] = hn::GetLane(v0);
  out[1] = hn::GetLane(v1);
  out[2] = hn::GetLane(v2);
  out[3] = hn::GetLane(v3);
#else
  const hn::Repartition<uint64_t, DF> d64;
  const VF s01 = hn::Add(hn::InterleaveLower(d, v0, v1), hn::InterleaveUpper(d, v0, v1));
  const VF s23 = hn::Add(hn::InterleaveLower(d, v2, v3), hn::InterleaveUpper(d, v2, v3));
  const auto w01 = hn::BitCast(d64, s01);
  const auto w23 = hn::BitCast(d64, s23);
  // Per block: lane i = (v_i[0] + v_i[2]) + (v_i[1] + v_i[3]).
  const VF r = hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, w01, w23)),
                       hn::BitCast(d, hn::InterleaveUpper(d64, w01, w23)));
  const size_t N = hn::Lanes(d);
  HWY_ALIGN float lanes[16];  // x86 vectors hold at most 16 floats
  hn::Store(r, d, lanes);
  for (size_t i = 0; i < 4; ++i) {
    float sum = lanes[i];
    for (size_t b = 4; b < N; b += 4) sum += lanes[b + i];
    out[i] = sum;
  }
#endif
}

// v, held in a register: the compiler may not fold its load into each
// instruction that uses it (one load, not one per use, for a query vector
// that meets several keys).
HWY_INLINE VF InRegister(VF v) {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_EMU128 && (defined(__GNUC__) || defined(__clang__))
  asm("" : "+x"(v.raw));
#endif
  return v;
}

// Requests the cache lines of [p, p + bytes) (p + bytes need not be valid).
HWY_INLINE void PrefetchSpan(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t b = 0; b < bytes; b += 64) hwy::Prefetch(c + b);
}

// Requests the rows rows[from, to), each `bytes` long.
template <typename T>
HWY_INLINE void PrefetchRows(const T* const* rows, size_t from, size_t to, size_t bytes) {
  for (size_t k = from; k < to; ++k) PrefetchSpan(rows[k], bytes);
}

// The largest of p[0, n) (n > 0).
HWY_INLINE float MaxOf(const float* HWY_RESTRICT p, size_t n) {
  const DF d;
  const size_t N = hn::Lanes(d);
  float max = p[0];
  size_t j = 0;
  if (n >= N) {
    VF m = hn::LoadU(d, p);
    for (j = N; j + N <= n; j += N) m = hn::Max(m, hn::LoadU(d, p + j));
    max = hn::GetLane(hn::MaxOfLanes(d, m));
  }
  for (; j < n; ++j) max = p[j] > max ? p[j] : max;
  return max;
}

// The sum of p[0, n): whole vectors into one vector accumulator, its lanes
// reduced, then the tail in order. A fixed function of n and the values,
// like every step of a query's softmax, so it does not depend on where the
// query's slots sit.
HWY_INLINE float SumOf(const float* HWY_RESTRICT p, size_t n) {
  const DF d;
  const size_t N = hn::Lanes(d);
  VF a = hn::Zero(d);
  size_t j = 0;
  for (; j + N <= n; j += N) a = hn::Add(a, hn::LoadU(d, p + j));
  float sum = hn::GetLane(hn::SumOfLanes(d, a));
  for (; j < n; ++j) sum += p[j];
  return sum;
}

// Scores of kG query heads (their queries dim floats apart from q) against
// the keys of kS slots: out[g * stride + s] = (q_g . key_s) * scale.
// Each (head, slot) pair has its own accumulator, fed one vector of lanes
// at a time in dim order and reduced once, then the scalar tail: the same
// arithmetic for every pair whatever kG and kS, so a slot's score does not
// depend on the block it falls in. Blocks of several slots and heads let
// each loaded key vector feed kG multiply-adds and each query vector kS.
template <int kG, int kS, typename T>
HWY_INLINE void ScoreBlock(const float* HWY_RESTRICT q, int dim, const T* const* keys,
                           float scale, float* HWY_RESTRICT out, size_t stride) {
  const DF d;
  const int N = static_cast<int>(hn::Lanes(d));
  VF acc[kG][kS];
  HWY_UNROLL(4)
  for (int g = 0; g < kG; ++g) {
    HWY_UNROLL(4)
    for (int s = 0; s < kS; ++s) acc[g][s] = hn::Zero(d);
  }
  int i = 0;
  for (; i + N <= dim; i += N) {
    VF k[kS];
    HWY_UNROLL(4)
    for (int s = 0; s < kS; ++s) k[s] = LoadLanes(d, keys[s] + i);
    HWY_UNROLL(4)
    for (int g = 0; g < kG; ++g) {
      const VF qv = InRegister(hn::LoadU(d, q + g * dim + i));
      HWY_UNROLL(4)
      for (int s = 0; s < kS; ++s) acc[g][s] = hn::MulAdd(qv, k[s], acc[g][s]);
    }
  }
  // Lane sums, four accumulators at a time (zeros fill the last four).
  constexpr int kPairs = kG * kS;
  float sums[(kPairs + 3) / 4 * 4];
  HWY_UNROLL(4)
  for (int p = 0; p < kPairs; p += 4) {
    const VF zero = hn::Zero(d);
    SumsOf4(d, acc[p / kS][p % kS], p + 1 < kPairs ? acc[(p + 1) / kS][(p + 1) % kS] : zero,
            p + 2 < kPairs ? acc[(p + 2) / kS][(p + 2) % kS] : zero,
            p + 3 < kPairs ? acc[(p + 3) / kS][(p + 3) % kS] : zero, sums + p);
  }
  HWY_UNROLL(4)
  for (int g = 0; g < kG; ++g) {
    HWY_UNROLL(4)
    for (int s = 0; s < kS; ++s) {
      float sum = sums[g * kS + s];
      for (int t = i; t < dim; ++t) sum += q[g * dim + t] * Element(keys[s], t);
      out[static_cast<size_t>(g) * stride + s] = sum * scale;
    }
  }
}

// Scores of query heads [0, group) (queries dim floats apart from q) over
// the admitted slots, in blocks of heads and slots.
// Along the way, the rows pf[0, npf) are prefetched, one per slot scored,
// so that memory keeps fetching while the block computes.
template <typename T>
HWY_INLINE void Scores(const float* HWY_RESTRICT q, int group, int dim, const T* const* keys,
                       size_t n, float scale, float* HWY_RESTRICT scores, size_t stride,
                       const T* const* pf, size_t npf) {
  const size_t row_bytes = static_cast<size_t>(dim) * sizeof(T);
  int g = 0;
  for (; g + 4 <= group; g += 4) {
    const float* qg = q + g * dim;
    float* sg = scores + g * stride;
    size_t j = 0;
    // Threes, then twos for the rest (a lone slot only when n is 1).
    const size_t threes = n % 3 == 1 && n > 1 ? n - 4 : n - n % 3;
    for (; j < threes; j += 3) {
      PrefetchRows(pf, j, std::min(j + 3, npf), row_bytes);
      ScoreBlock<4, 3>(qg, dim, keys + j, scale, sg + j, stride);
    }
    for (; j + 2 <= n; j += 2) {
      PrefetchRows(pf, j, std::min(j + 2, npf), row_bytes);
      ScoreBlock<4, 2>(qg, dim, keys + j, scale, sg + j, stride);
    }
    for (; j < n; ++j) ScoreBlock<4, 1>(qg, dim, keys + j, scale, sg + j, stride);
    PrefetchRows(pf, j, npf, row_bytes);
    npf = 0;  // the other heads read the same rows
  }
  for (; g < group; ++g) {
    const float* qg = q + g * dim;
    float* sg = scores + g * stride;
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
      PrefetchRows(pf, j, std::min(j + 4, npf), row_bytes);
      ScoreBlock<1, 4>(qg, dim, keys + j, scale, sg + j, stride);
    }
    for (; j < n; ++j) ScoreBlock<1, 1>(qg, dim, keys + j, scale, sg + j, stride);
    PrefetchRows(pf, j, npf, row_bytes);
    npf = 0;
  }
}

// acc_g[0, dim) += sum over j in [0, n), in order, of w[g * stride + j] *
// value_j, for kG heads (acc_g dim floats apart). Every output lane sees the
// same sequence of multiply-adds whatever the blocking of heads, slots or
// lanes, so results are bit-identical across blockings. Lanes go in chunks
// of two vectors held in registers over the n slots (the caller keeps n
// small enough for the n values to stay in L1 across the chunks).
template <int kG, typename T>
HWY_INLINE void ValueBlock(const float* HWY_RESTRICT w, size_t stride, const T* const* values,
                           size_t n, int dim, float* HWY_RESTRICT acc,
                           const T* const* pf = nullptr, size_t npf = 0) {
  const DF d;
  const int N = static_cast<int>(hn::Lanes(d));
  int i = 0;
  for (; i + 2 * N <= dim; i += 2 * N) {
    VF a[kG][2];
    HWY_UNROLL(4)
    for (int g = 0; g < kG; ++g) {
      a[g][0] = hn::LoadU(d, acc + g * dim + i);
      a[g][1] = hn::LoadU(d, acc + g * dim + i + N);
    }
    for (size_t j = 0; j < n; ++j) {
      // The same lanes of another row, wanted soon (see Scores).
      if (j < npf) PrefetchSpan(pf[j] + i, 2 * N * sizeof(T));
      const VF v0 = LoadLanes(d, values[j] + i);
      const VF v1 = LoadLanes(d, values[j] + i + N);
      HWY_UNROLL(4)
      for (int g = 0; g < kG; ++g) {
        const VF wv = hn::Set(d, w[g * stride + j]);
        a[g][0] = hn::MulAdd(wv, v0, a[g][0]);
        a[g][1] = hn::MulAdd(wv, v1, a[g][1]);
      }
    }
    HWY_UNROLL(4)
    for (int g = 0; g < kG; ++g) {
      hn::StoreU(a[g][0], d, acc + g * dim + i);
      hn::StoreU(a[g][1], d, acc + g * dim + i + N);
    }
  }
  // The rows past n, or all of them when no whole chunk prefetched any.
  PrefetchRows(pf, i == 0 ? 0 : n, npf, static_cast<size_t>(dim) * sizeof(T));
  for (; i + N <= dim; i += N) {
    VF a[kG];
    HWY_UNROLL(4)
    for (int g = 0; g < kG; ++g) a[g] = hn::LoadU(d, acc + g * dim + i);
    for (size_t j = 0; j < n; ++j) {
      const VF v0 = LoadLanes(d, values[j] + i);
      HWY_UNROLL(4)
      for (int g = 0; g < kG; ++g) a[g] = hn::MulAdd(hn::Set(d, w[g * stride + j]), v0, a[g]);
    }
    HWY_UNROLL(4)
    for (int g = 0; g < kG; ++g) hn::StoreU(a[g], d, acc + g * dim + i);
  }
  for (; i < dim; ++i) {
    for (size_t j = 0; j < n; ++j) {
      const float x = Element(values[j], i);
      HWY_UNROLL(4)
      for (int g = 0; g < kG; ++g) acc[g * dim + i] = hn::GetLane(hn::MulAdd(
          hn::Set(d, w[g * stride + j]), hn::Set(d, x), hn::Set(d, acc[g * dim + i])));
    }
  }
}

// p[i] = exp(p[i] - max) for i < count; p has room for a whole vector more.
HWY_INLINE void ExpShifted(float* HWY_RESTRICT p, size_t count, float max) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const auto vmax = hn::Set(d, max);
  for (size_t i = count; i % N != 0; ++i) p[i] = max;  // padding lanes
  for (size_t i = 0; i < count; i += N) {
    hn::StoreU(hn::Exp(d, hn::Sub(hn::LoadU(d, p + i), vmax)), d, p + i);
  }
}

// Per (row, KV head), for all the row's queries at once: the slots in
// logical order are cut into blocks of about 16 KiB of keys (or values);
// each block, read from memory once, serves every query that admits some
// of its slots while it sits in L1 (a window of L queries reads the cache
// once, not L times). Per query: the scores of the group's query heads over
// its admitted slots in logical order, a softmax per head, then the values
// of its admitted slots in logical order. Which block a slot falls in
// changes no arithmetic (ScoreBlock, ValueBlock), so outputs do not depend
// on the layout.
template <typename T>
void AttendTyped(const float* HWY_RESTRICT q, int q_heads, const KvView& kv, const Mask& mask,
                 const T* k_base, const T* v_base, float* HWY_RESTRICT out) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const int dim = kv.dim;
  const int group = q_heads / kv.kv_heads;
  const int32_t queries = mask.queries;
  const int32_t slots = mask.slots;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const size_t padded = (static_cast<size_t>(slots) + N) / N * N;
  const size_t per_query = static_cast<size_t>(group) * padded;  // [group][padded]
  // Slots per block: 8 KiB of keys for a decode (smaller blocks start the
  // prefetch of the next sooner), 16 KiB when many queries share each block.
  const size_t block_bytes = queries == 1 ? 8192 : 16384;
  const int32_t block = static_cast<int32_t>(
      std::max<size_t>(8, block_bytes / (static_cast<size_t>(dim) * sizeof(T))));
  // Queries go in tiles of 32: a tile's scores ([32][group][slots]) stay
  // in L2 or L3 between its score, softmax and value passes, where those of
  // a forward of 512 queries would not, and each tile reads the admitted
  // keys and values once (window forward of 512 queries after 1024 tokens:
  // 16% faster than untiled, 64 queries: 12%; 16-query tiles lost at 128).
  // A query's arithmetic does not depend on its tile.
  const int32_t tile = std::min<int32_t>(queries, 32);
  // Scratch reused across calls on this thread (grown, never shrunk).
  thread_local std::vector<float> scores;  // [tile][group][padded]
  thread_local std::vector<float> acc;     // [tile][group][dim]
  thread_local std::vector<float> sums;    // [tile][group]
  thread_local std::vector<size_t> count;  // [tile]: admitted so far
  thread_local std::vector<int32_t> block_pos;     // a block's candidate slots:
  thread_local std::vector<const T*> block_rows;  // positions and rows
  thread_local std::vector<const T*> ptrs;  // one query's admitted rows in a block
  const size_t nq = static_cast<size_t>(tile);
  if (scores.size() < nq * per_query) scores.resize(nq * per_query);
  if (acc.size() < nq * group * dim) acc.resize(nq * group * dim);
  if (sums.size() < nq * group) sums.resize(nq * group);
  count.assign(nq, 0);
  block_pos.resize(2 * static_cast<size_t>(block));  // this block and the next
  block_rows.resize(2 * static_cast<size_t>(block));
  ptrs.resize(static_cast<size_t>(block));
  const auto at = [&](const T* base, int r, int kh, int32_t s) {
    return base + r * kv.row_stride + kh * kv.head_stride + static_cast<size_t>(s) * dim;
  };

  for (int r = 0; r < mask.rows; ++r) {
    const int32_t* pos = mask.slot_pos + r * mask.slot_stride;
    const int32_t* lo = mask.lo.data() + static_cast<size_t>(r) * queries;
    const int32_t* hi = mask.hi.data() + static_cast<size_t>(r) * queries;
    for (int32_t q0 = 0; q0 < queries; q0 += tile) {
      const int32_t q1 = std::min(queries, q0 + tile);
      // No query of the tile admits a slot outside [min_lo, max_hi].
      int32_t min_lo = std::numeric_limits<int32_t>::max();
      int32_t max_hi = std::numeric_limits<int32_t>::min();
      for (int32_t qi = q0; qi < q1; ++qi) {
        min_lo = std::min(min_lo, lo[qi]);
        max_hi = std::max(max_hi, hi[qi]);
      }
      // Calls fn(query, rows, n, pf, npf) for every block of logical slots, in
      // order, and every query with n > 0 admitted slots in it (rows in
      // logical order). A query whose range covers the block's positions takes
      // the block's list as it is; one that misses them skips it. The first
      // call of a block also gets the next block's candidate rows (pf, npf) to
      // prefetch along its computation, the others none: memory keeps working
      // while a block computes, as one core's hardware prefetcher alone does
      // not (decode over 32768 fp32 tokens: 25% less time here than with the
      // next block's prefetches issued at once before its computation).
      // A block's candidate slots (those some query of the tile may admit):
      // positions, rows, and the range of the positions.
      struct Block {
        int32_t* pos;
        const T** rows;
        size_t n;
        int32_t min, max;
      };
      const auto gather = [&](const T* base, int kh, int32_t t0, Block* b) {
        const int32_t t1 = std::min(slots, t0 + block);
        const T* head = at(base, r, kh, 0);
        // Locals, not *b, in the loop: the stores to b->pos could alias them.
        int32_t* bpos = b->pos;
        const T** brows = b->rows;
        size_t n = 0;
        int32_t bmin = std::numeric_limits<int32_t>::max();
        int32_t bmax = std::numeric_limits<int32_t>::min();
        for (int32_t t = t0; t < t1; ++t) {
          const int32_t s = mask.first_slot + t < slots ? mask.first_slot + t
                                                        : mask.first_slot + t - slots;
          const int32_t p = pos[s];
          if (p < min_lo || p > max_hi) continue;  // no query reads it
          bpos[n] = p;
          brows[n++] = head + static_cast<size_t>(s) * dim;
          bmin = std::min(bmin, p);
          bmax = std::max(bmax, p);
        }
        b->n = n;
        b->min = bmin;
        b->max = bmax;
      };
      const auto for_each_block = [&](const T* base, int kh, const auto& fn) {
        Block cur{block_pos.data(), block_rows.data(), 0, 0, 0};
        Block next{cur.pos + block, cur.rows + block, 0, 0, 0};
        gather(base, kh, 0, &cur);
        for (int32_t t0 = 0; t0 < slots; t0 += block) {
          next.n = 0;
          if (t0 + block < slots) gather(base, kh, t0 + block, &next);
          size_t npf = next.n;  // given to the block's first call only
          for (int32_t qi = q0; qi < q1 && cur.n > 0; ++qi) {
            if (hi[qi] < cur.min || lo[qi] > cur.max) continue;
            if (lo[qi] <= cur.min && hi[qi] >= cur.max) {
              fn(qi, cur.rows, cur.n, next.rows, npf);
              npf = 0;
              continue;
            }
            size_t n = 0;
            for (size_t i = 0; i < cur.n; ++i) {
              if (cur.pos[i] >= lo[qi] && cur.pos[i] <= hi[qi]) ptrs[n++] = cur.rows[i];
            }
            if (n > 0) {
              fn(qi, ptrs.data(), n, next.rows, npf);
              npf = 0;
            }
          }
          // No query used the block: request the next one all the same.
          PrefetchRows(next.rows, 0, npf, static_cast<size_t>(dim) * sizeof(T));
          std::swap(cur, next);
        }
      };
      for (int kh = 0; kh < kv.kv_heads; ++kh) {
        std::fill(count.begin(), count.end(), 0);
        for_each_block(k_base, kh, [&](int32_t qi, const T* const* keys, size_t n,
                                       const T* const* pf, size_t npf) {
          const size_t t = static_cast<size_t>(qi - q0);  // in the tile
          const float* qh =
              q + ((static_cast<size_t>(r) * queries + qi) * q_heads + kh * group) * dim;
          Scores(qh, group, dim, keys, n, scale, &scores[t * per_query + count[t]], padded, pf,
                 npf);
          count[t] += n;
        });
        for (int32_t qi = q0; qi < q1; ++qi) {
          for (int g = 0; g < group; ++g) {
            float* p = &scores[(qi - q0) * per_query + g * padded];
            const size_t n = count[qi - q0];
            if (n == 0) continue;
            ExpShifted(p, n, MaxOf(p, n));
            sums[(qi - q0) * group + g] = SumOf(p, n);
          }
        }
        std::fill(acc.begin(), acc.begin() + static_cast<size_t>(q1 - q0) * group * dim, 0.0f);
        std::fill(count.begin(), count.end(), 0);
        for_each_block(v_base, kh, [&](int32_t qi, const T* const* values, size_t n,
                                       const T* const* pf, size_t npf) {
          float* a = &acc[static_cast<size_t>(qi - q0) * group * dim];
          const float* w = &scores[(qi - q0) * per_query + count[qi - q0]];
          int g = 0;
          for (; g + 4 <= group; g += 4) {
            ValueBlock<4>(w + g * padded, padded, values, n, dim, a + static_cast<size_t>(g) * dim,
                          pf, npf);
            npf = 0;
          }
          for (; g < group; ++g) {
            ValueBlock<1>(w + g * padded, padded, values, n, dim, a + static_cast<size_t>(g) * dim,
                          pf, npf);
            npf = 0;
          }
          count[qi - q0] += n;
        });
        for (int32_t qi = q0; qi < q1; ++qi) {
          float* o = out + ((static_cast<size_t>(r) * queries + qi) * q_heads + kh * group) * dim;
          if (count[qi - q0] == 0) {  // a query that sees nothing gets zeros
            std::memset(o, 0, sizeof(float) * group * dim);
            continue;
          }
          const float* a = &acc[static_cast<size_t>(qi - q0) * group * dim];
          for (int g = 0; g < group; ++g) {
            const float sum = sums[(qi - q0) * group + g];
            for (int i = 0; i < dim; ++i) o[g * dim + i] = a[g * dim + i] / sum;
          }
        }
      }
    }
  }
}

void AttendImpl(const float* HWY_RESTRICT q, int q_heads, const KvView& kv,
                const Mask& mask, float* HWY_RESTRICT out) {
  if (kv.bf16()) {
    AttendTyped(q, q_heads, kv, mask, kv.k_bf16, kv.v_bf16, out);
  } else {
    AttendTyped(q, q_heads, kv, mask, kv.k, kv.v, out);
  }
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace kvspec
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvspec {

HWY_EXPORT(AttendImpl);
HWY_EXPORT(TargetName);

void Attend(const float* q, int q_heads, const KvView& kv, const Mask& mask,
            float* out) {
  HWY_DYNAMIC_DISPATCH(AttendImpl)(q, q_heads, kv, mask, out);
}

const char* AttentionTargetName() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

namespace {

float StoredKey(const KvView& kv, int r, int h, int32_t s, int i) {
  return kv.bf16() ? Bf16ToFloat(kv.KeyBf16(r, h, s)[i]) : kv.Key(r, h, s)[i];
}
float StoredValue(const KvView& kv, int r, int h, int32_t s, int i) {
  return kv.bf16() ? Bf16ToFloat(kv.ValueBf16(r, h, s)[i]) : kv.Value(r, h, s)[i];
}

}  // namespace

void AttendReference(const float* q, int q_heads, const KvView& kv,
                     const Mask& mask, float* out) {
  const int dim = kv.dim;
  const int group = q_heads / kv.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  std::vector<float> score(static_cast<size_t>(mask.slots));
  std::vector<int32_t> admitted(static_cast<size_t>(mask.slots));
  std::vector<float> acc(static_cast<size_t>(dim));
  for (int r = 0; r < mask.rows; ++r) {
    for (int32_t qi = 0; qi < mask.queries; ++qi) {
      const size_t rq = static_cast<size_t>(r) * mask.queries + qi;
      size_t n = 0;
      for (int32_t t = 0; t < mask.slots; ++t) {
        const int32_t s = (mask.first_slot + t) % mask.slots;
        if (mask.Admits(r, qi, s)) admitted[n++] = s;
      }
      for (int h = 0; h < q_heads; ++h) {
        const int kh = h / group;
        const float* qv = q + (rq * q_heads + h) * dim;
        float* o = out + (rq * q_heads + h) * dim;
        if (n == 0) {
          for (int i = 0; i < dim; ++i) o[i] = 0.0f;
          continue;
        }
        float max = -INFINITY;
        for (size_t j = 0; j < n; ++j) {
          float dot = 0.0f;
          for (int i = 0; i < dim; ++i) dot += qv[i] * StoredKey(kv, r, kh, admitted[j], i);
          score[j] = dot * scale;
          if (score[j] > max) max = score[j];
        }
        float sum = 0.0f;
        for (int i = 0; i < dim; ++i) acc[i] = 0.0f;
        for (size_t j = 0; j < n; ++j) {
          const float w = std::exp(score[j] - max);
          sum += w;
          for (int i = 0; i < dim; ++i) acc[i] += w * StoredValue(kv, r, kh, admitted[j], i);
        }
        for (int i = 0; i < dim; ++i) o[i] = acc[i] / sum;
      }
    }
  }
}

}  // namespace kvspec
#endif  // HWY_ONCE

// The SIMD building blocks of the attention kernel (kernels/attention.cc),
// per Highway target (loading stored keys and values: kv_load-inl.h): the
// score blocks (ScoreBlock, Scores), the weighted value sums (ValueBlock)
// and the softmax steps (MaxOf, ExpShifted, SumOf). Every one applies the
// same arithmetic to a slot whatever block it falls in, which is what makes
// Attend's output independent of padding, batch neighbours and ring phase.
//
// Included once per target (foreach_target) by attention.cc (and the
// -inl.h files it includes) and by the benchmarks that mirror the kernel's
// reads, hence the toggle guard instead of #pragma once.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kvspec/kernels/attention.h"  // RowRequest
#include "kvspec/kernels/kv_view.h"

#if defined(KVSPEC_KERNELS_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVSPEC_KERNELS_ATTENTION_INL_H_
#undef KVSPEC_KERNELS_ATTENTION_INL_H_
#else
#define KVSPEC_KERNELS_ATTENTION_INL_H_
#endif

#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kvspec/kernels/in_register-inl.h"
#include "kvspec/kernels/kv_load-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvspec {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// out[i] = the sum of the lanes of v_i, for four vectors at once. Each sum
// follows one tree whatever the other vectors hold: lanes (0 + 2) + (1 + 3)
// within each 128-bit block, then the blocks in order, so a score does not
// depend on which vectors share its reduction.
#if HWY_TARGET != HWY_SCALAR
// The first step of SumsOf4: per 128-bit block, lane i = (v_i[0] +
// v_i[2]) + (v_i[1] + v_i[3]).
HWY_INLINE VF BlockSumsOf4(DF d, VF v0, VF v1, VF v2, VF v3) {
  const hn::Repartition<uint64_t, DF> d64;
  const VF s01 = hn::Add(hn::InterleaveLower(d, v0, v1), hn::InterleaveUpper(d, v0, v1));
  const VF s23 = hn::Add(hn::InterleaveLower(d, v2, v3), hn::InterleaveUpper(d, v2, v3));
  const auto w01 = hn::BitCast(d64, s01);
  const auto w23 = hn::BitCast(d64, s23);
  return hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, w01, w23)),
                 hn::BitCast(d, hn::InterleaveUpper(d64, w01, w23)));
}
#endif

// Whether SumsOf16 exists: on 512-bit x86 targets.
#undef KVSPEC_SUMS_OF_16
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define KVSPEC_SUMS_OF_16 1
// SumsOf4 of four groups of four vectors at once, given each group's
// BlockSumsOf4 r_j: lane 4j + i = the sum of the lanes of the group's v_i,
// the same tree (its blocks added in order) in one vector, by a transpose
// of the four vectors' 128-bit blocks instead of a store and reloads.
HWY_INLINE VF SumsOf16(VF r0, VF r1, VF r2, VF r3) {
  const __m512 t0 = _mm512_shuffle_f32x4(r0.raw, r1.raw, 0x44);  // r0 b0 b1, r1 b0 b1
  const __m512 t1 = _mm512_shuffle_f32x4(r0.raw, r1.raw, 0xEE);  // r0 b2 b3, r1 b2 b3
  const __m512 t2 = _mm512_shuffle_f32x4(r2.raw, r3.raw, 0x44);
  const __m512 t3 = _mm512_shuffle_f32x4(r2.raw, r3.raw, 0xEE);
  const VF b0{_mm512_shuffle_f32x4(t0, t2, 0x88)};  // block 0 of r0, r1, r2, r3
  const VF b1{_mm512_shuffle_f32x4(t0, t2, 0xDD)};
  const VF b2{_mm512_shuffle_f32x4(t1, t3, 0x88)};
  const VF b3{_mm512_shuffle_f32x4(t1, t3, 0xDD)};
  return hn::Add(hn::Add(hn::Add(b0, b1), b2), b3);
}
#else
#define KVSPEC_SUMS_OF_16 0
#endif

HWY_INLINE void SumsOf4(DF d, VF v0, VF v1, VF v2, VF v3, float* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_SCALAR
  (void)d;
  out[0] = hn::GetLane(v0);
  out[1] = hn::GetLane(v1);
  out[2] = hn::GetLane(v2);
  out[3] = hn::GetLane(v3);
#else
  const VF r = BlockSumsOf4(d, v0, v1, v2, v3);
  const size_t N = hn::Lanes(d);
  HWY_ALIGN float lanes[16];  // x86 vectors hold at most 16 floats
  hn::Store(r, d, lanes);
  // The blocks in order, four lanes at a time: lane i = ((block0[i] +
  // block1[i]) + block2[i]) + ..., one vector add per block rather than
  // four scalar ones.
  const hn::Full128<float> d4;
  auto sum = hn::Load(d4, lanes);
  for (size_t b = 4; b < N; b += 4) sum = hn::Add(sum, hn::Load(d4, lanes + b));
  hn::StoreU(sum, d4, out);
#endif
}

// Requests the cache lines of [p, p + bytes) (p + bytes need not be
// valid), with __builtin_prefetch's locality kLocality: 3 into L1, 2 into
// L2, 0 non-temporal on x86 (prefetcht0, prefetcht1, prefetchnta).
template <int kLocality>
HWY_INLINE void PrefetchLines(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
#if defined(__GNUC__) || defined(__clang__)
  for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, 0, kLocality);
#else
  for (size_t b = 0; b < bytes; b += 64) hwy::Prefetch(c + b);
#endif
}

// The rows of the block after the one being computed on, requested a few
// at a time along its computation so that memory keeps fetching while the
// block computes (see ForEachBlock): rows[0, n), requested as `how` says.
template <typename T>
struct Ahead {
  const T* const* rows = nullptr;
  size_t n = 0;
  RowRequest how = RowRequest::kL2;
};

// Requests [p, p + bytes) as `how` says.
HWY_INLINE void PrefetchSpan(const void* p, size_t bytes, RowRequest how) {
  switch (how) {
    case RowRequest::kL1:
      PrefetchLines<3>(p, bytes);
      break;
    case RowRequest::kL2:
      PrefetchLines<2>(p, bytes);
      break;
    case RowRequest::kNonTemporal:
      PrefetchLines<0>(p, bytes);
      break;
  }
}

// Requests the rows [from, min(to, ahead.n)) of ahead, each `bytes` long.
template <typename T>
HWY_INLINE void PrefetchRows(const Ahead<T>& ahead, size_t from, size_t to, size_t bytes) {
  to = std::min(to, ahead.n);
  for (size_t k = from; k < to; ++k) PrefetchSpan(ahead.rows[k], bytes, ahead.how);
}

// How far ahead each segment of ScoresInSegments requests its rows of
// row_bytes, in bytes (AttentionRequests::segments_ahead, and
// segments_ahead_short for rows of at most 256 bytes, which may differ: a
// single distance for every row was slower at fp32 dims 128 and 256).
HWY_INLINE size_t SegmentsAheadBytes(const AttentionRequests& requests, size_t row_bytes) {
  return row_bytes <= 256 ? requests.segments_ahead_short : requests.segments_ahead;
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
// query's slots sit. SoftmaxAlong (attention_passes-inl.h) computes
// ExpShifted and SumOf incrementally along a lone query's value pass with
// the same bits (the decode-equals-forward tests hold them together):
// change them together.
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
  float sc[kS] = {};  // q8_0 and q4_0: the scales of the keys' current blocks
  for (; i + N <= dim; i += N) {
    if constexpr (kValuesPerUnit<T> > 1) {
      if (i % kKvBlockValues == 0) {
        HWY_UNROLL(4)
        for (int s = 0; s < kS; ++s) sc[s] = BlockScale(keys[s], static_cast<size_t>(i));
      }
    }
    VF k[kS];
    HWY_UNROLL(4)
    for (int s = 0; s < kS; ++s) k[s] = LoadScaled(d, keys[s], static_cast<size_t>(i), sc[s]);
    HWY_UNROLL(4)
    for (int g = 0; g < kG; ++g) {
      const VF qv = InRegister(hn::LoadU(d, q + g * dim + i));
      HWY_UNROLL(4)
      for (int s = 0; s < kS; ++s) acc[g][s] = hn::MulAdd(qv, k[s], acc[g][s]);
    }
  }
#if KVSPEC_SUMS_OF_16
  if constexpr (kG == 4 && kS == 4) {
    if (i == dim) {  // no scalar tail
      VF r[4];
      HWY_UNROLL(4)
      for (int g = 0; g < 4; ++g) {
        r[g] = BlockSumsOf4(d, acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
      }
      const VF scores = hn::Mul(SumsOf16(r[0], r[1], r[2], r[3]), hn::Set(d, scale));
      _mm_storeu_ps(out, _mm512_castps512_ps128(scores.raw));
      _mm_storeu_ps(out + stride, _mm512_extractf32x4_ps(scores.raw, 1));
      _mm_storeu_ps(out + 2 * stride, _mm512_extractf32x4_ps(scores.raw, 2));
      _mm_storeu_ps(out + 3 * stride, _mm512_extractf32x4_ps(scores.raw, 3));
      return;
    }
  }
#endif
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

// Slots per score block of four heads (Scores). With 32 vector registers,
// 4: 4x4 (16 accumulators) reaches more of the FMA peak than 4x3, and 4x5
// or 4x6 no more. On AVX2, with 16, 3: 12 accumulators, three keys and a
// query fit them, where 4x4's 16 accumulators alone did not and GCC kept
// two of them on the stack, reloading each key vector from memory for
// every head (cold decode about 12% faster; see docs/benchmarks.md). SSE4
// and SSSE3 keep 4: 4x3 made their bf16 decode slower.
#if HWY_TARGET == HWY_AVX2
constexpr int kScoreSlots = 3;
#else
constexpr int kScoreSlots = 4;
#endif

// Scores of query heads [0, group) (queries dim floats apart from q) over
// the admitted slots, in blocks of heads and slots.
// Along the way, the rows of ahead are requested, one per slot scored.
template <typename T>
HWY_INLINE void Scores(const float* HWY_RESTRICT q, int group, int dim, const T* const* keys,
                       size_t n, float scale, float* HWY_RESTRICT scores, size_t stride,
                       Ahead<T> ahead) {
  const size_t row_bytes = RowBytes<T>(static_cast<size_t>(dim));
  int g = 0;
  for (; g + 4 <= group; g += 4) {
    const float* qg = q + g * dim;
    float* sg = scores + g * stride;
    size_t j = 0;
    if constexpr (kScoreSlots == 3) {  // threes, then a two or a one
      for (; j + 3 <= n; j += 3) {
        PrefetchRows(ahead, j, j + 3, row_bytes);
        ScoreBlock<4, 3>(qg, dim, keys + j, scale, sg + j, stride);
      }
    } else {
      // Fours, then a three and a two, a three, or a two for the rest (a
      // lone slot only when n is 1).
      const size_t fours = n % 4 == 1 && n > 1 ? n - 5 : n - n % 4;
      for (; j < fours; j += 4) {
        PrefetchRows(ahead, j, j + 4, row_bytes);
        ScoreBlock<4, 4>(qg, dim, keys + j, scale, sg + j, stride);
      }
      if (j + 3 <= n && (n - j) % 2 == 1) {
        PrefetchRows(ahead, j, j + 3, row_bytes);
        ScoreBlock<4, 3>(qg, dim, keys + j, scale, sg + j, stride);
        j += 3;
      }
    }
    if (j + 2 <= n) {
      PrefetchRows(ahead, j, j + 2, row_bytes);
      ScoreBlock<4, 2>(qg, dim, keys + j, scale, sg + j, stride);
      j += 2;
    }
    if (j < n) {
      ScoreBlock<4, 1>(qg, dim, keys + j, scale, sg + j, stride);
      ++j;
    }
    PrefetchRows(ahead, j, ahead.n, row_bytes);
    ahead.n = 0;  // the other heads read the same rows
  }
  for (; g < group; ++g) {
    const float* qg = q + g * dim;
    float* sg = scores + g * stride;
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
      PrefetchRows(ahead, j, j + 4, row_bytes);
      ScoreBlock<1, 4>(qg, dim, keys + j, scale, sg + j, stride);
    }
    for (; j < n; ++j) ScoreBlock<1, 1>(qg, dim, keys + j, scale, sg + j, stride);
    PrefetchRows(ahead, j, ahead.n, row_bytes);
    ahead.n = 0;
  }
}

#if KVSPEC_SUMS_OF_16
// r[i] lane k = r[k] lane i on entry: a 16 x 16 transpose of floats.
HWY_INLINE void Transpose16(VF (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {  // pairs of rows, lanes interleaved
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i].raw, r[2 * i + 1].raw);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i].raw, r[2 * i + 1].raw);
  }
  __m512 u[16];
  for (int i = 0; i < 4; ++i) {  // then pairs of lanes
    const int b = 4 * i;
    const __m512d t0 = _mm512_castps_pd(t[b]), t1 = _mm512_castps_pd(t[b + 1]);
    const __m512d t2 = _mm512_castps_pd(t[b + 2]), t3 = _mm512_castps_pd(t[b + 3]);
    u[b] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[b + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[b + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[b + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  for (int i = 0; i < 2; ++i) {  // then 128-bit blocks, twice
    const int b = 8 * i;
    for (int k = 0; k < 4; ++k) {
      t[b + k] = _mm512_shuffle_f32x4(u[b + k], u[b + 4 + k], 0x88);
      t[b + 4 + k] = _mm512_shuffle_f32x4(u[b + k], u[b + 4 + k], 0xDD);
    }
  }
  for (int k = 0; k < 8; ++k) {
    r[k] = VF{_mm512_shuffle_f32x4(t[k], t[8 + k], 0x88)};
    r[8 + k] = VF{_mm512_shuffle_f32x4(t[k], t[8 + k], 0xDD)};
  }
}

// A lone query's scores in segments (ScoresInSegments) from this many rows.
constexpr size_t kSegmentsFrom = 256;

// The key pass of ScoresInSegments: the score blocks of the four segments'
// rows side by side into side, each segment's rows requested `ahead` rows
// ahead as `how` says.
template <typename T>
HWY_INLINE void SegmentKeys(const float* HWY_RESTRICT q, int dim, const T* const* keys,
                            size_t seg, size_t blocks, size_t ahead, RowRequest how, float scale,
                            float* HWY_RESTRICT side) {
  const size_t row_bytes = RowBytes<T>(static_cast<size_t>(dim));
  const T* const* k[4] = {keys, keys + seg, keys + 2 * seg, keys + 3 * seg};
  for (size_t j = 0; j < std::min(ahead, seg); ++j) {
    for (int s = 0; s < 4; ++s) PrefetchSpan(k[s][j], row_bytes, how);
  }
  for (size_t j = 0; j < seg; ++j) {
    if (j + ahead < seg) {
      for (int s = 0; s < 4; ++s) PrefetchSpan(k[s][j + ahead], row_bytes, how);
    }
    const T* rows[4] = {k[0][j], k[1][j], k[2][j], k[3][j]};
    for (size_t b = 0; b < blocks; ++b) {
      ScoreBlock<4, 4>(q + 4 * b * dim, dim, rows, scale, side + (j * blocks + b) * 16, 4);
    }
  }
}

// SegmentKeys out of line, for fp32. Inlined into ScoresInSegments, GCC 12
// (-O3, AVX3) kept two or three of a 4x4 block's four fp32 key vectors on
// the stack and reloaded them for each head's multiply-adds (objdump: 8-16
// vfmadd231ps with a stack operand); as a function of its own, none. bf16
// keeps its vectors in registers either way, and is faster inline.
template <typename T>
HWY_NOINLINE void SegmentKeysApart(const float* HWY_RESTRICT q, int dim, const T* const* keys,
                                   size_t seg, size_t blocks, size_t ahead, RowRequest how,
                                   float scale, float* HWY_RESTRICT side) {
  SegmentKeys(q, dim, keys, seg, blocks, ahead, how, scale, side);
}

// Scores of query heads [0, group) (group a multiple of 4) over n >=
// kSegmentsFrom rows, into scores as Scores writes them and with the same
// bits (a pair's arithmetic does not depend on its block), but with the
// rows read in four segments side by side: each 4x4 score block takes one
// row of each segment, and each segment requests its own rows
// SegmentsAheadBytes ahead as requests.segments says, so that memory
// serves four sequential streams at once instead of one. A block's 16
// scores go, 16 floats side by side, to side ([seg][group / 4][16]); after
// the pass they are transposed into scores. Stored straight to their
// slots, 16 scores of a block in 16 places, or transposed every 16 rows
// along the pass, they cost the four streams their gain.
// maxima [group]: each head's largest score over the n rows, taken along
// the transpose: MaxOf's value over them (the largest of the same floats
// in another order, so at most the sign of a zero differs, which no
// exp(score - max) sees; with a NaN score every output of its head is NaN
// either way), without MaxOf's pass over the scores.
template <typename T>
HWY_INLINE void ScoresInSegments(const float* HWY_RESTRICT q, int group, int dim,
                                 const T* const* keys, size_t n, float scale,
                                 float* HWY_RESTRICT scores, size_t stride,
                                 float* HWY_RESTRICT side, const AttentionRequests& requests,
                                 float* HWY_RESTRICT maxima) {
  const DF d;
  const size_t row_bytes = RowBytes<T>(static_cast<size_t>(dim));
  // Segments of a multiple of 16 rows, whose scores are not a multiple of
  // 4 KiB apart (the transpose's 16 store streams on the same L1 sets).
  size_t seg = n / 4 / 16 * 16;
  if (seg % 1024 == 0) seg -= 16;
  const size_t blocks = static_cast<size_t>(group) / 4;
  const size_t ahead =
      std::max<size_t>(1, SegmentsAheadBytes(requests, row_bytes) / row_bytes);
  if constexpr (sizeof(T) == sizeof(float)) {
    SegmentKeysApart(q, dim, keys, seg, blocks, ahead, requests.segments, scale, side);
  } else {
    SegmentKeys(q, dim, keys, seg, blocks, ahead, requests.segments, scale, side);
  }
  // side [j][b] lane 4h + s is the score of head 4b + h at slot s * seg + j.
  for (size_t b = 0; b < blocks; ++b) {
    VF m[4];
    for (size_t j0 = 0; j0 < seg; j0 += 16) {
      VF r[16];
      for (size_t i = 0; i < 16; ++i) r[i] = hn::LoadU(d, side + ((j0 + i) * blocks + b) * 16);
      Transpose16(r);
      for (size_t h = 0; h < 4; ++h) {
        float* out = scores + (4 * b + h) * stride + j0;
        for (size_t s = 0; s < 4; ++s) hn::StoreU(r[4 * h + s], d, out + s * seg);
        const VF mh =
            hn::Max(hn::Max(r[4 * h], r[4 * h + 1]), hn::Max(r[4 * h + 2], r[4 * h + 3]));
        m[h] = j0 == 0 ? mh : hn::Max(m[h], mh);
      }
    }
    for (size_t h = 0; h < 4; ++h) maxima[4 * b + h] = hn::GetLane(hn::MaxOfLanes(d, m[h]));
  }
  // The rows after the four segments (at most 130).
  const size_t tail = n - 4 * seg;
  Scores(q, group, dim, keys + 4 * seg, tail, scale, scores + 4 * seg, stride, Ahead<T>());
  for (int g = 0; g < group; ++g) {
    const float* sg = scores + static_cast<size_t>(g) * stride + 4 * seg;
    float max = maxima[g];
    for (size_t j = 0; j < tail; ++j) max = sg[j] > max ? sg[j] : max;
    maxima[g] = max;
  }
}
#endif

// acc_g[0, dim) += sum over j in [0, n), in order, of w[g * stride + j] *
// value_j, for kG heads (acc_g dim floats apart). Every output lane sees the
// same sequence of multiply-adds whatever the blocking of heads, slots or
// lanes, so results are bit-identical across blockings. Lanes go in chunks
// of two vectors held in registers over the n slots (the caller keeps n
// small enough for the n values to stay in L1 across the chunks).
template <int kG, typename T>
HWY_INLINE void ValueBlock(const float* HWY_RESTRICT w, size_t stride, const T* const* values,
                           size_t n, int dim, float* HWY_RESTRICT acc, Ahead<T> ahead) {
  const DF d;
  const int N = static_cast<int>(hn::Lanes(d));
  // Vectors per chunk: with 32 vector registers (AVX-512), four per head
  // for four heads and eight for one (16 or 8 independent multiply-add
  // chains hide the FMA latency and the first loads of a chunk's
  // accumulators); with 16, two per head for four heads and four for one.
#if HWY_TARGET <= HWY_AVX3
  constexpr int kV = kG == 1 ? 8 : 4;
#else
  constexpr int kV = kG == 1 ? 4 : 2;
#endif
  int i = 0;
  for (; i + kV * N <= dim; i += kV * N) {
    VF a[kG][kV];
    HWY_UNROLL(4)
    for (int g = 0; g < kG; ++g) {
      HWY_UNROLL(8)
      for (int c = 0; c < kV; ++c) a[g][c] = hn::LoadU(d, acc + g * dim + i + c * N);
    }
    for (size_t j = 0; j < n; ++j) {
      // The same lanes of another row, wanted soon (see Scores).
      if (j < ahead.n) PrefetchSpan(LaneAddress(ahead.rows[j], i), LaneBytes<T>(kV * N), ahead.how);
      VF v[kV];
      float sc = 0.0f;  // q8_0 and q4_0: the scale of the current block
      HWY_UNROLL(8)
      for (int c = 0; c < kV; ++c) {
        const size_t lane = static_cast<size_t>(i + c * N);
        if (c == 0 || lane % kKvBlockValues == 0) sc = BlockScale(values[j], lane);
        v[c] = LoadScaled(d, values[j], lane, sc);
      }
      HWY_UNROLL(4)
      for (int g = 0; g < kG; ++g) {
        const VF wv = hn::Set(d, w[g * stride + j]);
        HWY_UNROLL(8)
        for (int c = 0; c < kV; ++c) a[g][c] = hn::MulAdd(wv, v[c], a[g][c]);
      }
    }
    HWY_UNROLL(4)
    for (int g = 0; g < kG; ++g) {
      HWY_UNROLL(8)
      for (int c = 0; c < kV; ++c) hn::StoreU(a[g][c], d, acc + g * dim + i + c * N);
    }
  }
  // Two vectors, then one, for what a chunk of kV left.
  for (; i + 2 * N <= dim; i += 2 * N) {
    VF a[kG][2];
    HWY_UNROLL(4)
    for (int g = 0; g < kG; ++g) {
      a[g][0] = hn::LoadU(d, acc + g * dim + i);
      a[g][1] = hn::LoadU(d, acc + g * dim + i + N);
    }
    for (size_t j = 0; j < n; ++j) {
      if (j < ahead.n) PrefetchSpan(LaneAddress(ahead.rows[j], i), LaneBytes<T>(2 * N), ahead.how);
      const VF v0 = LoadAt(d, values[j], static_cast<size_t>(i));
      const VF v1 = LoadAt(d, values[j], static_cast<size_t>(i + N));
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
  PrefetchRows(ahead, i == 0 ? 0 : n, ahead.n, RowBytes<T>(static_cast<size_t>(dim)));
  for (; i + N <= dim; i += N) {
    VF a[kG];
    HWY_UNROLL(4)
    for (int g = 0; g < kG; ++g) a[g] = hn::LoadU(d, acc + g * dim + i);
    for (size_t j = 0; j < n; ++j) {
      const VF v0 = LoadAt(d, values[j], static_cast<size_t>(i));
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

}  // namespace HWY_NAMESPACE
}  // namespace kvspec
HWY_AFTER_NAMESPACE();

#endif  // KVSPEC_KERNELS_ATTENTION_INL_H_ toggle

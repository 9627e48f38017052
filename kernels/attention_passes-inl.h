// The passes of the attention kernel (kernels/attention.cc) over one KV
// head for a tile of queries, per Highway target: the scores over the
// admitted slots (ScorePass), a softmax per query head (SoftmaxTile, or
// SoftmaxAlong for a lone query), the weighted values, and the outputs
// (AttendHead).
//
// The per-block work goes through small sink structs (ScoreSink,
// ValueSink) holding copies of what they need, not capturing lambdas (a
// lambda in the score path cost decode about 25%). Their Add stays out of
// line: inlined into the block walk, it measured no faster.
//
// Included by attention.cc once per target (foreach_target), hence the
// toggle guard instead of #pragma once.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvspec/kernels/attention.h"

#if defined(KVSPEC_KERNELS_ATTENTION_PASSES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVSPEC_KERNELS_ATTENTION_PASSES_INL_H_
#undef KVSPEC_KERNELS_ATTENTION_PASSES_INL_H_
#else
#define KVSPEC_KERNELS_ATTENTION_PASSES_INL_H_
#endif

#include "hwy/highway.h"
#include "kvspec/kernels/attention-inl.h"
#include "kvspec/kernels/attention_blocks-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvspec {
namespace HWY_NAMESPACE {

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
// block by block (ForEachBlock). The same bits either way.
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
      RowBytes<T>(static_cast<size_t>(p.dim)) < p.requests.segments_below) {
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
// order, its lanes reduced, then the tail in order (SumOf). Cold decode
// about 3-5% faster at dims 64 and 128 on AVX-512; see docs/benchmarks.md.
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

}  // namespace HWY_NAMESPACE
}  // namespace kvspec
HWY_AFTER_NAMESPACE();

#endif  // KVSPEC_KERNELS_ATTENTION_PASSES_INL_H_ toggle

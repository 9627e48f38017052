// Attention kernel: the Highway version (per target), dispatched once per
// call. This file splits a call into tasks (a KV head of a tile of
// queries, or a chunk of a long decode's slots) run on the pool, and merges
// flash-decoding's chunks. The other parts:
// - attention_passes-inl.h: the passes over one KV head (scores, softmax,
//   values) and its outputs;
// - attention_blocks-inl.h: the call's plan and the walk over a head's
//   slots in blocks;
// - attention-inl.h: the SIMD arithmetic of a block;
// - attention_requests.cc: the per-CPU choice of memory requests;
// - attention_reference.cc: the scalar reference.
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
#include "kvspec/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kvspec/kernels/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kvspec/kernels/attention-inl.h"
#include "kvspec/kernels/attention_blocks-inl.h"
#include "kvspec/kernels/attention_passes-inl.h"
#include "kvspec/kernels/thread_pool.h"

HWY_BEFORE_NAMESPACE();
namespace kvspec {
namespace HWY_NAMESPACE {

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

// Scratch reused across calls on this thread (AttendScratch).
template <typename T>
AttendScratch<T>& ThreadScratch() {
  thread_local AttendScratch<T> scratch;
  return scratch;
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
    const size_t head =
        (task.r * kv->row_stride + task.kh * kv->head_stride) / kValuesPerUnit<T>;  // units of T
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
  switch (kv.type()) {
    case KvType::kQ8_0:
      AttendTyped(q, q_heads, kv, mask, kv.k_q8_0, kv.v_q8_0, out, options);
      break;
    case KvType::kQ4_0:
      AttendTyped(q, q_heads, kv, mask, kv.k_q4_0, kv.v_q4_0, out, options);
      break;
    case KvType::kBf16:
      AttendTyped(q, q_heads, kv, mask, kv.k_bf16, kv.v_bf16, out, options);
      break;
    case KvType::kF32:
      AttendTyped(q, q_heads, kv, mask, kv.k, kv.v, out, options);
      break;
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
  const Status storage = CheckKvType(kv.type(), kv.dim);
  if (!storage.ok()) {
    std::fprintf(stderr, "kvspec::Attend: %s\n", storage.message().c_str());
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

// Attention over a cache read through a mask.
//
// For every row r, query q (a column of the forward) and query head h (KV
// head h / (q_heads / kv_heads)), over the slots s the mask admits, in
// logical slot order (see below):
//   score_s = (q . k_s) / sqrt(dim);  w = softmax(score);  out = sum_s w_s v_s
// (Logical slot order: mask.first_slot .. slots-1, then 0 .. first_slot-1.)
// Slots the mask does not admit contribute exactly nothing, whatever they
// hold (NaN included): they are never read. A query that sees nothing
// (a pad query) gets zeros.
//
// Keys and values are read as stored (KvView): fp32, bf16, or q8_0 and q4_0
// blocks dequantized in registers (exact), so over blocks Attend gives the
// bits it gives over fp32 copies of their values.
//
// AttendReference is the plain scalar definition. Attend is the Highway
// version, dispatched to the best target once per call. Both accumulate
// over the admitted slots in slot order with per-slot arithmetic that does
// not depend on where a slot sits, so a row's output does not depend on its
// padding, its batch neighbours or a ring's phase (bit for bit, on one
// target).
//
// Tolerance (tested on every target in kernels/attention_test.cc and
// properties/attention_props.cc):
// |Attend - AttendReference| <= kAttentionTolerance * (1 + |reference|).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvspec/kernels/kv_view.h"
#include "kvspec/kernels/mask.h"

namespace kvspec {

inline constexpr float kAttentionTolerance = 2e-5f;

class ThreadPool;  // kernels/thread_pool.h

// Multi-core decode (flash-decoding), AttendWith. With chunk > 0, a query alone in its
// tile of 32 (every query of a decode, L = 1) that admits more than `chunk`
// slots has its admitted slots, in logical order, cut into chunks of
// `chunk` (the last one shorter). Each chunk's softmax partial (per query
// head: the chunk's largest score, the sum of exp(score - that max), the
// values weighted by those) is one task; the partials are then merged in
// chunk order: out = sum_c e_c acc_c / sum_c e_c sum_c, e_c = exp(max_c -
// max). The other tasks are one KV head of one tile of queries each.
// Tasks run on `pool` when given (else on the calling thread); each writes
// its own outputs, so the output is bit-identical whatever the pool's thread
// count, 1 included. It depends on `chunk`: a query with at most `chunk`
// admitted slots (and every query when chunk is 0) gets exactly Attend's
// bits without options; one with more gets the merged arithmetic, within
// the same tolerance of AttendReference.
inline constexpr int32_t kAttendChunkMultiple = 64;  // chunk is a multiple of this
inline constexpr int32_t kAttendDecodeChunk = 2048;  // a chunk worth a task on 2..8 cores

struct AttendOptions {
  ThreadPool* pool = nullptr;  // not owned; null: the calling thread alone
  int32_t chunk = 0;           // 0 or a multiple of kAttendChunkMultiple
};

// q:   [rows][queries][q_heads][dim]  (queries = mask.queries)
// out: [rows][queries][q_heads][dim]
void Attend(const float* q, int q_heads, const KvView& kv, const Mask& mask,
            float* out);
// Attend with options (a distinct name: Attend's address stays unambiguous).
void AttendWith(const float* q, int q_heads, const KvView& kv, const Mask& mask, float* out,
                const AttendOptions& options);
void AttendReference(const float* q, int q_heads, const KvView& kv,
                     const Mask& mask, float* out);

// The Highway target Attend dispatches to now, e.g. "AVX3".
const char* AttentionTargetName();
// Where a request for rows Attend is about to read brings them (x86 prefetch
// hints; other architectures get __builtin_prefetch's equivalents).
enum class RowRequest : uint8_t {
  kL1,           // prefetcht0
  kL2,           // prefetcht1
  kNonTemporal,  // prefetchnta: read once, kept out of the outer caches
};
// The requests Attend makes on this CPU for bf16 (bf16: also q8_0 and q4_0) or fp32 storage
// (see ForEachBlock in attention_blocks-inl.h, ScorePass in
// attention_passes-inl.h, and attention_requests.cc for why each CPU gets
// its own):
// - along: the next block's rows, along a block's computation. Into L1 on
//   Intel cores and, for bf16, on AMD Zen 5 and later; non-temporal for
//   fp32 on AMD Zen 5 and later; into L2 elsewhere.
// - block_start_l1: each block's rows requested again into L1 as its
//   computation starts (fp32 where along is not kL1).
// - segments: a lone query's keys read in four segments (ScoresInSegments
//   in attention-inl.h): non-temporal on AMD Zen 5 and later, else into L1.
// - segments_ahead, segments_ahead_short: how far ahead, in bytes, each
//   segment requests its rows, for rows of more than 256 bytes and for
//   shorter ones: 2 KiB, but 4 KiB for short bf16 rows on AMD Zen 5 and
//   later.
// - segments_below: keys go in segments only in rows shorter than this
//   many bytes: 1024 on AMD Zen 5 and later (fp32 rows of dim 256 and more
//   are read block by block there), else no limit.
// The benchmarks that mirror the kernel's reads ask it.
struct AttentionRequests {
  RowRequest along = RowRequest::kL2;
  bool block_start_l1 = false;
  RowRequest segments = RowRequest::kL1;
  size_t segments_ahead = 2048;
  size_t segments_ahead_short = 2048;
  size_t segments_below = SIZE_MAX;
};
AttentionRequests AttentionRequestsOn(bool bf16);
// Whether the target Attend dispatches to now can read a lone query's keys
// in four segments side by side: on 512-bit x86 targets. It does so for
// groups of a multiple of 4 query heads, at least 256 admitted slots and
// rows shorter than AttentionRequests::segments_below, which callers check
// themselves (see ScorePass in attention_passes-inl.h). The benchmarks that
// mirror the kernel's reads ask it.
bool AttentionScoresInSegments();

}  // namespace kvspec

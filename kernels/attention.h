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

#include <cstdint>

#include "kernels/kv_view.h"
#include "kernels/mask.h"

namespace kvspec {

inline constexpr float kAttentionTolerance = 2e-5f;

// q:   [rows][queries][q_heads][dim]  (queries = mask.queries)
// out: [rows][queries][q_heads][dim]
void Attend(const float* q, int q_heads, const KvView& kv, const Mask& mask,
            float* out);
void AttendReference(const float* q, int q_heads, const KvView& kv,
                     const Mask& mask, float* out);

// The Highway target Attend dispatches to now, e.g. "AVX3".
const char* AttentionTargetName();

}  // namespace kvspec

// The gated delta rule (gated DeltaNet) recurrence, one token at a time.
//
// Per token and value head h, with key head kh = h / (value_heads /
// key_heads) and the state S_h of shape [dv][dk] (fp32):
//   S = g * S;  m = S k;  S = S + beta * (v - m) k^T;  y = S q
// g is a scalar per head, or one value per dk lane (S[i][j] *= g[j]);
// beta is a scalar per head. q and k enter already prepared by
// PrepareQueryKey: L2-normalised per key head (x / sqrt(sum x^2 + eps)),
// q then scaled by 1/sqrt(dk).
//
// Two byte orders of a state [Hv] x [dv][dk]:
// - trace order [Hv][dv][dk] (S[h][i][j] at (h*dv + i)*dk + j): TRACE.md's
//   order, the one hashed, persisted and shown;
// - kernel order, the one GatedDeltaStep and the recurrent caches keep: each
//   head (dv*dk floats, heads in order) is cut into tiles of
//   kGatedDeltaTile value columns (the last tile narrower when dv is not a
//   multiple), tile after tile; a tile of width w starting at column c0
//   holds [dk][w], S[h][i][j] at h*dv*dk + c0*dk + j*w + (i - c0). So each
//   tile is a transposed, contiguous piece of the head (16 KiB at dk = 128),
//   and the layout is the same on every target.
// GatedDeltaStateToTrace / FromTrace convert between them.
//
// GatedDeltaStep is the Highway version, on kernel order: per head and tile,
// one pass computes m = S (g k) and y' = S (g q) with vertical accumulators
// (no horizontal reductions), then y = y' + delta (k . q) and a second pass
// over the same tile (now in L1) writes S' = g S + k delta^T while the next
// tile is requested into L1. GatedDeltaStepReference is the scalar
// definition, on trace order; GatedDeltaStepReferenceKernelOrder the same
// code on kernel order. Each applies the same arithmetic to every token
// whatever the batch, window length, position or split of the heads across
// calls, so a window of T tokens, T single steps and a rollback replay end
// in byte-identical states on one target.
//
// Tolerance (tested per target): for states and outputs after a few tokens,
// |Highway - reference| <= kGatedDeltaTolerance * (1 + |reference|).
#pragma once

#include <cstddef>

namespace kvspec {

inline constexpr float kGatedDeltaTolerance = 1e-4f;
// Value columns per tile of the kernel order (see above).
inline constexpr size_t kGatedDeltaTile = 32;

class ThreadPool;  // kernels/thread_pool.h
inline constexpr float kL2Epsilon = 1e-6f;

struct GatedDeltaShape {
  size_t value_heads = 1;  // Hv
  size_t key_heads = 1;    // Hk, divides Hv
  size_t dk = 4;
  size_t dv = 4;
  bool gate_per_lane = false;  // g is [Hv][dk] instead of [Hv]
};

// q_raw, k_raw: [Hk][dk] (post-conv). q, k: [Hk][dk] prepared.
void PrepareQueryKey(const float* q_raw, const float* k_raw, float* q, float* k,
                     const GatedDeltaShape& shape);
void PrepareQueryKeyReference(const float* q_raw, const float* k_raw, float* q, float* k,
                              const GatedDeltaShape& shape);

// state_in, state_out: Hv*dv*dk floats (may be equal), kernel order for
// GatedDeltaStep and GatedDeltaStepReferenceKernelOrder, trace order for
// GatedDeltaStepReference. q, k: [Hk][dk] prepared; v: [Hv][dv]; g: [Hv] or
// [Hv][dk]; beta: [Hv]; y: [Hv][dv].
// pool (optional, not owned): the value heads run as tasks on it; the
// result is bit-identical whatever its thread count (each head's arithmetic
// is the same on any thread).
void GatedDeltaStep(const float* state_in, float* state_out, const float* q, const float* k,
                    const float* v, const float* g, const float* beta, float* y,
                    const GatedDeltaShape& shape, ThreadPool* pool = nullptr);
void GatedDeltaStepReference(const float* state_in, float* state_out, const float* q,
                             const float* k, const float* v, const float* g,
                             const float* beta, float* y, const GatedDeltaShape& shape);
void GatedDeltaStepReferenceKernelOrder(const float* state_in, float* state_out,
                                        const float* q, const float* k, const float* v,
                                        const float* g, const float* beta, float* y,
                                        const GatedDeltaShape& shape);

// Byte-order conversions of a whole state (Hv*dv*dk floats; in and out must
// not overlap).
void GatedDeltaStateToTrace(const float* kernel_order, float* trace_order,
                            const GatedDeltaShape& shape);
void GatedDeltaStateFromTrace(const float* trace_order, float* kernel_order,
                              const GatedDeltaShape& shape);
// Index of S[h][i][j] (i < dv, j < dk) in kernel order.
// Width of the kernel-order tile that starts at value column c0 < dv.
inline size_t GatedDeltaTileWidth(size_t dv, size_t c0) {
  return dv - c0 < kGatedDeltaTile ? dv - c0 : kGatedDeltaTile;
}
inline size_t GatedDeltaKernelIndex(const GatedDeltaShape& s, size_t h, size_t i, size_t j) {
  const size_t c0 = i / kGatedDeltaTile * kGatedDeltaTile;
  return h * s.dv * s.dk + c0 * s.dk + j * GatedDeltaTileWidth(s.dv, c0) + (i - c0);
}

// The Highway target GatedDeltaStep dispatches to now.
const char* GatedDeltaTargetName();

}  // namespace kvspec

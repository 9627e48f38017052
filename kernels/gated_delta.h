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
// GatedDeltaStep is the Highway version (one pass over S per head: decay,
// m, update and y row by row); GatedDeltaStepReference the scalar
// definition. Each applies the same arithmetic to every token whatever the
// batch, window length or position, so a window of T tokens, T single steps
// and a rollback replay end in byte-identical states on one target.
//
// Tolerance (tested per target): for states and outputs after a few tokens,
// |Highway - reference| <= kGatedDeltaTolerance * (1 + |reference|).
#pragma once

#include <cstddef>

namespace kvspec {

inline constexpr float kGatedDeltaTolerance = 1e-4f;
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

// state_in, state_out: [Hv][dv][dk] (may be equal). q, k: [Hk][dk]
// prepared; v: [Hv][dv]; g: [Hv] or [Hv][dk]; beta: [Hv]; y: [Hv][dv].
void GatedDeltaStep(const float* state_in, float* state_out, const float* q, const float* k,
                    const float* v, const float* g, const float* beta, float* y,
                    const GatedDeltaShape& shape);
void GatedDeltaStepReference(const float* state_in, float* state_out, const float* q,
                             const float* k, const float* v, const float* g,
                             const float* beta, float* y, const GatedDeltaShape& shape);

// The Highway target GatedDeltaStep dispatches to now.
const char* GatedDeltaTargetName();

}  // namespace kvspec

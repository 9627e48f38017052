// Causal depthwise conv1d update with SiLU, one token at a time.
//
// For every channel c of C, with kernel size K and the conv state holding
// the channel's last K - 1 pre-conv inputs (oldest first):
//   u[c] = silu(sum_{j<K} w[j][c] * window[j][c]),  silu(z) = z / (1 + exp(-z))
// where window = the K - 1 state entries followed by x (the current token),
// so w[K-1][c] multiplies the current token. Afterwards the state holds the
// last K - 1 inputs including x. K = 1 has an empty state.
//
// ConvStep is the Highway version (dispatched once per call, vectorised over
// channels); ConvStepReference the scalar definition. Both apply the same
// arithmetic to every token whatever the call pattern, so a window of T
// tokens and T single steps end in byte-identical states on one target
// (the state update itself is a copy, exact everywhere).
//
// Tolerance: |ConvStep - ConvStepReference| <= kConvTolerance * (1 + |ref|).
#pragma once

#include <cstddef>

namespace kvspec {

inline constexpr float kConvTolerance = 1e-5f;
inline constexpr size_t kMaxConvKernel = 64;  // K, as traces allow

// w:         [K][C]   weights, time-major (w[K-1] multiplies the current token)
// state_in:  [K-1][C] the previous K - 1 inputs, oldest first
// state_out: [K-1][C] may equal state_in
// x:         [C]      this token's pre-conv inputs
// u:         [C]      output
// 1 <= kernel <= kMaxConvKernel.
void ConvStep(const float* w, const float* state_in, float* state_out, const float* x,
              float* u, size_t channels, size_t kernel);
void ConvStepReference(const float* w, const float* state_in, float* state_out,
                       const float* x, float* u, size_t channels, size_t kernel);

// The state update alone (no output): what a replay of recorded inputs needs.
void ConvShiftState(const float* state_in, float* state_out, const float* x,
                    size_t channels, size_t kernel);

}  // namespace kvspec

// Causal depthwise conv1d update with SiLU, one token at a time.
//
// For every channel c of C, with kernel size K and the conv state holding
// the channel's last K - 1 pre-conv inputs (oldest first):
//   u[c] = silu(sum_{j<K} w[j][c] * window[j][c]),  silu(z) = z / (1 + exp(-z))
// where window = the K - 1 state entries followed by x (the current token),
// so w[K-1][c] multiplies the current token. Afterwards the state holds the
// last K - 1 inputs including x. K = 1 has an empty state.
//
// Layouts. The weights and the state are kept channel-blocked ("kernel
// order"): channels in blocks of kConvBlock (the last block narrower when C
// is not a multiple), block b = channels [b*kConvBlock, b*kConvBlock + n)
// starting at float b*kConvBlock*rows and holding [rows][n], rows = K for
// the weights and K - 1 for the state. One block's weights and state are
// then a few adjacent cache lines: the step reads two streams (plus x and u)
// and shifts the state in the same pass, where the time-major [rows][C]
// ("trace order", TRACE.md's state byte order) has rows C floats apart
// (aliasing in L1 sets at large C) and needs a second pass to shift.
// PackConvWeights packs [K][C] weights once (the layer's owner keeps them);
// ConvStateToTrace / ConvStateFromTrace convert the state exactly (copies).
// The block width is the same on every target, so a state is
// interchangeable between targets and the reference.
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
inline constexpr size_t kConvBlock = 16;      // channels per block (kernel order)

// packed:    [K*C]   the weights in kernel order (PackConvWeights)
// state_in:  [(K-1)*C] the previous K - 1 inputs, kernel order
// state_out: [(K-1)*C] may equal state_in (otherwise they do not overlap)
// x:         [C]     this token's pre-conv inputs
// u:         [C]     output
// 1 <= kernel <= kMaxConvKernel.
void ConvStep(const float* packed, const float* state_in, float* state_out, const float* x,
              float* u, size_t channels, size_t kernel);
void ConvStepReference(const float* packed, const float* state_in, float* state_out,
                       const float* x, float* u, size_t channels, size_t kernel);

// The state update alone (no output): what a replay of recorded inputs needs.
// Kernel order; state_out may equal state_in.
void ConvShiftState(const float* state_in, float* state_out, const float* x,
                    size_t channels, size_t kernel);

// w [K][C] (time-major, w[K-1] multiplies the current token) -> packed.
void PackConvWeights(const float* w, float* packed, size_t channels, size_t kernel);
// The state between kernel order and trace order [K-1][C] (oldest first).
void ConvStateToTrace(const float* state, float* trace, size_t channels, size_t kernel);
void ConvStateFromTrace(const float* trace, float* state, size_t channels, size_t kernel);

}  // namespace kvspec

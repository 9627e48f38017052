// ConvStepReference: the plain scalar definition of the conv1d step (see
// conv1d.h), the oracle the Highway kernel is tested against. Same layouts
// as ConvStep (kernel order).
#include <cmath>
#include <cstddef>

#include "kvspec/kernels/conv1d.h"

namespace kvspec {

void ConvStepReference(const float* packed, const float* state_in, float* state_out,
                       const float* x, float* u, size_t channels, size_t kernel) {
  for (size_t c0 = 0; c0 < channels; c0 += kConvBlock) {
    const size_t n = channels - c0 < kConvBlock ? channels - c0 : kConvBlock;
    const float* w = packed + c0 * kernel;            // [K][n]
    const float* s = state_in + c0 * (kernel - 1);    // [K-1][n]
    for (size_t i = 0; i < n; ++i) {
      float acc = 0.0f;
      for (size_t j = 0; j + 1 < kernel; ++j) acc += w[j * n + i] * s[j * n + i];
      acc += w[(kernel - 1) * n + i] * x[c0 + i];
      u[c0 + i] = acc / (1.0f + std::exp(-acc));
    }
  }
  ConvShiftState(state_in, state_out, x, channels, kernel);
}

}  // namespace kvspec

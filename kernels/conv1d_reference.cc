// ConvStepReference: the plain scalar definition of the conv1d step (see
// conv1d.h), the oracle the Highway kernel is tested against.
#include <cmath>
#include <cstddef>

#include "kernels/conv1d.h"

namespace kvspec {

void ConvStepReference(const float* w, const float* state_in, float* state_out,
                       const float* x, float* u, size_t channels, size_t kernel) {
  for (size_t c = 0; c < channels; ++c) {
    float acc = 0.0f;
    for (size_t j = 0; j + 1 < kernel; ++j) acc += w[j * channels + c] * state_in[j * channels + c];
    acc += w[(kernel - 1) * channels + c] * x[c];
    u[c] = acc / (1.0f + std::exp(-acc));
  }
  ConvShiftState(state_in, state_out, x, channels, kernel);
}

}  // namespace kvspec

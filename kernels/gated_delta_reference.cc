// PrepareQueryKeyReference and GatedDeltaStepReference: the plain scalar
// definitions of the gated delta rule (see gated_delta.h), the oracles the
// Highway kernels are tested against.
#include <cmath>
#include <cstddef>

#include "kernels/gated_delta.h"

namespace kvspec {

void PrepareQueryKeyReference(const float* q_raw, const float* k_raw, float* q, float* k,
                              const GatedDeltaShape& shape) {
  const size_t dk = shape.dk;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (size_t h = 0; h < shape.key_heads; ++h) {
    float qs = 0.0f, ks = 0.0f;
    for (size_t i = 0; i < dk; ++i) {
      qs += q_raw[h * dk + i] * q_raw[h * dk + i];
      ks += k_raw[h * dk + i] * k_raw[h * dk + i];
    }
    const float qn = 1.0f / std::sqrt(qs + kL2Epsilon);
    const float kn = 1.0f / std::sqrt(ks + kL2Epsilon);
    for (size_t i = 0; i < dk; ++i) {
      q[h * dk + i] = q_raw[h * dk + i] * qn * q_scale;
      k[h * dk + i] = k_raw[h * dk + i] * kn;
    }
  }
}

void GatedDeltaStepReference(const float* state_in, float* state_out, const float* q,
                             const float* k, const float* v, const float* g,
                             const float* beta, float* y, const GatedDeltaShape& shape) {
  const size_t dk = shape.dk, dv = shape.dv;
  const size_t group = shape.value_heads / shape.key_heads;
  for (size_t h = 0; h < shape.value_heads; ++h) {
    const float* kh = k + (h / group) * dk;
    const float* qh = q + (h / group) * dk;
    for (size_t i = 0; i < dv; ++i) {
      const float* in = state_in + (h * dv + i) * dk;
      float* out = state_out + (h * dv + i) * dk;
      float m = 0.0f;
      for (size_t j = 0; j < dk; ++j) {
        const float gate = shape.gate_per_lane ? g[h * dk + j] : g[h];
        out[j] = gate * in[j];
        m += out[j] * kh[j];
      }
      const float delta = beta[h] * (v[h * dv + i] - m);
      float yi = 0.0f;
      for (size_t j = 0; j < dk; ++j) {
        out[j] = out[j] + delta * kh[j];
        yi += out[j] * qh[j];
      }
      y[h * dv + i] = yi;
    }
  }
}

}  // namespace kvspec

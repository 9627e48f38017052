// PrepareQueryKeyReference and GatedDeltaStepReference: the plain scalar
// definitions of the gated delta rule (see gated_delta.h), the oracles the
// Highway kernels are tested against.
#include <cmath>
#include <cstddef>

#include "kvspec/kernels/gated_delta.h"

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

namespace {

// The definition, for a state whose S[h][i][j] is at index(h, i, j).
template <class Index>
void StepReference(const float* state_in, float* state_out, const float* q, const float* k,
                   const float* v, const float* g, const float* beta, float* y,
                   const GatedDeltaShape& shape, Index index) {
  const size_t dk = shape.dk, dv = shape.dv;
  const size_t group = shape.value_heads / shape.key_heads;
  for (size_t h = 0; h < shape.value_heads; ++h) {
    const float* kh = k + (h / group) * dk;
    const float* qh = q + (h / group) * dk;
    for (size_t i = 0; i < dv; ++i) {
      float m = 0.0f;
      for (size_t j = 0; j < dk; ++j) {
        const float gate = shape.gate_per_lane ? g[h * dk + j] : g[h];
        const size_t at = index(h, i, j);
        state_out[at] = gate * state_in[at];
        m += state_out[at] * kh[j];
      }
      const float delta = beta[h] * (v[h * dv + i] - m);
      float yi = 0.0f;
      for (size_t j = 0; j < dk; ++j) {
        const size_t at = index(h, i, j);
        state_out[at] = state_out[at] + delta * kh[j];
        yi += state_out[at] * qh[j];
      }
      y[h * dv + i] = yi;
    }
  }
}

}  // namespace

void GatedDeltaStepReference(const float* state_in, float* state_out, const float* q,
                             const float* k, const float* v, const float* g,
                             const float* beta, float* y, const GatedDeltaShape& shape) {
  StepReference(state_in, state_out, q, k, v, g, beta, y, shape,
                [&shape](size_t h, size_t i, size_t j) { return (h * shape.dv + i) * shape.dk + j; });
}

void GatedDeltaStepReferenceKernelOrder(const float* state_in, float* state_out,
                                        const float* q, const float* k, const float* v,
                                        const float* g, const float* beta, float* y,
                                        const GatedDeltaShape& shape) {
  StepReference(state_in, state_out, q, k, v, g, beta, y, shape,
                [&shape](size_t h, size_t i, size_t j) {
                  return GatedDeltaKernelIndex(shape, h, i, j);
                });
}

void GatedDeltaStateToTrace(const float* kernel_order, float* trace_order,
                            const GatedDeltaShape& s) {
  for (size_t h = 0; h < s.value_heads; ++h) {
    for (size_t i = 0; i < s.dv; ++i) {
      for (size_t j = 0; j < s.dk; ++j) {
        trace_order[(h * s.dv + i) * s.dk + j] = kernel_order[GatedDeltaKernelIndex(s, h, i, j)];
      }
    }
  }
}

void GatedDeltaStateFromTrace(const float* trace_order, float* kernel_order,
                              const GatedDeltaShape& s) {
  for (size_t h = 0; h < s.value_heads; ++h) {
    for (size_t i = 0; i < s.dv; ++i) {
      for (size_t j = 0; j < s.dk; ++j) {
        kernel_order[GatedDeltaKernelIndex(s, h, i, j)] = trace_order[(h * s.dv + i) * s.dk + j];
      }
    }
  }
}

}  // namespace kvspec

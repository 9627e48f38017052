// Gated delta rule: Highway version (per target) and scalar reference.
#include "core/gated_delta.h"

#include <cmath>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/gated_delta.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvspec {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// sum a[i] * b[i] over n lanes: whole vectors, then the scalar tail.
HWY_INLINE float DotLanes(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto acc = hn::Zero(d);
  size_t i = 0;
  for (; i + N <= n; i += N) acc = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc);
  float sum = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void PrepareQueryKeyImpl(const float* HWY_RESTRICT q_raw, const float* HWY_RESTRICT k_raw,
                         float* HWY_RESTRICT q, float* HWY_RESTRICT k,
                         const GatedDeltaShape& shape) {
  const size_t dk = shape.dk;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (size_t h = 0; h < shape.key_heads; ++h) {
    const float* qr = q_raw + h * dk;
    const float* kr = k_raw + h * dk;
    const float qn = 1.0f / std::sqrt(DotLanes(qr, qr, dk) + kL2Epsilon);
    const float kn = 1.0f / std::sqrt(DotLanes(kr, kr, dk) + kL2Epsilon);
    for (size_t i = 0; i < dk; ++i) {
      q[h * dk + i] = qr[i] * qn * q_scale;
      k[h * dk + i] = kr[i] * kn;
    }
  }
}

void GatedDeltaStepImpl(const float* state_in, float* state_out, const float* HWY_RESTRICT q,
                        const float* HWY_RESTRICT k, const float* HWY_RESTRICT v,
                        const float* HWY_RESTRICT g, const float* HWY_RESTRICT beta,
                        float* HWY_RESTRICT y, const GatedDeltaShape& shape) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t dk = shape.dk, dv = shape.dv;
  const size_t group = shape.value_heads / shape.key_heads;
  for (size_t h = 0; h < shape.value_heads; ++h) {
    const float* kh = k + (h / group) * dk;
    const float* qh = q + (h / group) * dk;
    const float* gh = shape.gate_per_lane ? g + h * dk : nullptr;
    const auto gs = hn::Set(d, shape.gate_per_lane ? 1.0f : g[h]);
    const float b = beta[h];
    for (size_t i = 0; i < dv; ++i) {
      const float* in = state_in + (h * dv + i) * dk;
      float* out = state_out + (h * dv + i) * dk;
      // Decay this row (into out) and take m = row . k.
      auto acc = hn::Zero(d);
      size_t j = 0;
      for (; j + N <= dk; j += N) {
        const auto gv = gh ? hn::LoadU(d, gh + j) : gs;
        const auto row = hn::Mul(gv, hn::LoadU(d, in + j));
        hn::StoreU(row, d, out + j);
        acc = hn::MulAdd(row, hn::LoadU(d, kh + j), acc);
      }
      float m = hn::GetLane(hn::SumOfLanes(d, acc));
      for (; j < dk; ++j) {
        out[j] = (gh ? gh[j] : g[h]) * in[j];
        m += out[j] * kh[j];
      }
      // Update along k and read out y = row . q.
      const float delta = b * (v[h * dv + i] - m);
      const auto dvec = hn::Set(d, delta);
      auto yacc = hn::Zero(d);
      j = 0;
      for (; j + N <= dk; j += N) {
        const auto row = hn::MulAdd(dvec, hn::LoadU(d, kh + j), hn::LoadU(d, out + j));
        hn::StoreU(row, d, out + j);
        yacc = hn::MulAdd(row, hn::LoadU(d, qh + j), yacc);
      }
      float yi = hn::GetLane(hn::SumOfLanes(d, yacc));
      for (; j < dk; ++j) {
        out[j] = out[j] + delta * kh[j];
        yi += out[j] * qh[j];
      }
      y[h * dv + i] = yi;
    }
  }
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace kvspec
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvspec {

HWY_EXPORT(PrepareQueryKeyImpl);
HWY_EXPORT(GatedDeltaStepImpl);
HWY_EXPORT(TargetNameImpl);

void PrepareQueryKey(const float* q_raw, const float* k_raw, float* q, float* k,
                     const GatedDeltaShape& shape) {
  HWY_DYNAMIC_DISPATCH(PrepareQueryKeyImpl)(q_raw, k_raw, q, k, shape);
}

void GatedDeltaStep(const float* state_in, float* state_out, const float* q, const float* k,
                    const float* v, const float* g, const float* beta, float* y,
                    const GatedDeltaShape& shape) {
  HWY_DYNAMIC_DISPATCH(GatedDeltaStepImpl)(state_in, state_out, q, k, v, g, beta, y, shape);
}

const char* GatedDeltaTargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

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
#endif  // HWY_ONCE

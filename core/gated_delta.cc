// Gated delta rule: Highway version (per target) and scalar reference.
#include "core/gated_delta.h"

#include <cmath>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/gated_delta.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/cache_control.h"

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

// One token for R consecutive state rows of one value head (rows r of
// in/out at r * dk), all sharing k, q, the gate and beta. Every row gets
// exactly the arithmetic of a row processed alone (R = 1): the rows are only
// interleaved, each with its own accumulators, so the result of a row never
// depends on R or on the rows processed with it. Per row:
//   decay:  row = g * in (lane-wise; vectors, then the scalar tail)
//   m:      one vector accumulator, MulAdd(row, k, acc) in lane order,
//           SumOfLanes, then the scalar tail added in order
//   delta = beta * (v - m)
//   update: row = MulAdd(delta, k, row), stored; y likewise from row * q.
// The decayed row is not stored and reloaded: the second pass recomputes
// g * in (the same product, so the same bits), which saves a store per
// vector and works in place because pass 1 writes nothing.
template <size_t R, class D>
HWY_INLINE void StepRows(D d, const float* in, float* out, size_t dk,
                         const float* HWY_RESTRICT kh, const float* HWY_RESTRICT qh,
                         const float* HWY_RESTRICT gh, float gate, const float* HWY_RESTRICT v,
                         float b, float* HWY_RESTRICT y) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const V gs = hn::Set(d, gate);
  const size_t vec_end = dk - dk % N;

  // Pass 1: m = (g * in) . k per row.
  V acc[R];
  for (size_t r = 0; r < R; ++r) acc[r] = hn::Zero(d);
  for (size_t j = 0; j < vec_end; j += N) {
    const V kv = hn::LoadU(d, kh + j);
    const V gv = gh ? hn::LoadU(d, gh + j) : gs;
    for (size_t r = 0; r < R; ++r) {
#ifdef KV_PF
      hwy::Prefetch(in + (R * KV_PF + r) * dk + j);
#endif
#ifdef KV_PFW
      __builtin_prefetch(out + (R * KV_PFW + r) * dk + j, 1);
#endif
      acc[r] = hn::MulAdd(hn::Mul(gv, hn::LoadU(d, in + r * dk + j)), kv, acc[r]);
    }
  }
  float delta[R];
  for (size_t r = 0; r < R; ++r) {
    const float* row = in + r * dk;
    float m = hn::GetLane(hn::SumOfLanes(d, acc[r]));
    for (size_t j = vec_end; j < dk; ++j) {
      const float decayed = (gh ? gh[j] : gate) * row[j];
      m += decayed * kh[j];
    }
    delta[r] = b * (v[r] - m);
  }

  // Pass 2: row = g * in + delta * k, stored; y = row . q.
  V yacc[R];
  for (size_t r = 0; r < R; ++r) yacc[r] = hn::Zero(d);
  for (size_t j = 0; j < vec_end; j += N) {
    const V kv = hn::LoadU(d, kh + j);
    const V qv = hn::LoadU(d, qh + j);
    const V gv = gh ? hn::LoadU(d, gh + j) : gs;
    for (size_t r = 0; r < R; ++r) {
      const V decayed = hn::Mul(gv, hn::LoadU(d, in + r * dk + j));
      const V row = hn::MulAdd(hn::Set(d, delta[r]), kv, decayed);
      hn::StoreU(row, d, out + r * dk + j);
      yacc[r] = hn::MulAdd(row, qv, yacc[r]);
    }
  }
  for (size_t r = 0; r < R; ++r) {
    const float* row_in = in + r * dk;
    float* row_out = out + r * dk;
    float yi = hn::GetLane(hn::SumOfLanes(d, yacc[r]));
    for (size_t j = vec_end; j < dk; ++j) {
      const float decayed = (gh ? gh[j] : gate) * row_in[j];
      const float updated = decayed + delta[r] * kh[j];
      row_out[j] = updated;
      yi += updated * qh[j];
    }
    y[r] = yi;
  }
}

// Rows interleaved per block (4 measured as fast as 8 on AVX2, faster than
// 2); the dv % 4 remaining rows use the same per-row sequence, StepRows<1>.
#ifndef KV_ROWS
#define KV_ROWS 4
#endif
constexpr size_t kRowBlock = KV_ROWS;

void GatedDeltaStepImpl(const float* state_in, float* state_out, const float* HWY_RESTRICT q,
                        const float* HWY_RESTRICT k, const float* HWY_RESTRICT v,
                        const float* HWY_RESTRICT g, const float* HWY_RESTRICT beta,
                        float* HWY_RESTRICT y, const GatedDeltaShape& shape) {
  const hn::ScalableTag<float> d;
  const size_t dk = shape.dk, dv = shape.dv;
  const size_t group = shape.value_heads / shape.key_heads;
  for (size_t h = 0; h < shape.value_heads; ++h) {
    const float* kh = k + (h / group) * dk;
    const float* qh = q + (h / group) * dk;
    const float* gh = shape.gate_per_lane ? g + h * dk : nullptr;
    const float gate = shape.gate_per_lane ? 1.0f : g[h];
    const float b = beta[h];
    const float* in = state_in + h * dv * dk;
    float* out = state_out + h * dv * dk;
    const float* vh = v + h * dv;
    float* yh = y + h * dv;
    size_t i = 0;
    for (; i + kRowBlock <= dv; i += kRowBlock) {
      StepRows<kRowBlock>(d, in + i * dk, out + i * dk, dk, kh, qh, gh, gate, vh + i, b, yh + i);
    }
    for (; i < dv; ++i) {
      StepRows<1>(d, in + i * dk, out + i * dk, dk, kh, qh, gh, gate, vh + i, b, yh + i);
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

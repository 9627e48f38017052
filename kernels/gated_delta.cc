// Gated delta rule: the Highway version (per target), dispatched once per
// call. The scalar reference is in gated_delta_reference.cc.
#include "kernels/gated_delta.h"

#include <cmath>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/gated_delta.cc"
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

// One token for one state row of dk floats (row_in may equal row_out):
//   decay:  row = g * in, lane-wise (whole vectors, then the scalar tail);
//   m:      one vector accumulator, acc = MulAdd(row, k, acc) in lane order,
//           m = SumOfLanes(acc), then the tail's row[j] * k[j] added in order;
//   delta = beta * (v - m);
//   update: row = MulAdd(delta, k, row) (tail: row[j] + delta * k[j]),
//           stored, and y accumulated from row * q like m.
// The same sequence for every row, token, batch and call pattern (and the
// same as the kernel before, bit for bit: kernels/gated_delta_test.cc keeps
// that one as its oracle). The decayed row is not stored and reloaded: the
// second pass recomputes g * in (the same product, so the same bits), which
// saves a store per vector and is safe in place because the first pass
// writes nothing.
//
// Measured on AVX2 (bench/ssm_bench, dk = dv = 128, a noisy shared VM):
// interleaving 4 rows, each with its own accumulators, was 1.3-1.6x faster
// while the state sat in cache (BM_DecodeHot) but 15-40% slower streaming
// it from DRAM (BM_Decode), with or without software prefetch; one row at a
// time with a prefetch 8 KiB ahead was 10-20% faster from DRAM but up to
// 20% slower hot. One row at a time without either (this) measured the
// same as the original kernel in both cases.
template <class D>
HWY_INLINE void StepRow(D d, const float* row_in, float* row_out, size_t dk,
                        const float* HWY_RESTRICT kh, const float* HWY_RESTRICT qh,
                        const float* HWY_RESTRICT gh, float gate, float v, float b,
                        float* HWY_RESTRICT y) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const V gs = hn::Set(d, gate);
  const size_t vec_end = dk - dk % N;

  // Pass 1: m = (g * in) . k.
  V acc = hn::Zero(d);
  for (size_t j = 0; j < vec_end; j += N) {
    const V gv = gh ? hn::LoadU(d, gh + j) : gs;
    acc = hn::MulAdd(hn::Mul(gv, hn::LoadU(d, row_in + j)), hn::LoadU(d, kh + j), acc);
  }
  float m = hn::GetLane(hn::SumOfLanes(d, acc));
  for (size_t j = vec_end; j < dk; ++j) {
    const float decayed = (gh ? gh[j] : gate) * row_in[j];
    m += decayed * kh[j];
  }
  const float delta = b * (v - m);

  // Pass 2: row = g * in + delta * k, stored; y = row . q.
  const V dvec = hn::Set(d, delta);
  V yacc = hn::Zero(d);
  for (size_t j = 0; j < vec_end; j += N) {
    const V gv = gh ? hn::LoadU(d, gh + j) : gs;
    const V decayed = hn::Mul(gv, hn::LoadU(d, row_in + j));
    const V row = hn::MulAdd(dvec, hn::LoadU(d, kh + j), decayed);
    hn::StoreU(row, d, row_out + j);
    yacc = hn::MulAdd(row, hn::LoadU(d, qh + j), yacc);
  }
  float yi = hn::GetLane(hn::SumOfLanes(d, yacc));
  for (size_t j = vec_end; j < dk; ++j) {
    const float decayed = (gh ? gh[j] : gate) * row_in[j];
    const float updated = decayed + delta * kh[j];
    row_out[j] = updated;
    yi += updated * qh[j];
  }
  *y = yi;
}

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
    for (size_t i = 0; i < dv; ++i) {
      const size_t row = h * dv + i;
      StepRow(d, state_in + row * dk, state_out + row * dk, dk, kh, qh, gh, gate, v[row], b,
              y + row);
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

}  // namespace kvspec
#endif  // HWY_ONCE

// Gated delta rule: the Highway version (per target), dispatched once per
// call. The scalar reference is in gated_delta_reference.cc.
#include "kernels/gated_delta.h"
#include "kernels/thread_pool.h"

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

// One token for the columns c0 .. c0 + U*N - 1 of one head's state, kept in
// kernel order [dk][dv] (row j holds S[.][j], column i holds S[i][.]):
//   pass 1 (reads the columns once, 2U vertical accumulators, no
//     horizontal reduction): for j = 0 .. dk-1 in order,
//       m  = MulAdd(in[j], g_j * k_j, m),  y' = MulAdd(in[j], g_j * q_j, y');
//   delta = beta * (v - m);  y = MulAdd(delta, k . q, y');
//   pass 2 (the same columns again, now in L1 or L2): for j in order,
//       out[j] = MulAdd(k_j, delta, g_j * in[j]).
// That is the definition rearranged: m_i = sum_j (g_j S_ij) k_j and
// y_i = sum_j S'_ij q_j = sum_j S_ij (g_j q_j) + delta_i (k . q). Each column
// takes the same path for every token (which path depends on dv and the
// target only), so a window of T tokens, T single steps and a rollback
// replay give identical bytes, and so does any split of the heads across
// calls. In place is safe: pass 1 writes nothing and pass 2 writes each
// element after reading it.
// Rows j of pass 1 per chunk of precomputed g_j * k_j and g_j * q_j (even,
// so the pairing of rows in pass 1 does not depend on the chunking).
constexpr size_t kChunk = 256;

template <size_t U, class D>
HWY_INLINE void StepColumns(D d, const float* in, float* out, size_t dk, size_t dv, size_t c0,
                            const float* HWY_RESTRICT kh, const float* HWY_RESTRICT qh,
                            const float* HWY_RESTRICT gh, float gate,
                            const float* HWY_RESTRICT vh, float b, float kq,
                            float* HWY_RESTRICT yh) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  // Two sets of accumulators (even and odd j) when U is small, so that
  // enough independent multiply-add chains are in flight.
  constexpr size_t S2 = U <= 2 ? 2 : 1;
  V m[S2][U], yp[S2][U];
  HWY_UNROLL(8)
  for (size_t u = 0; u < U; ++u) {
    HWY_UNROLL(2)
    for (size_t p = 0; p < S2; ++p) {
      m[p][u] = hn::Zero(d);
      yp[p][u] = hn::Zero(d);
    }
  }
  HWY_ALIGN float ak[kChunk];
  HWY_ALIGN float cq[kChunk];
  for (size_t j0 = 0; j0 < dk; j0 += kChunk) {
    const size_t n = HWY_MIN(kChunk, dk - j0);
    for (size_t j = 0; j < n; ++j) {
      const float gj = gh ? gh[j0 + j] : gate;
      ak[j] = gj * kh[j0 + j];
      cq[j] = gj * qh[j0 + j];
    }
    size_t j = 0;
    for (; j + S2 <= n; j += S2) {
      HWY_UNROLL(2)
      for (size_t p = 0; p < S2; ++p) {
        const V a = hn::Set(d, ak[j + p]);
        const V c = hn::Set(d, cq[j + p]);
        const float* row = in + (j0 + j + p) * dv + c0;
        HWY_UNROLL(8)
        for (size_t u = 0; u < U; ++u) {
          const V s = hn::LoadU(d, row + u * N);
          m[p][u] = hn::MulAdd(s, a, m[p][u]);
          yp[p][u] = hn::MulAdd(s, c, yp[p][u]);
        }
      }
    }
    for (; j < n; ++j) {  // the last row when dk is odd and S2 == 2
      const V a = hn::Set(d, ak[j]);
      const V c = hn::Set(d, cq[j]);
      const float* row = in + (j0 + j) * dv + c0;
      HWY_UNROLL(8)
      for (size_t u = 0; u < U; ++u) {
        const V s = hn::LoadU(d, row + u * N);
        m[0][u] = hn::MulAdd(s, a, m[0][u]);
        yp[0][u] = hn::MulAdd(s, c, yp[0][u]);
      }
    }
  }
  if (S2 == 2) {
    HWY_UNROLL(8)
    for (size_t u = 0; u < U; ++u) {
      m[0][u] = hn::Add(m[0][u], m[S2 - 1][u]);
      yp[0][u] = hn::Add(yp[0][u], yp[S2 - 1][u]);
    }
  }
  const V bv = hn::Set(d, b);
  const V kqv = hn::Set(d, kq);
  V delta[U];
  HWY_UNROLL(8)
  for (size_t u = 0; u < U; ++u) {
    delta[u] = hn::Mul(bv, hn::Sub(hn::LoadU(d, vh + c0 + u * N), m[0][u]));
    hn::StoreU(hn::MulAdd(delta[u], kqv, yp[0][u]), d, yh + c0 + u * N);
  }
  const V gs = hn::Set(d, gate);
  for (size_t j = 0; j < dk; ++j) {
    const V gj = gh ? hn::Set(d, gh[j]) : gs;
    const V kj = hn::Set(d, kh[j]);
    const float* row_in = in + j * dv + c0;
    float* row_out = out + j * dv + c0;
    HWY_UNROLL(8)
    for (size_t u = 0; u < U; ++u) {
      const V s = hn::Mul(gj, hn::LoadU(d, row_in + u * N));
      hn::StoreU(hn::MulAdd(kj, delta[u], s), d, row_out + u * N);
    }
  }
}

// The same for one column i (the dv % N columns after the whole vectors),
// scalar, in the same order.
HWY_INLINE void StepColumn(const float* in, float* out, size_t dk, size_t dv, size_t i,
                           const float* HWY_RESTRICT kh, const float* HWY_RESTRICT qh,
                           const float* HWY_RESTRICT gh, float gate, float v, float b,
                           float kq, float* HWY_RESTRICT y) {
  float m = 0.0f, yp = 0.0f;
  for (size_t j = 0; j < dk; ++j) {
    const float gj = gh ? gh[j] : gate;
    const float s = in[j * dv + i];
    m += s * (gj * kh[j]);
    yp += s * (gj * qh[j]);
  }
  const float delta = b * (v - m);
  *y = yp + delta * kq;
  for (size_t j = 0; j < dk; ++j) {
    const float gj = gh ? gh[j] : gate;
    out[j * dv + i] = gj * in[j * dv + i] + kh[j] * delta;
  }
}

// Columns per block (vectors): 2U accumulators, U loads and two broadcasts.
// At dk = dv = 128 a block of 8 AVX-512 vectors is a whole head (64 KiB),
// read in whole contiguous rows. Measured on a Zen 4 VM (bench/ssm_bench and
// a one-head loop): on AVX3, 8 beat blocks of 4, 2 (with even/odd row
// accumulators) and 1 vectors, although smaller blocks keep pass 2 in L1
// (their pass 1 reads pieces of rows 512 bytes apart); on AVX2, 8 (16
// accumulators, some spilled) beat 4 hot and cold; software prefetch of
// whole rows ahead did not help.
#if HWY_TARGET <= HWY_AVX2
constexpr size_t kBlock = 8;
#else
constexpr size_t kBlock = 4;
#endif

// One value head h of the step.
HWY_INLINE void StepHead(const float* state_in, float* state_out, const float* HWY_RESTRICT q,
                         const float* HWY_RESTRICT k, const float* HWY_RESTRICT v,
                         const float* HWY_RESTRICT g, const float* HWY_RESTRICT beta,
                         float* HWY_RESTRICT y, const GatedDeltaShape& shape, size_t h) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t dk = shape.dk, dv = shape.dv;
  const size_t group = shape.value_heads / shape.key_heads;
  const float* kh = k + (h / group) * dk;
  const float* qh = q + (h / group) * dk;
  const float* gh = shape.gate_per_lane ? g + h * dk : nullptr;
  const float gate = shape.gate_per_lane ? 1.0f : g[h];
  const float b = beta[h];
  float kq = 0.0f;
  for (size_t j = 0; j < dk; ++j) kq += kh[j] * qh[j];
  const float* in = state_in + h * dk * dv;
  float* out = state_out + h * dk * dv;
  const float* vh = v + h * dv;
  float* yh = y + h * dv;
  size_t c = 0;
  for (; c + kBlock * N <= dv; c += kBlock * N) {
    StepColumns<kBlock>(d, in, out, dk, dv, c, kh, qh, gh, gate, vh, b, kq, yh);
  }
  for (; c + N <= dv; c += N) {
    StepColumns<1>(d, in, out, dk, dv, c, kh, qh, gh, gate, vh, b, kq, yh);
  }
  for (; c < dv; ++c) StepColumn(in, out, dk, dv, c, kh, qh, gh, gate, vh[c], b, kq, yh + c);
}

// The heads are independent: on a pool, each head is a task (the same
// arithmetic as on one thread, so the same bits).
void GatedDeltaStepImpl(const float* state_in, float* state_out, const float* HWY_RESTRICT q,
                        const float* HWY_RESTRICT k, const float* HWY_RESTRICT v,
                        const float* HWY_RESTRICT g, const float* HWY_RESTRICT beta,
                        float* HWY_RESTRICT y, const GatedDeltaShape& shape, ThreadPool* pool) {
  if (pool == nullptr || pool->threads() < 2 || shape.value_heads < 2) {
    for (size_t h = 0; h < shape.value_heads; ++h) {
      StepHead(state_in, state_out, q, k, v, g, beta, y, shape, h);
    }
    return;
  }
  // One pointer captured: the std::function Run takes needs no allocation.
  const struct {
    const float* state_in;
    float* state_out;
    const float *q, *k, *v, *g, *beta;
    float* y;
    const GatedDeltaShape* shape;
  } call{state_in, state_out, q, k, v, g, beta, y, &shape};
  const auto* c = &call;
  pool->Run(shape.value_heads, [c](size_t h) {
    StepHead(c->state_in, c->state_out, c->q, c->k, c->v, c->g, c->beta, c->y, *c->shape, h);
  });
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
                    const GatedDeltaShape& shape, ThreadPool* pool) {
  HWY_DYNAMIC_DISPATCH(GatedDeltaStepImpl)(state_in, state_out, q, k, v, g, beta, y, shape,
                                           pool);
}

const char* GatedDeltaTargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace kvspec
#endif  // HWY_ONCE

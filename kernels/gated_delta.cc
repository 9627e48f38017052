// Gated delta rule: the Highway version (per target), dispatched once per
// call. The scalar reference is in gated_delta_reference.cc.
#include "kvspec/kernels/gated_delta.h"
#include "kvspec/kernels/thread_pool.h"

#include <cmath>

#include "hwy/cache_control.h"  // hwy::Prefetch

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kvspec/kernels/gated_delta.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kvspec/kernels/in_register-inl.h"

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

// Requests into L1 of the tile the next call works on (at `next`, rows of
// `row_bytes` = its width * 4, at most 128), spread over the dk rows of
// pass 2: row j requests the bytes at j * row_bytes and j * row_bytes +
// row_bytes / 2 of that tile. Requests at most 64 bytes apart reach every
// line of the tile, and none is outside it, so no clamp is needed. With no
// next tile, `next` is the current tile (lines already in L1).
struct Ahead {
  const char* next = nullptr;
  size_t row_bytes = 0;

  HWY_INLINE void Row(size_t j) const {
    const char* row = next + j * row_bytes;
    hwy::Prefetch(row);
    hwy::Prefetch(row + row_bytes / 2);
  }
};

// One token for U*N adjacent columns of one tile of a head's state in
// kernel order (row j of the tile holds S[.][j] of its columns, rows
// `stride` floats apart; in and out point at the first of the columns):
//   pass 1 (reads the columns once, 2U vertical accumulators, no
//     horizontal reduction): for j = 0 .. dk-1 in order,
//       m  = MulAdd(in[j], g_j * k_j, m),  y' = MulAdd(in[j], g_j * q_j, y')
//     with per-lane gates; with a scalar gate g, the same sums of
//     in[j] * k_j and in[j] * q_j, then m = g * m and y' = g * y';
//   delta = beta * (v - m);  y = MulAdd(delta, k . q, y');
//   pass 2 (the same columns again, now in L1): for j in order,
//       out[j] = MulAdd(k_j, delta, g_j * in[j]).
// That is the definition rearranged: m_i = sum_j (g_j S_ij) k_j and
// y_i = sum_j S'_ij q_j = sum_j S_ij (g_j q_j) + delta_i (k . q). Each column
// takes the same path for every token (which path depends on dv and the
// target only), so a window of T tokens, T single steps and a rollback
// replay give identical bytes, and so does any split of the heads across
// calls. In place is safe: pass 1 writes nothing and pass 2 writes each
// element after reading it.
// kStride: the row stride when known at compile time (a whole tile), else
// 0 and `row_stride` gives it; kPerLane: g is per lane (gh), else the scalar
// `gate` (gh unused). Both are template arguments so that a whole tile's
// loops are compiled for its stride and gate kind.
// Rows j of pass 1 per chunk of precomputed g_j * k_j and g_j * q_j (per-lane
// gates; even, so the pairing of rows in pass 1 does not depend on the
// chunking).
constexpr size_t kChunk = 256;

template <size_t U, size_t kStride, bool kPerLane, class D>
HWY_INLINE void StepColumns(D d, const float* in, float* out, size_t dk, size_t row_stride,
                            const float* HWY_RESTRICT kh, const float* HWY_RESTRICT qh,
                            const float* HWY_RESTRICT gh, float gate, const float* HWY_RESTRICT vh,
                            float b, float kq, float* HWY_RESTRICT yh, const Ahead& ahead) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const size_t stride = kStride != 0 ? kStride : row_stride;
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
    // The row coefficients: k_j and q_j themselves with a scalar gate.
    const float* akp = kh + j0;
    const float* cqp = qh + j0;
    if (kPerLane) {
      for (size_t j = 0; j < n; ++j) {
        ak[j] = gh[j0 + j] * kh[j0 + j];
        cq[j] = gh[j0 + j] * qh[j0 + j];
      }
      akp = ak;
      cqp = cq;
    }
    size_t j = 0;
    for (; j + S2 <= n; j += S2) {
      HWY_UNROLL(2)
      for (size_t p = 0; p < S2; ++p) {
        const V a = hn::Set(d, akp[j + p]);
        const V c = hn::Set(d, cqp[j + p]);
        const float* row = in + (j0 + j + p) * stride;
        HWY_UNROLL(8)
        for (size_t u = 0; u < U; ++u) {
          // In a register (in_register-inl.h): otherwise GCC folds this
          // load into both multiply-adds, and pass 1 is bound by its loads
          // (six per row of two vectors on AVX3, not four): the hot step
          // about 10% faster on AVX3; see docs/benchmarks.md.
          const V s = InRegister(hn::LoadU(d, row + u * N));
          m[p][u] = hn::MulAdd(s, a, m[p][u]);
          yp[p][u] = hn::MulAdd(s, c, yp[p][u]);
        }
      }
    }
    for (; j < n; ++j) {  // the last row when dk is odd and S2 == 2
      const V a = hn::Set(d, akp[j]);
      const V c = hn::Set(d, cqp[j]);
      const float* row = in + (j0 + j) * stride;
      HWY_UNROLL(8)
      for (size_t u = 0; u < U; ++u) {
        const V s = InRegister(hn::LoadU(d, row + u * N));
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
  if (!kPerLane) {
    const V gv = hn::Set(d, gate);
    HWY_UNROLL(8)
    for (size_t u = 0; u < U; ++u) {
      m[0][u] = hn::Mul(gv, m[0][u]);
      yp[0][u] = hn::Mul(gv, yp[0][u]);
    }
  }
  const V bv = hn::Set(d, b);
  const V kqv = hn::Set(d, kq);
  V delta[U];
  HWY_UNROLL(8)
  for (size_t u = 0; u < U; ++u) {
    delta[u] = hn::Mul(bv, hn::Sub(hn::LoadU(d, vh + u * N), m[0][u]));
    hn::StoreU(hn::MulAdd(delta[u], kqv, yp[0][u]), d, yh + u * N);
  }
  const V gs = hn::Set(d, gate);
  for (size_t j = 0; j < dk; ++j) {
    const V gj = kPerLane ? hn::Set(d, gh[j]) : gs;
    const V kj = hn::Set(d, kh[j]);
    const float* row_in = in + j * stride;
    float* row_out = out + j * stride;
    ahead.Row(j);
    HWY_UNROLL(8)
    for (size_t u = 0; u < U; ++u) {
      const V s = hn::Mul(gj, hn::LoadU(d, row_in + u * N));
      hn::StoreU(hn::MulAdd(kj, delta[u], s), d, row_out + u * N);
    }
  }
}

// The same for one column (the w % N columns of a tile after its whole
// vectors), scalar, in the same order.
HWY_INLINE void StepColumn(const float* in, float* out, size_t dk, size_t stride,
                           const float* HWY_RESTRICT kh, const float* HWY_RESTRICT qh,
                           const float* HWY_RESTRICT gh, float gate, float v, float b, float kq,
                           float* HWY_RESTRICT y) {
  float m = 0.0f, yp = 0.0f;
  for (size_t j = 0; j < dk; ++j) {
    const float s = in[j * stride];
    m += s * (gh ? gh[j] * kh[j] : kh[j]);
    yp += s * (gh ? gh[j] * qh[j] : qh[j]);
  }
  if (!gh) {
    m *= gate;
    yp *= gate;
  }
  const float delta = b * (v - m);
  *y = yp + delta * kq;
  for (size_t j = 0; j < dk; ++j) {
    const float gj = gh ? gh[j] : gate;
    out[j * stride] = gj * in[j * stride] + kh[j] * delta;
  }
}

// Vectors per StepColumns call in a whole tile: the tile's 32 columns at
// once (U = 2 on AVX-512, 4 on AVX2, 8 on 128-bit targets), at most 8.
// Tiles keep pass 2 in L1, where blocks of a whole head transposed (64 KiB
// at dk = dv = 128) read it from L2: the cold step about 10% faster on
// AVX3 and AVX2; see docs/benchmarks.md.
constexpr size_t kTileVectors = HWY_MAX(1, HWY_MIN(8, kGatedDeltaTile / HWY_LANES(float)));

// The tiles of one value head: whole tiles (compile-time stride) and a
// narrow last one.
template <bool kPerLane>
HWY_INLINE void StepTiles(const float* in, float* out, const float* HWY_RESTRICT kh,
                          const float* HWY_RESTRICT qh, const float* HWY_RESTRICT gh, float gate,
                          float b, float kq, const float* HWY_RESTRICT vh, float* HWY_RESTRICT yh,
                          size_t dk, size_t dv, bool more_heads) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  constexpr size_t kTile = kGatedDeltaTile;
  for (size_t c0 = 0; c0 < dv; c0 += kTile) {
    const size_t w = GatedDeltaTileWidth(dv, c0);
    const float* tile_in = in + c0 * dk;
    float* tile_out = out + c0 * dk;
    // The next tile: this head's, else the next head's first (tiles and
    // heads are adjacent, so it starts where this one ends); with none
    // (after the last head of the call), this tile.
    const bool last = c0 + w == dv;
    const bool next = !last || more_heads;
    const size_t next_w = next ? GatedDeltaTileWidth(dv, last ? 0 : c0 + w) : w;
    Ahead ahead;
    ahead.next = reinterpret_cast<const char*>(next ? tile_in + w * dk : tile_in);
    ahead.row_bytes = next_w * sizeof(float);
    size_t c = 0;
    if (w == kTile && kTileVectors * N == kTile) {
      StepColumns<kTileVectors, kTile, kPerLane>(d, tile_in, tile_out, dk, kTile, kh, qh, gh, gate,
                                                 vh + c0, b, kq, yh + c0, ahead);
      continue;
    }
    for (; c + kTileVectors * N <= w; c += kTileVectors * N) {
      StepColumns<kTileVectors, 0, kPerLane>(d, tile_in + c, tile_out + c, dk, w, kh, qh, gh, gate,
                                             vh + c0 + c, b, kq, yh + c0 + c, ahead);
    }
    for (; c + N <= w; c += N) {
      StepColumns<1, 0, kPerLane>(d, tile_in + c, tile_out + c, dk, w, kh, qh, gh, gate,
                                  vh + c0 + c, b, kq, yh + c0 + c, ahead);
    }
    for (; c < w; ++c) {
      StepColumn(tile_in + c, tile_out + c, dk, w, kh, qh, kPerLane ? gh : nullptr, gate,
                 vh[c0 + c], b, kq, yh + c0 + c);
    }
  }
}

// One value head h of the step.
HWY_INLINE void StepHead(const float* state_in, float* state_out, const float* HWY_RESTRICT q,
                         const float* HWY_RESTRICT k, const float* HWY_RESTRICT v,
                         const float* HWY_RESTRICT g, const float* HWY_RESTRICT beta,
                         float* HWY_RESTRICT y, const GatedDeltaShape& shape, size_t h) {
  const size_t dk = shape.dk, dv = shape.dv;
  const size_t group = shape.value_heads / shape.key_heads;
  const float* kh = k + (h / group) * dk;
  const float* qh = q + (h / group) * dk;
  const float kq = DotLanes(kh, qh, dk);
  const float* in = state_in + h * dk * dv;
  float* out = state_out + h * dk * dv;
  const bool more_heads = h + 1 < shape.value_heads;
  if (shape.gate_per_lane) {
    StepTiles<true>(in, out, kh, qh, g + h * dk, 1.0f, beta[h], kq, v + h * dv, y + h * dv, dk, dv,
                    more_heads);
  } else {
    StepTiles<false>(in, out, kh, qh, nullptr, g[h], beta[h], kq, v + h * dv, y + h * dv, dk, dv,
                     more_heads);
  }
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
  HWY_DYNAMIC_DISPATCH(GatedDeltaStepImpl)(state_in, state_out, q, k, v, g, beta, y, shape, pool);
}

const char* GatedDeltaTargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace kvspec
#endif  // HWY_ONCE

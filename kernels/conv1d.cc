// Causal conv1d step: the Highway version (per target), dispatched once per
// call, and the state shift it shares with the scalar reference
// (conv1d_reference.cc).
#include "kernels/conv1d.h"

#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/conv1d.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvspec {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// silu(z) = z / (1 + exp(-z)), computed as z * (1 / (1 + e)) with
//   e = exp(t), t = -z clamped to [-87, 88]: t = n ln2 + r with n integer
//       and |r| <= ln2 / 2 (ln2 split in two parts), exp(r) from Highway's
//       Exp polynomial (Horner form), scaled by 2^n (n in [-126, 127], so
//       2^n is a normal float and nothing overflows);
//   1 / (1 + e) from the approximate reciprocal and one Newton step.
// The clamp keeps the result right at the extremes: below t = -87,
// exp(t) < 2^-125 vanishes next to 1 (silu(z) = z as in the reference);
// above t = 88 (z < -88) the reference's z / (1 + exp(-z)) is below 1e-36
// in magnitude or -0, and this returns z * 0 = -0. A NaN z stays NaN.
// Relative error about 1e-7 in the sigmoid, against kConvTolerance = 1e-5.
// Cheaper than hn::Exp (one scaling multiply instead of two, no range
// select) and hn::Div (no divider).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Silu(D d, V z) {
  const hn::RebindToSigned<D> di;
  const V t = hn::Min(hn::Max(hn::Neg(z), hn::Set(d, -87.0f)), hn::Set(d, 88.0f));
  // n = round(t / ln2): adding 1.5 * 2^23 rounds to an integer in the low
  // mantissa bits.
  const V kShift = hn::Set(d, 12582912.0f);
  const V shifted = hn::MulAdd(t, hn::Set(d, 1.442695040888963407359924681f), kShift);
  const V n = hn::Sub(shifted, kShift);
  V r = hn::MulAdd(n, hn::Set(d, -0.693145751953125f), t);
  r = hn::MulAdd(n, hn::Set(d, -1.428606765330187045e-6f), r);
  // exp(r) = 1 + r + r^2 * p(r), Highway's ExpPoly coefficients.
  V p = hn::Set(d, 0.000198527617612853646278381f);
  p = hn::MulAdd(p, r, hn::Set(d, 0.00139304355252534151077271f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.00833336077630519866943359f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.0416664853692054748535156f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.166666671633720397949219f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.5f));
  const V one = hn::Set(d, 1.0f);
  const V expr = hn::Add(hn::MulAdd(p, hn::Mul(r, r), r), one);
  // 2^n: n + 127 in the exponent field. shifted's low bits hold n + 3 * 2^22.
  const auto biased = hn::Sub(hn::BitCast(di, shifted), hn::Set(di, 0x4B400000 - 127));
  const V e = hn::Mul(expr, hn::BitCast(d, hn::ShiftLeft<23>(biased)));
  const V denom = hn::Add(one, e);
  const V r0 = hn::ApproximateReciprocal(denom);
  const V recip = hn::Mul(r0, hn::NegMulAdd(denom, r0, hn::Set(d, 2.0f)));
  // Below z = -88 the sigmoid is under 2^-126: zero it, or a huge |z| would
  // scale the clamped exp's tiny reciprocal back up.
  return hn::Mul(z, hn::IfThenZeroElse(hn::Lt(z, hn::Set(d, -88.0f)), recip));
}

// u = silu(sum_j w[j] * window[j]) for the channels [c, c + lanes).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ConvLanes(D d, const float* HWY_RESTRICT w, const float* HWY_RESTRICT state,
                       const float* HWY_RESTRICT x, size_t c, size_t channels, size_t kernel) {
  auto acc = hn::Zero(d);
  for (size_t j = 0; j + 1 < kernel; ++j) {
    acc = hn::MulAdd(hn::LoadU(d, w + j * channels + c), hn::LoadU(d, state + j * channels + c),
                     acc);
  }
  acc = hn::MulAdd(hn::LoadU(d, w + (kernel - 1) * channels + c), hn::LoadU(d, x + c), acc);
  return Silu(d, acc);
}

// The state shift stays a separate memmove (ConvShiftState): storing the
// shifted rows from this loop measured slower (the rows are a multiple of
// 4 KiB apart at the benchmark's channel counts, so the stores alias the
// next rows' loads).
void ConvStepImpl(const float* HWY_RESTRICT w, const float* state_in, float* state_out,
                  const float* HWY_RESTRICT x, float* HWY_RESTRICT u, size_t channels,
                  size_t kernel) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t c = 0;
  for (; c + N <= channels; c += N) {
    hn::StoreU(ConvLanes(d, w, state_in, x, c, channels, kernel), d, u + c);
  }
  if (c < channels) {
    // The last partial vector: the same lane arithmetic on padded copies.
    const size_t rest = channels - c;
    HWY_ALIGN float wt[kMaxConvKernel * hn::MaxLanes(d)];
    HWY_ALIGN float st[kMaxConvKernel * hn::MaxLanes(d)];
    HWY_ALIGN float xt[hn::MaxLanes(d)] = {};
    HWY_ALIGN float ut[hn::MaxLanes(d)];
    for (size_t j = 0; j < kernel; ++j) {
      for (size_t i = 0; i < N; ++i) {
        wt[j * N + i] = i < rest ? w[j * channels + c + i] : 0.0f;
        if (j + 1 < kernel) st[j * N + i] = i < rest ? state_in[j * channels + c + i] : 0.0f;
      }
    }
    for (size_t i = 0; i < rest; ++i) xt[i] = x[c + i];
    hn::Store(ConvLanes(d, wt, st, xt, 0, N, kernel), d, ut);
    for (size_t i = 0; i < rest; ++i) u[c + i] = ut[i];
  }
  ConvShiftState(state_in, state_out, x, channels, kernel);
}

}  // namespace HWY_NAMESPACE
}  // namespace kvspec
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvspec {

HWY_EXPORT(ConvStepImpl);

void ConvStep(const float* w, const float* state_in, float* state_out, const float* x,
              float* u, size_t channels, size_t kernel) {
  HWY_DYNAMIC_DISPATCH(ConvStepImpl)(w, state_in, state_out, x, u, channels, kernel);
}

void ConvShiftState(const float* state_in, float* state_out, const float* x, size_t channels,
                    size_t kernel) {
  if (kernel < 2) return;
  const size_t rows = kernel - 1;
  // Drop the oldest row, append x. memmove: state_in may equal state_out.
  std::memmove(state_out, state_in + channels, (rows - 1) * channels * sizeof(float));
  std::memcpy(state_out + (rows - 1) * channels, x, channels * sizeof(float));
}

}  // namespace kvspec
#endif  // HWY_ONCE

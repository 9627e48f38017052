// Causal conv1d step: the Highway version (per target), dispatched once per
// call; the state shift the scalar reference (conv1d_reference.cc) and
// replays use, and the layout conversions (conv1d.h).
#include "kvspec/kernels/conv1d.h"

#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kvspec/kernels/conv1d.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvspec {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// exp(-s) for |s| <= ln2 / 2, highest degree first: the Chebyshev fit of
// degree 5 on [-0.3466, 0.3466] (mpmath.chebyfit), coefficients rounded to
// float. Evaluated in double it is within 1.7e-7 relative of exp(-s) there
// with one multiply-add fewer than the Taylor polynomial of degree 6.
constexpr float kExpCoefficients[6] = {-0.008369154296815395f, 0.04191754385828972f,
                                       -0.16666504740715027f,  0.49998870491981506f,
                                       -1.0f,                  1.0000001192092896f};

// silu(z) = z / (1 + exp(-z)), computed as z * (1 / (1 + e)) with
//   e = exp(-zc), zc = z clamped to [-88, 87]. With n = round(-zc / ln2)
//       and s = zc + n ln2 (one FMA; |s| <= ln2 / 2 up to the rounding of
//       ln2 to float, at most 127 * 2e-9 in s), -zc = n ln2 - s, so
//       e = 2^n exp(-s): exp(-s) by kExpCoefficients (Horner), scaled by
//       2^n (n in [-126, 127], so 2^n is a normal float and nothing
//       overflows): one VSCALEFPS on AVX-512, else n + 127 placed in the
//       exponent field and a multiply;
//   1 / (1 + e) from the approximate reciprocal and one Newton step.
// The clamp keeps the result right at the extremes: above z = 87,
// exp(-z) < 2^-125 vanishes next to 1 (silu(z) = z as in the reference);
// below z = -88 the reference's z / (1 + exp(-z)) is below 1e-36 in
// magnitude or -0, and this returns z * 0 = -0. A NaN z stays NaN (the
// last multiply is by z itself).
// Measured on conv1d_test's grid over [-120, 120] (steps of 2^-9): at most
// 1.9e-7 * (1 + |reference|) from the reference on every target, against
// kConvTolerance = 1e-5. 19 vector operations on AVX-512 (21 elsewhere).
//
// SiluN applies it to M vectors in lockstep, each step to all of them before
// the next: M independent chains side by side, where one vector's chain of
// about 17 dependent operations (4 cycles each) would leave the core
// waiting. The same operations on every lane whatever M.
template <size_t M, class D, class V = hn::Vec<D>>
HWY_INLINE void SiluN(D d, V* HWY_RESTRICT z) {
  const V lo = hn::Set(d, -88.0f);
  // n = round(-zc / ln2): adding 1.5 * 2^23 rounds to an integer in the low
  // mantissa bits.
  const V kShift = hn::Set(d, 12582912.0f);
  const V one = hn::Set(d, 1.0f);
  V shifted[M], n[M], s[M], p[M];
  HWY_UNROLL(8)
  for (size_t m = 0; m < M; ++m) {
    const V zc = hn::Min(hn::Max(z[m], lo), hn::Set(d, 87.0f));
    shifted[m] = hn::MulAdd(zc, hn::Set(d, -1.442695040888963407359924681f), kShift);
    n[m] = hn::Sub(shifted[m], kShift);
    s[m] = hn::MulAdd(n[m], hn::Set(d, 0.693147180559945309417f), zc);
    p[m] = hn::Set(d, kExpCoefficients[0]);
  }
  HWY_UNROLL(5)
  for (size_t k = 1; k < 6; ++k) {
    const V c = hn::Set(d, kExpCoefficients[k]);
    HWY_UNROLL(8)
    for (size_t m = 0; m < M; ++m) p[m] = hn::MulAdd(p[m], s[m], c);
  }
  HWY_UNROLL(8)
  for (size_t m = 0; m < M; ++m) {
#if HWY_TARGET <= HWY_AVX3
    static_assert(sizeof(V) == 64, "kConvBlock lanes are one 512-bit vector here");
    const V e{_mm512_scalef_ps(p[m].raw, n[m].raw)};
#else
    // 2^n: n + 127 in the exponent field. shifted's low bits hold n + 3 * 2^22.
    const hn::RebindToSigned<D> di;
    const auto biased = hn::Sub(hn::BitCast(di, shifted[m]), hn::Set(di, 0x4B400000 - 127));
    const V e = hn::Mul(p[m], hn::BitCast(d, hn::ShiftLeft<23>(biased)));
#endif
    const V denom = hn::Add(one, e);
    const V r0 = hn::ApproximateReciprocal(denom);
    const V recip = hn::Mul(r0, hn::NegMulAdd(denom, r0, hn::Set(d, 2.0f)));
    // Below z = -88 the sigmoid is under 2^-126: zero it, or a huge |z|
    // would scale the clamped exp's tiny reciprocal back up.
    z[m] = hn::Mul(z[m], hn::IfThenZeroElse(hn::Lt(z[m], lo), recip));
  }
}

// G consecutive blocks of kConvBlock channels (kernel order, see conv1d.h):
// u for their channels and the shifted state, in one pass. kKernel is K when
// known at compile time (the common K = 4), 0 to read `kernel`. Per lane:
// acc = 0, then acc = w[j] * window[j] + acc for j = 0 .. K-1 (FMA), then
// SiLU; the same operations whatever kKernel and G, so the result depends on
// neither. In place (state_out == state_in) each row is loaded before the
// row it moves into is stored.
template <size_t kKernel, size_t G, class D>
HWY_INLINE void ConvBlock(D d, const float* HWY_RESTRICT wb, const float* sin, float* sout,
                          const float* HWY_RESTRICT x, float* HWY_RESTRICT u, size_t kernel) {
  constexpr size_t B = kConvBlock;
  constexpr size_t N = hn::MaxLanes(D());
  constexpr size_t kPer = B / N;  // vectors per block
  const size_t K = kKernel ? kKernel : kernel;
  hn::Vec<D> acc[G * kPer];
  HWY_UNROLL(16)
  for (size_t v = 0; v < G * kPer; ++v) {
    // Vector v: lanes [i, i + N) of block g, channels [v * N, v * N + N).
    const size_t g = v / kPer, i = v % kPer * N;
    const float* w = wb + g * B * K + i;
    const float* si = sin + g * B * (K - 1) + i;
    float* so = sout + g * B * (K - 1) + i;
    auto a = hn::Zero(d);
    for (size_t j = 0; j + 1 < K; ++j) {
      const auto sv = hn::LoadU(d, si + j * B);
      a = hn::MulAdd(hn::LoadU(d, w + j * B), sv, a);
      if (j > 0) hn::StoreU(sv, d, so + (j - 1) * B);
    }
    const auto xv = hn::LoadU(d, x + v * N);
    a = hn::MulAdd(hn::LoadU(d, w + (K - 1) * B), xv, a);
    if (K > 1) hn::StoreU(xv, d, so + (K - 2) * B);
    acc[v] = a;
  }
  SiluN<G * kPer>(d, acc);
  HWY_UNROLL(16)
  for (size_t v = 0; v < G * kPer; ++v) hn::StoreU(acc[v], d, u + v * N);
}

template <size_t kKernel>
void ConvBlocks(const float* HWY_RESTRICT w, const float* state_in, float* state_out,
                const float* HWY_RESTRICT x, float* HWY_RESTRICT u, size_t channels,
                size_t kernel) {
  // At most one block per vector (N divides kConvBlock on every target).
  const hn::CappedTag<float, kConvBlock> d;
  constexpr size_t B = kConvBlock;
  // Blocks per call: four SiLU chains side by side (one block on targets
  // whose blocks hold four vectors or more): about 8% faster than one chain
  // at K = 4 on AVX-512, where two gained less and eight lost; see
  // docs/benchmarks.md.
  constexpr size_t kChains = 4;
  constexpr size_t N = hn::MaxLanes(decltype(d)());
  constexpr size_t G = kChains * N / B > 0 ? kChains * N / B : 1;
  const size_t K = kKernel ? kKernel : kernel;
  const size_t full = channels / B * B;
  size_t c = 0;
  for (; c + G * B <= full; c += G * B) {
    ConvBlock<kKernel, G>(d, w + c * K, state_in + c * (K - 1), state_out + c * (K - 1), x + c,
                          u + c, kernel);
  }
  for (; c < full; c += B) {
    ConvBlock<kKernel, 1>(d, w + c * K, state_in + c * (K - 1), state_out + c * (K - 1), x + c,
                          u + c, kernel);
  }
  if (full < channels) {
    // The last, narrower block ([rows][rest]): the same lane arithmetic on a
    // padded copy of kConvBlock channels.
    const size_t rest = channels - full;
    HWY_ALIGN float wt[kMaxConvKernel * B] = {};
    HWY_ALIGN float st[kMaxConvKernel * B] = {};
    HWY_ALIGN float xt[B] = {};
    HWY_ALIGN float ut[B];
    const float* wr = w + full * K;
    const float* sr = state_in + full * (K - 1);
    for (size_t j = 0; j < K; ++j) {
      for (size_t i = 0; i < rest; ++i) {
        wt[j * B + i] = wr[j * rest + i];
        if (j + 1 < K) st[j * B + i] = sr[j * rest + i];
      }
    }
    for (size_t i = 0; i < rest; ++i) xt[i] = x[full + i];
    ConvBlock<kKernel, 1>(d, wt, st, st, xt, ut, kernel);
    float* so = state_out + full * (K - 1);
    for (size_t j = 0; j + 1 < K; ++j) {
      for (size_t i = 0; i < rest; ++i) so[j * rest + i] = st[j * B + i];
    }
    for (size_t i = 0; i < rest; ++i) u[full + i] = ut[i];
  }
}

void ConvStepImpl(const float* HWY_RESTRICT w, const float* state_in, float* state_out,
                  const float* HWY_RESTRICT x, float* HWY_RESTRICT u, size_t channels,
                  size_t kernel) {
  if (kernel == 4) {
    ConvBlocks<4>(w, state_in, state_out, x, u, channels, kernel);
  } else {
    ConvBlocks<0>(w, state_in, state_out, x, u, channels, kernel);
  }
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

namespace {
// Row-major [rows][C] -> kernel order (conv1d.h), or back.
void Blocked(const float* from, float* to, size_t channels, size_t rows, bool to_blocked) {
  for (size_t c0 = 0; c0 < channels; c0 += kConvBlock) {
    const size_t n = channels - c0 < kConvBlock ? channels - c0 : kConvBlock;
    float* block = to_blocked ? to + c0 * rows : nullptr;
    const float* cblock = to_blocked ? nullptr : from + c0 * rows;
    for (size_t j = 0; j < rows; ++j) {
      if (to_blocked) {
        std::memcpy(block + j * n, from + j * channels + c0, n * sizeof(float));
      } else {
        std::memcpy(to + j * channels + c0, cblock + j * n, n * sizeof(float));
      }
    }
  }
}
}  // namespace

void PackConvWeights(const float* w, float* packed, size_t channels, size_t kernel) {
  Blocked(w, packed, channels, kernel, /*to_blocked=*/true);
}

void ConvStateToTrace(const float* state, float* trace, size_t channels, size_t kernel) {
  if (kernel < 2) return;
  Blocked(state, trace, channels, kernel - 1, /*to_blocked=*/false);
}

void ConvStateFromTrace(const float* trace, float* state, size_t channels, size_t kernel) {
  if (kernel < 2) return;
  Blocked(trace, state, channels, kernel - 1, /*to_blocked=*/true);
}

void ConvShiftState(const float* state_in, float* state_out, const float* x, size_t channels,
                    size_t kernel) {
  if (kernel < 2) return;
  const size_t rows = kernel - 1;
  // Per block [rows][n]: drop the oldest row, append x. memmove: state_in
  // may equal state_out.
  for (size_t c0 = 0; c0 < channels; c0 += kConvBlock) {
    const size_t n = channels - c0 < kConvBlock ? channels - c0 : kConvBlock;
    const float* in = state_in + c0 * rows;
    float* out = state_out + c0 * rows;
    std::memmove(out, in + n, (rows - 1) * n * sizeof(float));
    std::memcpy(out + (rows - 1) * n, x + c0, n * sizeof(float));
  }
}

}  // namespace kvspec
#endif  // HWY_ONCE

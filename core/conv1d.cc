// Causal conv1d step: Highway version (per target) and scalar reference.
#include "core/conv1d.h"

#include <cmath>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/conv1d.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvspec {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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
  // silu(z) = z / (1 + exp(-z))
  const auto one = hn::Set(d, 1.0f);
  return hn::Div(acc, hn::Add(one, hn::Exp(d, hn::Neg(acc))));
}

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
    HWY_ALIGN float wt[64 * hn::MaxLanes(d)];
    HWY_ALIGN float st[64 * hn::MaxLanes(d)];
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
#endif  // HWY_ONCE

// The q8_0 and q4_0 quantizers (kernels/quantize.h), per Highway target:
// a block's largest magnitude and its values scaled a vector at a time,
// with the scalar reference's fp32 arithmetic (round halves away from zero
// as roundf does, truncation as a float -> int conversion does), so the
// same bytes on every target.
#include "kvspec/kernels/quantize.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kvspec/kernels/quantize.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvspec {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// The largest |x| of a block of 32 values into *amax, in one pass with the
// check that they are all finite (false: a NaN or an infinity; a NaN
// compares false).
HWY_INLINE bool BlockAbsMax(DF d, const float* HWY_RESTRICT x, float* amax) {
  const size_t N = hn::Lanes(d);
  const VF largest = hn::Set(d, std::numeric_limits<float>::max());
  VF a = hn::Abs(hn::LoadU(d, x));
  VF m = a;
  auto finite = hn::Le(a, largest);
  for (size_t o = N; o < static_cast<size_t>(kKvBlockValues); o += N) {
    a = hn::Abs(hn::LoadU(d, x + o));
    m = hn::Max(m, a);
    finite = hn::And(finite, hn::Le(a, largest));
  }
  if (!hn::AllTrue(d, finite)) return false;
  *amax = hn::GetLane(hn::MaxOfLanes(d, m));
  return true;
}

// A block of non-finite values: NaN scale, zero quants (kernels/quantize.h).
template <class Block>
HWY_INLINE void StoreNonFinite(Block* y) {
  y->d = kNonFiniteBlockScale;
  std::memset(y->qs, 0, sizeof(y->qs));
}

// roundf, lane by lane: the truncation, plus one away from zero when the
// dropped fraction (exact) is at least a half.
HWY_INLINE VF RoundHalfAway(DF d, VF v) {
  const VF t = hn::Trunc(v);
  const auto up = hn::Ge(hn::Abs(hn::Sub(v, t)), hn::Set(d, 0.5f));
  return hn::Add(t, hn::IfThenElseZero(up, hn::CopySignToAbs(hn::Set(d, 1.0f), v)));
}

// The low bytes of integral floats in [-128, 255]: each plus 1.5 * 2^23
// (exact) holds the integer's two's complement in its low bits.
HWY_INLINE void StoreLowBytes(DF d, VF integral, uint8_t* HWY_RESTRICT out) {
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint8_t, DF> d8;
  const auto bits = hn::BitCast(du, hn::Add(integral, hn::Set(d, 12582912.0f)));
  hn::StoreU(hn::TruncateTo(d8, bits), d8, out);
}

void QuantizeQ8_0Impl(const float* HWY_RESTRICT x, size_t n, BlockQ8_0* HWY_RESTRICT y) {
  const DF d;
  const size_t N = hn::Lanes(d);
  for (size_t b = 0; b < n / kKvBlockValues; ++b) {
    const float* xb = x + b * kKvBlockValues;
    float amax;
    if (!BlockAbsMax(d, xb, &amax)) {
      StoreNonFinite(&y[b]);
      continue;
    }
    const float scale = amax / 127.0f;
    const float id = scale != 0.0f ? 1.0f / scale : 0.0f;
    y[b].d = FloatToF16(scale);
    const VF vid = hn::Set(d, id);
    for (size_t o = 0; o < static_cast<size_t>(kKvBlockValues); o += N) {
      const VF q = RoundHalfAway(d, hn::Mul(hn::LoadU(d, xb + o), vid));
      StoreLowBytes(d, q, reinterpret_cast<uint8_t*>(y[b].qs) + o);
    }
  }
}

void QuantizeQ4_0Impl(const float* HWY_RESTRICT x, size_t n, BlockQ4_0* HWY_RESTRICT y) {
  const DF d;
  const size_t N = hn::Lanes(d);
  for (size_t b = 0; b < n / kKvBlockValues; ++b) {
    const float* xb = x + b * kKvBlockValues;
    float amax;
    if (!BlockAbsMax(d, xb, &amax)) {
      StoreNonFinite(&y[b]);
      continue;
    }
    float max = 0.0f;  // the first x of the largest magnitude
    for (int j = 0; j < kKvBlockValues; ++j) {
      if (std::fabs(xb[j]) == amax) {
        max = xb[j];
        break;
      }
    }
    const float scale = max / -8.0f;
    const float id = scale != 0.0f ? 1.0f / scale : 0.0f;
    y[b].d = FloatToF16(scale);
    const VF vid = hn::Set(d, id);
    const VF half = hn::Set(d, 8.5f);
    const VF fifteen = hn::Set(d, 15.0f);
    for (size_t o = 0; o < 16; o += N) {
      // x * id, rounded, then + 8.5, rounded (not fused), as the reference.
      const VF xlo = hn::Add(hn::Mul(hn::LoadU(d, xb + o), vid), half);
      const VF xhi = hn::Add(hn::Mul(hn::LoadU(d, xb + 16 + o), vid), half);
      // Truncated (as the conversion to int8 truncates; both are at least
      // 0.49 here), at most 15, then lo + 16 * hi (exact) as one byte.
      const VF lo = hn::Min(hn::Trunc(xlo), fifteen);
      const VF hi = hn::Min(hn::Trunc(xhi), fifteen);
      StoreLowBytes(d, hn::MulAdd(hi, hn::Set(d, 16.0f), lo), y[b].qs + o);
    }
  }
}

const char* QuantizeTarget() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace kvspec
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvspec {

HWY_EXPORT(QuantizeQ8_0Impl);
HWY_EXPORT(QuantizeQ4_0Impl);
HWY_EXPORT(QuantizeTarget);

void QuantizeQ8_0(const float* x, size_t n, BlockQ8_0* y) {
  HWY_DYNAMIC_DISPATCH(QuantizeQ8_0Impl)(x, n, y);
}
void QuantizeQ4_0(const float* x, size_t n, BlockQ4_0* y) {
  HWY_DYNAMIC_DISPATCH(QuantizeQ4_0Impl)(x, n, y);
}

const char* QuantizeTargetName() { return HWY_DYNAMIC_DISPATCH(QuantizeTarget)(); }

}  // namespace kvspec
#endif  // HWY_ONCE

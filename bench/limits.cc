// Peak single-core FP32 multiply-add rate, per Highway target: the limit the
// window attention benchmarks are reported against (bench/limits.h).
#include "bench/limits.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/limits.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvspec {
namespace bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Twelve independent chains of vector multiply-adds, enough to cover the
// latency times the issue width of the FMA units of current x86 cores, on
// values that stay finite (|x| shrinks towards a fixed point).
double FmaLoopImpl(size_t iterations, float seed) {
  const hn::ScalableTag<float> d;
  const auto m = hn::Set(d, 0.999f);
  const auto a = hn::Set(d, 1e-3f);
  auto x0 = hn::Set(d, seed), x1 = hn::Set(d, seed + 1), x2 = hn::Set(d, seed + 2);
  auto x3 = hn::Set(d, seed + 3), x4 = hn::Set(d, seed + 4), x5 = hn::Set(d, seed + 5);
  auto x6 = hn::Set(d, seed + 6), x7 = hn::Set(d, seed + 7), x8 = hn::Set(d, seed + 8);
  auto x9 = hn::Set(d, seed + 9), x10 = hn::Set(d, seed + 10), x11 = hn::Set(d, seed + 11);
  for (size_t i = 0; i < iterations; ++i) {
    x0 = hn::MulAdd(x0, m, a);
    x1 = hn::MulAdd(x1, m, a);
    x2 = hn::MulAdd(x2, m, a);
    x3 = hn::MulAdd(x3, m, a);
    x4 = hn::MulAdd(x4, m, a);
    x5 = hn::MulAdd(x5, m, a);
    x6 = hn::MulAdd(x6, m, a);
    x7 = hn::MulAdd(x7, m, a);
    x8 = hn::MulAdd(x8, m, a);
    x9 = hn::MulAdd(x9, m, a);
    x10 = hn::MulAdd(x10, m, a);
    x11 = hn::MulAdd(x11, m, a);
  }
  const auto sum = hn::Add(hn::Add(hn::Add(x0, x1), hn::Add(x2, x3)),
                           hn::Add(hn::Add(hn::Add(x4, x5), hn::Add(x6, x7)),
                                   hn::Add(hn::Add(x8, x9), hn::Add(x10, x11))));
  // The sum keeps every chain live; the caller passes it to DoNotOptimize.
  return static_cast<double>(hn::GetLane(hn::SumOfLanes(d, sum)));
}

size_t LanesImpl() { return hn::Lanes(hn::ScalableTag<float>()); }

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace bench
}  // namespace kvspec
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvspec {
namespace bench {

HWY_EXPORT(FmaLoopImpl);
HWY_EXPORT(LanesImpl);
HWY_EXPORT(TargetNameImpl);

double FmaLoop(size_t iterations, float seed) {
  return HWY_DYNAMIC_DISPATCH(FmaLoopImpl)(iterations, seed);
}
double FmaLoopFlops(size_t iterations) {
  return 12.0 * 2.0 * static_cast<double>(HWY_DYNAMIC_DISPATCH(LanesImpl)()) *
         static_cast<double>(iterations);
}
const char* LimitsTargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace bench
}  // namespace kvspec
#endif  // HWY_ONCE

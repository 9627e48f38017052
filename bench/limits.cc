// Peak single-core FP32 multiply-add rate, a multi-stream read probe and
// the conv step's traffic, per Highway target: the limits the benchmarks
// are reported against (bench/limits.h).
#include "kvspec/bench/limits.h"

#include <algorithm>

#include "kvspec/kernels/conv1d.h"  // kConvBlock

// foreach_target.h includes this file once per target: declared once.
#ifndef KVSPEC_BENCH_LIMITS_CONSTANTS
#define KVSPEC_BENCH_LIMITS_CONSTANTS
namespace kvspec {
namespace bench {
// ReadStreams: bytes of each stream per round, prefetch distance.
constexpr size_t kRound = 256;
constexpr size_t kAhead = 2048;
}  // namespace bench
}  // namespace kvspec
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kvspec/bench/limits.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kvspec/kernels/attention-inl.h"  // LoadLanes, PrefetchSpan: the kernel's own

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

// Reads `streams` parts of `bytes / streams` bytes each side by side, 256
// bytes of every part per round, prefetching kAhead bytes further on in
// each (into L1, or non-temporally with kNonTemporal): every byte is loaded
// into a vector register and added into one of four accumulators, so the
// loads are independent of one another.
template <bool kNonTemporal>
uint64_t ReadStreamsT(const uint8_t* data, size_t bytes, size_t streams) {
  const hn::ScalableTag<uint32_t> d;
  const size_t step = hn::Lanes(d) * sizeof(uint32_t);
  const size_t part = bytes / streams / kRound * kRound;
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  for (size_t offset = 0; offset < part; offset += kRound) {
    for (size_t s = 0; s < streams; ++s) {
      const uint8_t* p = data + s * part + offset;
      kvspec::HWY_NAMESPACE::PrefetchLines<kNonTemporal ? 0 : 3>(p + kAhead, kRound);
      for (size_t b = 0; b < kRound; b += 4 * step) {
        a0 = hn::Add(a0, hn::LoadU(d, reinterpret_cast<const uint32_t*>(p + b)));
        a1 = hn::Add(a1, hn::LoadU(d, reinterpret_cast<const uint32_t*>(p + b + step)));
        a2 = hn::Add(a2, hn::LoadU(d, reinterpret_cast<const uint32_t*>(p + b + 2 * step)));
        a3 = hn::Add(a3, hn::LoadU(d, reinterpret_cast<const uint32_t*>(p + b + 3 * step)));
      }
    }
  }
  const auto sum = hn::Add(hn::Add(a0, a1), hn::Add(a2, a3));
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

uint64_t ReadStreamsImpl(const uint8_t* data, size_t bytes, size_t streams, bool non_temporal) {
  return non_temporal ? ReadStreamsT<true>(data, bytes, streams)
                      : ReadStreamsT<false>(data, bytes, streams);
}

void ScaleInPlaceImpl(float* HWY_RESTRICT data, size_t n, float scale) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto s = hn::Set(d, scale);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    const auto v0 = hn::LoadU(d, data + i);
    const auto v1 = hn::LoadU(d, data + i + N);
    const auto v2 = hn::LoadU(d, data + i + 2 * N);
    const auto v3 = hn::LoadU(d, data + i + 3 * N);
    hn::StoreU(hn::Mul(v0, s), d, data + i);
    hn::StoreU(hn::Mul(v1, s), d, data + i + N);
    hn::StoreU(hn::Mul(v2, s), d, data + i + 2 * N);
    hn::StoreU(hn::Mul(v3, s), d, data + i + 3 * N);
  }
  for (; i < n; ++i) data[i] *= scale;
}

// ConvStep's loads, stores and multiply-adds without its SiLU (see
// ConvTraffic in limits.h): per vector of a block, the K - 1 state rows
// loaded and moved up a row, x loaded and stored as the newest row, K
// multiply-adds, the sum stored to u.
void ConvTrafficImpl(const float* HWY_RESTRICT w, float* HWY_RESTRICT state,
                     const float* HWY_RESTRICT x, float* HWY_RESTRICT u, size_t channels,
                     size_t kernel) {
  const hn::CappedTag<float, kConvBlock> d;
  const size_t N = hn::Lanes(d);
  constexpr size_t B = kConvBlock;
  const size_t K = kernel;
  for (size_t c = 0; c + B <= channels; c += B) {
    const float* wb = w + c * K;
    float* s = state + c * (K - 1);
    for (size_t i = 0; i < B; i += N) {
      auto acc = hn::Zero(d);
      for (size_t j = 0; j + 1 < K; ++j) {
        const auto v = hn::LoadU(d, s + j * B + i);
        acc = hn::MulAdd(hn::LoadU(d, wb + j * B + i), v, acc);
        if (j > 0) hn::StoreU(v, d, s + (j - 1) * B + i);
      }
      const auto xv = hn::LoadU(d, x + c + i);
      acc = hn::MulAdd(hn::LoadU(d, wb + (K - 1) * B + i), xv, acc);
      if (K > 1) hn::StoreU(xv, d, s + (K - 2) * B + i);
      hn::StoreU(acc, d, u + c + i);
    }
  }
}

// acc[g][s] += q_g[i..] * rows[s][i..] for every vector i of dim, four
// query heads and four rows: the decode's multiply-adds of four rows.
template <typename T, class D, class V>
HWY_INLINE void MultiplyRows(D d, const T* const* rows, size_t dim, const float* HWY_RESTRICT q,
                             V (&acc)[4][4]) {
  namespace kernel = kvspec::HWY_NAMESPACE;
  const size_t N = hn::Lanes(d);
  for (size_t i = 0; i + N <= dim; i += N) {
    const V k0 = kernel::LoadLanes(d, rows[0] + i), k1 = kernel::LoadLanes(d, rows[1] + i);
    const V k2 = kernel::LoadLanes(d, rows[2] + i), k3 = kernel::LoadLanes(d, rows[3] + i);
    HWY_UNROLL(4)
    for (size_t g = 0; g < 4; ++g) {
      const V qv = hn::LoadU(d, q + g * dim + i);
      acc[g][0] = hn::MulAdd(qv, k0, acc[g][0]);
      acc[g][1] = hn::MulAdd(qv, k1, acc[g][1]);
      acc[g][2] = hn::MulAdd(qv, k2, acc[g][2]);
      acc[g][3] = hn::MulAdd(qv, k3, acc[g][3]);
    }
  }
}

// The decode's loads and multiply-adds alone (see DecodeTraffic in
// limits.h), with the kernel's loads and requests (AttentionRequestsOn):
// rows in blocks of 8 KiB, the next block's rows requested one per row as
// requests.along says (and each block's rows into L1 as it starts where
// requests.block_start_l1), four rows at a time each loaded vector by
// vector and fed to four query heads' multiply-adds (16 accumulators, no
// lane sums). With in_segments (DecodeTrafficInSegments), the rows in four
// segments side by side instead: each group of four rows takes one row from
// each segment, and each segment requests its own rows as far ahead as
// Attend's keys in segments (SegmentsAheadBytes) as requests.segments says.
template <typename T>
float DecodeTrafficT(const T* HWY_RESTRICT head, size_t slots, size_t dim,
                     const float* HWY_RESTRICT q, const AttentionRequests& requests,
                     bool in_segments) {
  namespace kernel = kvspec::HWY_NAMESPACE;
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t row_bytes = dim * sizeof(T);
  V acc[4][4];
  for (auto& a : acc) {
    for (auto& x : a) x = hn::Zero(d);
  }
  if (in_segments) {
    const size_t seg = slots / 4;
    const size_t ahead = std::max<size_t>(
        1, kernel::SegmentsAheadBytes(requests, row_bytes) / row_bytes);
    for (size_t j = 0; j < seg; ++j) {
      const T* rows[4];
      for (size_t s = 0; s < 4; ++s) {
        const T* row = head + (s * seg + j) * dim;
        if (j + ahead < seg) kernel::PrefetchSpan(row + ahead * dim, row_bytes, requests.segments);
        rows[s] = row;
      }
      MultiplyRows(d, rows, dim, q, acc);
    }
  } else {
    const size_t block = std::max<size_t>(8, 8192 / row_bytes);
    for (size_t t0 = 0; t0 < slots; t0 += block) {
      const size_t t1 = std::min(slots, t0 + block);
      if (requests.block_start_l1) {
        kernel::PrefetchSpan(head + t0 * dim, (t1 - t0) * row_bytes, RowRequest::kL1);
      }
      for (size_t t = t0; t + 4 <= t1; t += 4) {
        for (size_t s = 0; s < 4 && t + s + block < slots; ++s) {
          kernel::PrefetchSpan(head + (t + s + block) * dim, row_bytes, requests.along);
        }
        const T* rows[4] = {head + t * dim, head + (t + 1) * dim, head + (t + 2) * dim,
                            head + (t + 3) * dim};
        MultiplyRows(d, rows, dim, q, acc);
      }
    }
  }
  V sum = hn::Zero(d);
  for (auto& a : acc) {
    for (auto& x : a) sum = hn::Add(sum, x);
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

float DecodeTrafficImpl(const void* head, bool bf16, size_t slots, size_t dim, const float* q,
                        bool in_segments) {
  const AttentionRequests requests = AttentionRequestsOn(bf16);
  return bf16 ? DecodeTrafficT(static_cast<const uint16_t*>(head), slots, dim, q, requests,
                               in_segments)
              : DecodeTrafficT(static_cast<const float*>(head), slots, dim, q, requests,
                               in_segments);
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

HWY_EXPORT(ConvTrafficImpl);
HWY_EXPORT(DecodeTrafficImpl);
HWY_EXPORT(FmaLoopImpl);
HWY_EXPORT(LanesImpl);
HWY_EXPORT(ReadStreamsImpl);
HWY_EXPORT(ScaleInPlaceImpl);
HWY_EXPORT(TargetNameImpl);

double FmaLoop(size_t iterations, float seed) {
  return HWY_DYNAMIC_DISPATCH(FmaLoopImpl)(iterations, seed);
}
double FmaLoopFlops(size_t iterations) {
  return 12.0 * 2.0 * static_cast<double>(HWY_DYNAMIC_DISPATCH(LanesImpl)()) *
         static_cast<double>(iterations);
}
uint64_t ReadStreams(const void* data, size_t bytes, size_t streams, bool non_temporal) {
  return HWY_DYNAMIC_DISPATCH(ReadStreamsImpl)(static_cast<const uint8_t*>(data), bytes, streams,
                                               non_temporal);
}
size_t ReadStreamsBytes(size_t bytes, size_t streams) {
  return bytes / streams / kRound * kRound * streams;
}
void ScaleInPlace(float* data, size_t n, float scale) {
  HWY_DYNAMIC_DISPATCH(ScaleInPlaceImpl)(data, n, scale);
}
void ConvTraffic(const float* w, float* state, const float* x, float* u, size_t channels,
                 size_t kernel) {
  HWY_DYNAMIC_DISPATCH(ConvTrafficImpl)(w, state, x, u, channels, kernel);
}
float DecodeTraffic(const void* head, bool bf16, size_t slots, size_t dim, const float* q) {
  return HWY_DYNAMIC_DISPATCH(DecodeTrafficImpl)(head, bf16, slots, dim, q, false);
}
float DecodeTrafficInSegments(const void* head, bool bf16, size_t slots, size_t dim,
                              const float* q) {
  return HWY_DYNAMIC_DISPATCH(DecodeTrafficImpl)(head, bf16, slots, dim, q, true);
}
const char* LimitsTargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace bench
}  // namespace kvspec
#endif  // HWY_ONCE

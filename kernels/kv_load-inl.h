// Loading stored keys and values as fp32 vectors, per Highway target, for
// the attention kernel (kernels/attention-inl.h): fp32, bf16 (widened
// exactly), and q8_0 and q4_0 blocks (kernels/kv_blocks.h) dequantized in
// registers, never into a copy of the cache.
//
// Included once per target (foreach_target), hence the toggle guard instead
// of #pragma once.
#include <cstddef>
#include <cstdint>

#include "kvspec/kernels/kv_blocks.h"
#include "kvspec/kernels/kv_view.h"  // Bf16ToFloat

#if defined(KVSPEC_KERNELS_KV_LOAD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVSPEC_KERNELS_KV_LOAD_INL_H_
#undef KVSPEC_KERNELS_KV_LOAD_INL_H_
#else
#define KVSPEC_KERNELS_KV_LOAD_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvspec {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// N lanes of stored keys or values as fp32: fp32 storage, or bf16 storage
// (the upper half of an fp32) widened exactly.
HWY_INLINE VF LoadLanes(DF d, const float* HWY_RESTRICT p) { return hn::LoadU(d, p); }
HWY_INLINE VF LoadLanes(DF d, const uint16_t* HWY_RESTRICT p) {
  const hn::Rebind<uint16_t, DF> d16;
  const hn::RebindToUnsigned<DF> d32;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(d32, hn::LoadU(d16, p))));
}
HWY_INLINE float Element(const float* p, int i) { return p[i]; }
HWY_INLINE float Element(const uint16_t* p, int i) { return Bf16ToFloat(p[i]); }
HWY_INLINE float Element(const BlockQ8_0* p, int i) { return BlockValue(p, i); }
HWY_INLINE float Element(const BlockQ4_0* p, int i) { return BlockValue(p, i); }

// Rows of stored keys or values are addressed in units of T: a value of
// fp32 or bf16, a block of 32 values of q8_0 or q4_0 (kValuesPerUnit).
template <typename T>
HWY_INLINE size_t RowUnits(size_t dim) {
  return dim / kValuesPerUnit<T>;
}
template <typename T>
HWY_INLINE size_t RowBytes(size_t dim) {
  return RowUnits<T>(dim) * sizeof(T);
}
// Where lane i of a row starts (for requests: within its block for q8_0 and
// q4_0), and about how many bytes n lanes take.
template <typename T>
HWY_INLINE const void* LaneAddress(const T* row, size_t i) {
  return reinterpret_cast<const char*>(row) + i * sizeof(T) / kValuesPerUnit<T>;
}
template <typename T>
HWY_INLINE size_t LaneBytes(size_t n) {
  return (n * sizeof(T) + kValuesPerUnit<T> - 1) / kValuesPerUnit<T>;
}

// Blocks of q8_0 and q4_0, dequantized in registers: N lanes of a row from
// lane i (i a multiple of N: N divides 32, so the lanes lie in one block,
// and in one half of a q4_0 block), given their block's scale (BlockScale).
// q * d is exact in fp32, so these are the values AttendReference reads.
// For fp32 and bf16 the scale is unused (and its computation elided).
// fp16 -> fp32, exact: F16C's conversion where the target has it (two
// instructions, no branch), else F16ToFloat.
HWY_INLINE float HalfToFloat(uint16_t h) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
#else
  return F16ToFloat(h);
#endif
}
template <typename T>
HWY_INLINE float BlockScale(const T* /*row*/, size_t /*i*/) {
  return 1.0f;
}
HWY_INLINE float BlockScale(const BlockQ8_0* row, size_t i) {
  return HalfToFloat(row[i / kKvBlockValues].d);
}
HWY_INLINE float BlockScale(const BlockQ4_0* row, size_t i) {
  return HalfToFloat(row[i / kKvBlockValues].d);
}
template <typename T>
HWY_INLINE VF LoadScaled(DF d, const T* HWY_RESTRICT row, size_t i, float /*scale*/) {
  return LoadLanes(d, row + i);
}
HWY_INLINE VF LoadScaled(DF d, const BlockQ8_0* HWY_RESTRICT row, size_t i, float scale) {
  const hn::Rebind<int8_t, DF> d8;
  const hn::RebindToSigned<DF> di;
  const int8_t* q = row[i / kKvBlockValues].qs + i % kKvBlockValues;
  return hn::Mul(hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, q))), hn::Set(d, scale));
}
HWY_INLINE VF LoadScaled(DF d, const BlockQ4_0* HWY_RESTRICT row, size_t i, float scale) {
  const hn::Rebind<uint8_t, DF> d8;
  const hn::RebindToSigned<DF> di;
  const size_t j = i % kKvBlockValues;
  const auto bytes = hn::BitCast(
      di, hn::PromoteTo(hn::RebindToUnsigned<DF>(), hn::LoadU(d8, row[i / kKvBlockValues].qs + j % 16)));
  const auto nibbles = j < 16 ? hn::And(bytes, hn::Set(di, 0x0F)) : hn::ShiftRight<4>(bytes);
  // nibble * d - 8 * d: both products and their difference, (nibble - 8) *
  // d, are exact in fp32 (finite d), so one multiply-add gives those bits.
  return hn::MulAdd(hn::ConvertTo(d, nibbles), hn::Set(d, scale), hn::Set(d, -8.0f * scale));
}
// N lanes of a row from lane i, whatever T.
template <typename T>
HWY_INLINE VF LoadAt(DF d, const T* HWY_RESTRICT row, size_t i) {
  return LoadScaled(d, row, i, BlockScale(row, i));
}

}  // namespace HWY_NAMESPACE
}  // namespace kvspec
HWY_AFTER_NAMESPACE();

#endif  // KVSPEC_KERNELS_KV_LOAD_INL_H_ toggle

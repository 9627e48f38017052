// ggml's block formats q8_0 and q4_0, bit for bit: blocks of 32 values along
// a head's dim, each with an fp16 scale d.
// - q8_0 (34 bytes): d, then 32 int8 q; value j = q[j] * d.
// - q4_0 (18 bytes): d, then 16 bytes of nibbles: value j (j < 16) in the
//   low nibble of byte j, value j + 16 in its high nibble; value = (nibble
//   - 8) * d.
// Dequantization is exact in fp32 (an fp16 times an integer of at most 8
// bits), so a kernel over blocks equals the fp32 kernel over their values.
// The quantizers are in kernels/quantize.h. Plain types only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvspec/base/kv_type.h"

namespace kvspec {

struct BlockQ8_0 {
  uint16_t d;     // fp16 scale
  int8_t qs[32];  // value j = qs[j] * d
};
struct BlockQ4_0 {
  uint16_t d;      // fp16 scale
  uint8_t qs[16];  // value j: low nibble of qs[j] (j < 16), high of qs[j - 16]; minus 8, times d
};
static_assert(sizeof(BlockQ8_0) == kQ8_0BlockBytes, "q8_0 is 34 bytes per 32 values");
static_assert(sizeof(BlockQ4_0) == kQ4_0BlockBytes, "q4_0 is 18 bytes per 32 values");

// Values one stored unit holds: 1 for fp32 and bf16, a block's 32 for q8_0
// and q4_0 (the kernels address rows in units).
template <typename T>
inline constexpr int kValuesPerUnit = 1;
template <>
inline constexpr int kValuesPerUnit<BlockQ8_0> = kKvBlockValues;
template <>
inline constexpr int kValuesPerUnit<BlockQ4_0> = kKvBlockValues;

// IEEE binary16 -> fp32, exact: the 15 low bits moved into an fp32's
// exponent and mantissa fields and scaled by 2^112 (the exponent biases'
// difference; subnormals come out right too); infinities and NaNs get the
// all-ones exponent.
inline float F16ToFloat(uint16_t h) {
  const uint32_t magnitude = static_cast<uint32_t>(h & 0x7FFFu) << 13;
  float f;
  if ((h & 0x7C00u) == 0x7C00u) {
    const uint32_t bits = magnitude | 0x7F800000u;
    std::memcpy(&f, &bits, sizeof(f));
  } else {
    std::memcpy(&f, &magnitude, sizeof(f));
    f *= 0x1p112f;
  }
  return (h & 0x8000u) ? -f : f;
}

// fp32 -> IEEE binary16, rounded to nearest even (ggml's GGML_FP32_TO_FP16):
// too large for fp16 gives infinity, a NaN the quiet NaN 0x7E00, both signed.
inline uint16_t FloatToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00u;          // NaN
  if (abs >= 0x47800000u) return sign | 0x7C00u;         // >= 2^16 (and inf): inf
  const int exp = static_cast<int>(abs >> 23) - 127;      // unbiased
  uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;          // 24 bits with the hidden one
  int shift;                                              // fp32 mantissa bits dropped
  uint32_t e16;                                           // fp16 biased exponent before rounding
  if (exp >= -14) {                                       // a normal fp16
    shift = 13;
    e16 = static_cast<uint32_t>(exp + 15);
  } else {                                                // subnormal (or zero)
    if (abs < 0x33000000u) return sign;                   // below half the least subnormal: 0
    shift = 13 + (-14 - exp);
    e16 = 0;
  }
  const uint32_t kept = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  uint32_t m = kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
  // For a normal, kept has the hidden bit at 1 << 10: (e16 << 10) + (m -
  // 1024) carries a rounded-up mantissa into the exponent (to inf at the
  // top). For a subnormal, m (at most 1024) is the whole field.
  const uint32_t out = e16 == 0 ? m : (e16 << 10) + (m - 1024u);
  return static_cast<uint16_t>(sign | out);
}

// One stored value: value i of a row of blocks.
inline float BlockValue(const BlockQ8_0* row, int i) {
  const BlockQ8_0& b = row[i / kKvBlockValues];
  return static_cast<float>(b.qs[i % kKvBlockValues]) * F16ToFloat(b.d);
}
inline float BlockValue(const BlockQ4_0* row, int i) {
  const BlockQ4_0& b = row[i / kKvBlockValues];
  const int j = i % kKvBlockValues;
  const int nibble = j < 16 ? (b.qs[j] & 0x0F) : (b.qs[j - 16] >> 4);
  return static_cast<float>(nibble - 8) * F16ToFloat(b.d);
}

}  // namespace kvspec

// Quantizers of keys and values into ggml's q8_0 and q4_0 blocks
// (kernels/kv_blocks.h), bit for bit those of ggml's ggml-quants.c
// (quantize_row_q8_0_ref, quantize_row_q4_0_ref) for finite inputs:
// - q8_0: d = amax / 127 (amax the largest |x|), id = d ? 1 / d : 0; the
//   block stores fp16(d) (round to nearest even) and q_j = round(x_j * id),
//   halves away from zero;
// - q4_0: m = the x of the largest |x| (the first one), d = m / -8, id = d ?
//   1 / d : 0; the block stores fp16(d) and nibble_j = min(15, trunc(x_j *
//   id + 8.5)).
// id comes from the fp32 d, before it is rounded to fp16, as ggml does.
// A block holding a value that is not finite (ggml leaves it undefined; a
// pad column's contents are NaN) is stored as the fp16 NaN scale
// kNonFiniteBlockScale and zero quants: all its values read back as NaN.
// A token's stored row depends on that row alone (blocks of 32 values).
//
// The Quantize* functions are the Highway versions, dispatched per call;
// the *Reference ones the plain scalar definitions. Both give the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvspec/base/status.h"
#include "kvspec/kernels/kv_blocks.h"

namespace kvspec {

// The scale of a block stored from non-finite values: the fp16 quiet NaN.
inline constexpr uint16_t kNonFiniteBlockScale = 0x7E00;

// x [n] -> y [n / 32]; n a multiple of 32 (checked by StoreKvRow).
void QuantizeQ8_0(const float* x, size_t n, BlockQ8_0* y);
void QuantizeQ4_0(const float* x, size_t n, BlockQ4_0* y);
void QuantizeQ8_0Reference(const float* x, size_t n, BlockQ8_0* y);
void QuantizeQ4_0Reference(const float* x, size_t n, BlockQ4_0* y);

// The Highway target QuantizeQ8_0 and QuantizeQ4_0 dispatch to now.
const char* QuantizeTargetName();

// One head row of `dim` values written as `type` at out (KvRowBytes(type,
// dim) bytes): fp32 copied, bf16 rounded to nearest even, q8_0 and q4_0
// quantized. A dim that is not a positive multiple of 32 is refused for
// q8_0 and q4_0 (CheckKvType), and nothing is written.
Status StoreKvRow(KvType type, const float* x, int dim, void* out);

// The values a stored row reads back as: out [dim] (exact).
void LoadKvRow(KvType type, const void* row, int dim, float* out);

}  // namespace kvspec

// What the attention kernel reads: one layer's stored keys and values in
// physical slot order (KvView), and the bf16 <-> fp32 conversions of its
// bf16 storage option. Plain types only; no cache code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvspec/kernels/kv_blocks.h"

namespace kvspec {

// bfloat16 <-> fp32. Bf16ToFloat is exact; FloatToBf16 rounds to nearest
// even (NaN stays NaN).
inline float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// Read access to one attention layer's stored keys and values, in physical
// slot order, for the kernels and for inspection. Any alignment is read
// correctly; arrays starting on a 64-byte line (as the caches' own storage
// does, kernels/aligned_vector.h) keep each row of 16 floats or a multiple
// on whole lines, so no vector load straddles two.
struct KvView {
  const float* k = nullptr;  // [rows][kv_heads][capacity][dim]
  const float* v = nullptr;  // [rows][kv_heads][capacity][dim]
  // bfloat16 storage (the upper 16 bits of an fp32), same shape and strides:
  // when k_bf16 is set the kernels read k_bf16 and v_bf16 instead of k and v.
  // The caches of this library store fp32; a view over bf16 arrays lets an
  // engine (and the benchmarks) run the same kernels over half the bytes.
  const uint16_t* k_bf16 = nullptr;
  const uint16_t* v_bf16 = nullptr;
  // q8_0 or q4_0 blocks (kernels/kv_blocks.h), at most one pair set; then
  // the kernels read them instead: [rows][kv_heads][capacity][dim / 32]
  // blocks, with the strides below still counted in values (dim a multiple
  // of 32: CheckKvType).
  const BlockQ8_0* k_q8_0 = nullptr;
  const BlockQ8_0* v_q8_0 = nullptr;
  const BlockQ4_0* k_q4_0 = nullptr;
  const BlockQ4_0* v_q4_0 = nullptr;
  size_t head_stride = 0;    // capacity * dim
  size_t row_stride = 0;     // kv_heads * capacity * dim
  int rows = 0;
  int kv_heads = 0;
  int dim = 0;
  const int32_t* slot_pos = nullptr;  // [rows][slot_stride]; -1: no token
  size_t slot_stride = 0;
  int32_t slots = 0;  // physical slots per row
  int32_t first_slot = 0;  // slot of the oldest held column: logical order
                           // is first_slot .. slots-1, then 0 .. first_slot-1

  // A view of fp32 buffers laid out densely: k, v [rows][kv_heads][slots][dim],
  // slot_pos [rows][slots].
  static KvView Dense(const float* k, const float* v, const int32_t* slot_pos, int rows,
                      int kv_heads, int dim, int32_t slots, int32_t first_slot) {
    KvView view;
    view.k = k;
    view.v = v;
    view.head_stride = static_cast<size_t>(slots) * static_cast<size_t>(dim);
    view.row_stride = view.head_stride * static_cast<size_t>(kv_heads);
    view.rows = rows;
    view.kv_heads = kv_heads;
    view.dim = dim;
    view.slot_pos = slot_pos;
    view.slot_stride = static_cast<size_t>(slots);
    view.slots = slots;
    view.first_slot = first_slot;
    return view;
  }

  // A dense view over stored rows of `type` (KvRowBytes(type, dim) bytes
  // each): k, v [rows][kv_heads][slots] rows, slot_pos [rows][slots].
  static KvView DenseBytes(KvType type, const uint8_t* k, const uint8_t* v,
                           const int32_t* slot_pos, int rows, int kv_heads, int dim,
                           int32_t slots, int32_t first_slot) {
    KvView view = Dense(nullptr, nullptr, slot_pos, rows, kv_heads, dim, slots, first_slot);
    switch (type) {
      case KvType::kF32:
        view.k = reinterpret_cast<const float*>(k);
        view.v = reinterpret_cast<const float*>(v);
        break;
      case KvType::kBf16:
        view.k_bf16 = reinterpret_cast<const uint16_t*>(k);
        view.v_bf16 = reinterpret_cast<const uint16_t*>(v);
        break;
      case KvType::kQ8_0:
        view.k_q8_0 = reinterpret_cast<const BlockQ8_0*>(k);
        view.v_q8_0 = reinterpret_cast<const BlockQ8_0*>(v);
        break;
      case KvType::kQ4_0:
        view.k_q4_0 = reinterpret_cast<const BlockQ4_0*>(k);
        view.v_q4_0 = reinterpret_cast<const BlockQ4_0*>(v);
        break;
    }
    return view;
  }

  // Bytes of one stored head row, and a key's or value's stored bytes,
  // whatever the type (for comparing and hashing what is stored).
  size_t RowBytes() const { return KvRowBytes(type(), dim); }
  const uint8_t* KeyBytes(int row, int head, int32_t slot) const {
    return StoredBase(true) + Offset(row, head, slot) / ValuesPerUnit() * UnitBytes();
  }
  const uint8_t* ValueBytes(int row, int head, int32_t slot) const {
    return StoredBase(false) + Offset(row, head, slot) / ValuesPerUnit() * UnitBytes();
  }

  const float* Key(int row, int head, int32_t slot) const {
    return k + row * row_stride + head * head_stride + static_cast<size_t>(slot) * dim;
  }
  const float* Value(int row, int head, int32_t slot) const {
    return v + row * row_stride + head * head_stride + static_cast<size_t>(slot) * dim;
  }
  bool bf16() const { return k_bf16 != nullptr; }
  // The storage type the kernels read.
  KvType type() const {
    if (k_q8_0 != nullptr) return KvType::kQ8_0;
    if (k_q4_0 != nullptr) return KvType::kQ4_0;
    return bf16() ? KvType::kBf16 : KvType::kF32;
  }
  // The first block of a stored row of q8_0 or q4_0.
  size_t BlockOffset(int row, int head, int32_t slot) const {
    return (row * row_stride + head * head_stride + static_cast<size_t>(slot) * dim) /
           kKvBlockValues;
  }
  const BlockQ8_0* KeyQ8_0(int row, int head, int32_t slot) const {
    return k_q8_0 + BlockOffset(row, head, slot);
  }
  const BlockQ8_0* ValueQ8_0(int row, int head, int32_t slot) const {
    return v_q8_0 + BlockOffset(row, head, slot);
  }
  const BlockQ4_0* KeyQ4_0(int row, int head, int32_t slot) const {
    return k_q4_0 + BlockOffset(row, head, slot);
  }
  const BlockQ4_0* ValueQ4_0(int row, int head, int32_t slot) const {
    return v_q4_0 + BlockOffset(row, head, slot);
  }
  // Stored value i of a key or value row, as fp32 (exact), whatever the type.
  float KeyAt(int row, int head, int32_t slot, int i) const {
    switch (type()) {
      case KvType::kQ8_0:
        return BlockValue(KeyQ8_0(row, head, slot), i);
      case KvType::kQ4_0:
        return BlockValue(KeyQ4_0(row, head, slot), i);
      case KvType::kBf16:
        return Bf16ToFloat(KeyBf16(row, head, slot)[i]);
      case KvType::kF32:
        break;
    }
    return Key(row, head, slot)[i];
  }
  float ValueAt(int row, int head, int32_t slot, int i) const {
    switch (type()) {
      case KvType::kQ8_0:
        return BlockValue(ValueQ8_0(row, head, slot), i);
      case KvType::kQ4_0:
        return BlockValue(ValueQ4_0(row, head, slot), i);
      case KvType::kBf16:
        return Bf16ToFloat(ValueBf16(row, head, slot)[i]);
      case KvType::kF32:
        break;
    }
    return Value(row, head, slot)[i];
  }
  // Value offset of a stored row, and the type's addressing unit.
  size_t Offset(int row, int head, int32_t slot) const {
    return row * row_stride + head * head_stride + static_cast<size_t>(slot) * dim;
  }
  int ValuesPerUnit() const { return IsBlockType(type()) ? kKvBlockValues : 1; }
  size_t UnitBytes() const {
    switch (type()) {
      case KvType::kF32:
        return 4;
      case KvType::kBf16:
        return 2;
      case KvType::kQ8_0:
        return kQ8_0BlockBytes;
      case KvType::kQ4_0:
        return kQ4_0BlockBytes;
    }
    return 0;
  }
  const uint8_t* StoredBase(bool key) const {
    switch (type()) {
      case KvType::kF32:
        return reinterpret_cast<const uint8_t*>(key ? k : v);
      case KvType::kBf16:
        return reinterpret_cast<const uint8_t*>(key ? k_bf16 : v_bf16);
      case KvType::kQ8_0:
        return reinterpret_cast<const uint8_t*>(key ? k_q8_0 : v_q8_0);
      case KvType::kQ4_0:
        return reinterpret_cast<const uint8_t*>(key ? k_q4_0 : v_q4_0);
    }
    return nullptr;
  }
  const uint16_t* KeyBf16(int row, int head, int32_t slot) const {
    return k_bf16 + row * row_stride + head * head_stride + static_cast<size_t>(slot) * dim;
  }
  const uint16_t* ValueBf16(int row, int head, int32_t slot) const {
    return v_bf16 + row * row_stride + head * head_stride + static_cast<size_t>(slot) * dim;
  }
};

}  // namespace kvspec

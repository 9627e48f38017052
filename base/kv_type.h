// The storage types of an attention layer's keys and values: fp32 (the
// default), bf16, and ggml's block formats q8_0 and q4_0 (32 values per
// block with an fp16 scale; kernels/kv_blocks.h has the blocks). The names
// are the `kv=` values of a trace's `layer` line; parsing fails closed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kvspec/base/status.h"

namespace kvspec {

enum class KvType : uint8_t { kF32, kBf16, kQ8_0, kQ4_0 };

// Values per block of q8_0 and q4_0, and the bytes of one block.
inline constexpr int kKvBlockValues = 32;
inline constexpr size_t kQ8_0BlockBytes = 34;  // fp16 scale, 32 int8
inline constexpr size_t kQ4_0BlockBytes = 18;  // fp16 scale, 16 bytes of nibbles

// "f32", "bf16", "q8_0", "q4_0".
constexpr const char* KvTypeName(KvType type) {
  switch (type) {
    case KvType::kF32:
      return "f32";
    case KvType::kBf16:
      return "bf16";
    case KvType::kQ8_0:
      return "q8_0";
    case KvType::kQ4_0:
      return "q4_0";
  }
  return "?";
}

// The type named `name` (exactly one of the four names), or false.
inline bool ParseKvType(std::string_view name, KvType* type) {
  for (KvType t : {KvType::kF32, KvType::kBf16, KvType::kQ8_0, KvType::kQ4_0}) {
    if (name == KvTypeName(t)) {
      *type = t;
      return true;
    }
  }
  return false;
}

constexpr bool IsBlockType(KvType type) {
  return type == KvType::kQ8_0 || type == KvType::kQ4_0;
}

// Whether a head of `dim` values can be stored as `type`: q8_0 and q4_0
// need a positive multiple of 32.
inline Status CheckKvType(KvType type, int dim) {
  if (IsBlockType(type) && (dim <= 0 || dim % kKvBlockValues != 0)) {
    return Status::Error(std::string("storage type ") + KvTypeName(type) + " needs a dim that is a " +
                         "positive multiple of 32, not " + std::to_string(dim));
  }
  return Status::Ok();
}

// Bytes of one stored head row of `dim` values (dim a multiple of 32 for
// the block types).
constexpr size_t KvRowBytes(KvType type, int dim) {
  const size_t n = static_cast<size_t>(dim);
  switch (type) {
    case KvType::kF32:
      return n * 4;
    case KvType::kBf16:
      return n * 2;
    case KvType::kQ8_0:
      return n / kKvBlockValues * kQ8_0BlockBytes;
    case KvType::kQ4_0:
      return n / kKvBlockValues * kQ4_0BlockBytes;
  }
  return 0;
}

}  // namespace kvspec

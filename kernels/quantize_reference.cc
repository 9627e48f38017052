// The scalar definitions of the q8_0 and q4_0 quantizers (kernels/quantize.h),
// written from the block formats, and the row store and load of every
// storage type.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvspec/kernels/kv_view.h"  // FloatToBf16, Bf16ToFloat
#include "kvspec/kernels/quantize.h"

namespace kvspec {

namespace {

// Whether a block holds only finite values; else it is stored as a NaN
// scale and zero quants (kernels/quantize.h).
template <class Block>
bool StoredAsFinite(const float* xb, Block* y) {
  for (int j = 0; j < kKvBlockValues; ++j) {
    if (!std::isfinite(xb[j])) {
      y->d = kNonFiniteBlockScale;
      std::memset(y->qs, 0, sizeof(y->qs));
      return false;
    }
  }
  return true;
}

}  // namespace

void QuantizeQ8_0Reference(const float* x, size_t n, BlockQ8_0* y) {
  for (size_t b = 0; b < n / kKvBlockValues; ++b) {
    const float* xb = x + b * kKvBlockValues;
    if (!StoredAsFinite(xb, &y[b])) continue;
    float amax = 0.0f;
    for (int j = 0; j < kKvBlockValues; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = FloatToF16(d);
    for (int j = 0; j < kKvBlockValues; ++j) {
      y[b].qs[j] = static_cast<int8_t>(std::round(xb[j] * id));
    }
  }
}

void QuantizeQ4_0Reference(const float* x, size_t n, BlockQ4_0* y) {
  for (size_t b = 0; b < n / kKvBlockValues; ++b) {
    const float* xb = x + b * kKvBlockValues;
    if (!StoredAsFinite(xb, &y[b])) continue;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kKvBlockValues; ++j) {
      if (amax < std::fabs(xb[j])) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = FloatToF16(d);
    for (int j = 0; j < 16; ++j) {
      const int lo = std::min(15, static_cast<int>(xb[j] * id + 8.5f));
      const int hi = std::min(15, static_cast<int>(xb[j + 16] * id + 8.5f));
      y[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

Status StoreKvRow(KvType type, const float* x, int dim, void* out) {
  KVSPEC_RETURN_IF_ERROR(CheckKvType(type, dim));
  const size_t n = dim > 0 ? static_cast<size_t>(dim) : 0;
  switch (type) {
    case KvType::kF32:
      if (n > 0) std::memcpy(out, x, n * sizeof(float));
      break;
    case KvType::kBf16: {
      uint16_t* o = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < n; ++i) o[i] = FloatToBf16(x[i]);
      break;
    }
    case KvType::kQ8_0:
      QuantizeQ8_0(x, n, static_cast<BlockQ8_0*>(out));
      break;
    case KvType::kQ4_0:
      QuantizeQ4_0(x, n, static_cast<BlockQ4_0*>(out));
      break;
  }
  return Status::Ok();
}

void LoadKvRow(KvType type, const void* row, int dim, float* out) {
  for (int i = 0; i < dim; ++i) {
    switch (type) {
      case KvType::kF32:
        out[i] = static_cast<const float*>(row)[i];
        break;
      case KvType::kBf16:
        out[i] = Bf16ToFloat(static_cast<const uint16_t*>(row)[i]);
        break;
      case KvType::kQ8_0:
        out[i] = BlockValue(static_cast<const BlockQ8_0*>(row), i);
        break;
      case KvType::kQ4_0:
        out[i] = BlockValue(static_cast<const BlockQ4_0*>(row), i);
        break;
    }
  }
}

}  // namespace kvspec

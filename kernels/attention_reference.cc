// AttendReference: the plain scalar definition of attention (see
// attention.h), the oracle the Highway kernel is tested against.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvspec/kernels/attention.h"

namespace kvspec {
namespace {

float StoredKey(const KvView& kv, int r, int h, int32_t s, int i) {
  return kv.KeyAt(r, h, s, i);
}
float StoredValue(const KvView& kv, int r, int h, int32_t s, int i) {
  return kv.ValueAt(r, h, s, i);
}

}  // namespace

void AttendReference(const float* q, int q_heads, const KvView& kv,
                     const Mask& mask, float* out) {
  const int dim = kv.dim;
  const int group = q_heads / kv.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  std::vector<float> score(static_cast<size_t>(mask.slots));
  std::vector<int32_t> admitted(static_cast<size_t>(mask.slots));
  std::vector<float> acc(static_cast<size_t>(dim));
  for (int r = 0; r < mask.rows; ++r) {
    for (int32_t qi = 0; qi < mask.queries; ++qi) {
      const size_t rq = static_cast<size_t>(r) * mask.queries + qi;
      size_t n = 0;
      for (int32_t t = 0; t < mask.slots; ++t) {
        const int32_t s = (mask.first_slot + t) % mask.slots;
        if (mask.Admits(r, qi, s)) admitted[n++] = s;
      }
      for (int h = 0; h < q_heads; ++h) {
        const int kh = h / group;
        const float* qv = q + (rq * q_heads + h) * dim;
        float* o = out + (rq * q_heads + h) * dim;
        if (n == 0) {
          for (int i = 0; i < dim; ++i) o[i] = 0.0f;
          continue;
        }
        float max = -INFINITY;
        for (size_t j = 0; j < n; ++j) {
          float dot = 0.0f;
          for (int i = 0; i < dim; ++i) dot += qv[i] * StoredKey(kv, r, kh, admitted[j], i);
          score[j] = dot * scale;
          if (score[j] > max) max = score[j];
        }
        float sum = 0.0f;
        for (int i = 0; i < dim; ++i) acc[i] = 0.0f;
        for (size_t j = 0; j < n; ++j) {
          const float w = std::exp(score[j] - max);
          sum += w;
          for (int i = 0; i < dim; ++i) acc[i] += w * StoredValue(kv, r, kh, admitted[j], i);
        }
        for (int i = 0; i < dim; ++i) o[i] = acc[i] / sum;
      }
    }
  }
}

}  // namespace kvspec

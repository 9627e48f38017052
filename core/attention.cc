// Attention kernels: Highway version (per target) and scalar reference.
#include "core/attention.h"

#include <cmath>
#include <cstring>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvspec {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// q . k over dim lanes; the same instruction sequence for every slot.
HWY_INLINE float Dot(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b,
                     int dim) {
  const hn::ScalableTag<float> d;
  const int N = static_cast<int>(hn::Lanes(d));
  auto acc0 = hn::Zero(d);
  auto acc1 = hn::Zero(d);
  int i = 0;
  for (; i + 2 * N <= dim; i += 2 * N) {
    acc0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc0);
    acc1 = hn::MulAdd(hn::LoadU(d, a + i + N), hn::LoadU(d, b + i + N), acc1);
  }
  if (i + N <= dim) {
    acc0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc0);
    i += N;
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1)));
  for (; i < dim; ++i) sum += a[i] * b[i];
  return sum;
}

// acc[0, dim) += w * v[0, dim)
HWY_INLINE void AddScaled(float w, const float* HWY_RESTRICT v,
                          float* HWY_RESTRICT acc, int dim) {
  const hn::ScalableTag<float> d;
  const int N = static_cast<int>(hn::Lanes(d));
  const auto vw = hn::Set(d, w);
  int i = 0;
  for (; i + N <= dim; i += N) {
    hn::StoreU(hn::MulAdd(vw, hn::LoadU(d, v + i), hn::LoadU(d, acc + i)), d, acc + i);
  }
  for (; i < dim; ++i) acc[i] += w * v[i];
}

// p[i] = exp(p[i] - max) for i < count; p has room for a whole vector more.
HWY_INLINE void ExpShifted(float* HWY_RESTRICT p, size_t count, float max) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto vmax = hn::Set(d, max);
  for (size_t i = count; i % N != 0; ++i) p[i] = max;  // padding lanes
  for (size_t i = 0; i < count; i += N) {
    hn::StoreU(hn::Exp(d, hn::Sub(hn::LoadU(d, p + i), vmax)), d, p + i);
  }
}

void AttendImpl(const float* HWY_RESTRICT q, int q_heads, const KvView& kv,
                const Mask& mask, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const int dim = kv.dim;
  const int group = q_heads / kv.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const size_t padded = (static_cast<size_t>(mask.slots) + N) / N * N;
  std::vector<float> scores(static_cast<size_t>(group) * padded);  // [group][slots]
  std::vector<int32_t> admitted(static_cast<size_t>(mask.slots));
  std::vector<float> acc(static_cast<size_t>(group) * dim);  // [group][dim]
  std::vector<float> sums(static_cast<size_t>(group));

  for (int r = 0; r < mask.rows; ++r) {
    const int32_t* pos = mask.slot_pos + r * mask.slot_stride;
    for (int32_t qi = 0; qi < mask.queries; ++qi) {
      const size_t rq = static_cast<size_t>(r) * mask.queries + qi;
      const int32_t lo = mask.lo[rq], hi = mask.hi[rq];
      // Admitted slots in logical order: first_slot .. end, then 0 .. first_slot.
      size_t n = 0;
      for (int32_t s = mask.first_slot; s < mask.slots; ++s) {
        if (pos[s] >= lo && pos[s] <= hi) admitted[n++] = s;
      }
      for (int32_t s = 0; s < mask.first_slot; ++s) {
        if (pos[s] >= lo && pos[s] <= hi) admitted[n++] = s;
      }
      for (int kh = 0; kh < kv.kv_heads; ++kh) {
        // Scores of every query head of the group, reading each key once.
        for (size_t j = 0; j < n; ++j) {
          const float* k = kv.Key(r, kh, admitted[j]);
          for (int g = 0; g < group; ++g) {
            const float* qv = q + (rq * q_heads + kh * group + g) * dim;
            scores[g * padded + j] = Dot(qv, k, dim) * scale;
          }
        }
        if (n == 0) {
          for (int g = 0; g < group; ++g) {
            std::memset(out + (rq * q_heads + kh * group + g) * dim, 0, sizeof(float) * dim);
          }
          continue;
        }
        // Softmax weights per query head, then one pass over the values that
        // reads each value row once for the whole group.
        for (int g = 0; g < group; ++g) {
          float* p = &scores[g * padded];
          float max = p[0];
          for (size_t j = 1; j < n; ++j) max = p[j] > max ? p[j] : max;
          ExpShifted(p, n, max);
          float sum = 0.0f;
          for (size_t j = 0; j < n; ++j) sum += p[j];
          sums[g] = sum;
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (size_t j = 0; j < n; ++j) {
          const float* v = kv.Value(r, kh, admitted[j]);
          for (int g = 0; g < group; ++g) {
            AddScaled(scores[g * padded + j], v, &acc[static_cast<size_t>(g) * dim], dim);
          }
        }
        for (int g = 0; g < group; ++g) {
          float* o = out + (rq * q_heads + kh * group + g) * dim;
          const float* a = &acc[static_cast<size_t>(g) * dim];
          for (int i = 0; i < dim; ++i) o[i] = a[i] / sums[g];
        }
      }
    }
  }
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace kvspec
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvspec {

HWY_EXPORT(AttendImpl);
HWY_EXPORT(TargetName);

void Attend(const float* q, int q_heads, const KvView& kv, const Mask& mask,
            float* out) {
  HWY_DYNAMIC_DISPATCH(AttendImpl)(q, q_heads, kv, mask, out);
}

const char* AttentionTargetName() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

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
          const float* k = kv.Key(r, kh, admitted[j]);
          float dot = 0.0f;
          for (int i = 0; i < dim; ++i) dot += qv[i] * k[i];
          score[j] = dot * scale;
          if (score[j] > max) max = score[j];
        }
        float sum = 0.0f;
        for (int i = 0; i < dim; ++i) acc[i] = 0.0f;
        for (size_t j = 0; j < n; ++j) {
          const float w = std::exp(score[j] - max);
          sum += w;
          const float* v = kv.Value(r, kh, admitted[j]);
          for (int i = 0; i < dim; ++i) acc[i] += w * v[i];
        }
        for (int i = 0; i < dim; ++i) o[i] = acc[i] / sum;
      }
    }
  }
}

}  // namespace kvspec
#endif  // HWY_ONCE

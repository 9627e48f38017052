// Unit tests of the gated delta kernel (kernels/gated_delta.h), per Highway
// target:
//
// - GatedDeltaStep is bit-identical to the previous one-row-at-a-time
//   Highway kernel (kept below, test-only, as the oracle "OldGatedDelta")
//   for many shapes, including dk = 128 and dk not a multiple of the lanes,
//   both gate kinds, in place and out of place;
// - GatedDeltaStep stays within kGatedDeltaTolerance of the scalar
//   reference over many tokens;
// - a row's result does not depend on which rows are processed with it:
//   running the rows of a state through any grouping of calls (dv split
//   into pieces) gives the same bytes as one call.
//
// This file is itself compiled once per Highway target (foreach_target) so
// the old kernel exists for every target the library has.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/gated_delta.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/gated_delta_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvspec_test_old {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The gated delta kernel as it was before the rewrite, verbatim.
void OldGatedDeltaStepImpl(const float* state_in, float* state_out, const float* HWY_RESTRICT q,
                           const float* HWY_RESTRICT k, const float* HWY_RESTRICT v,
                           const float* HWY_RESTRICT g, const float* HWY_RESTRICT beta,
                           float* HWY_RESTRICT y, const kvspec::GatedDeltaShape& shape) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t dk = shape.dk, dv = shape.dv;
  const size_t group = shape.value_heads / shape.key_heads;
  for (size_t h = 0; h < shape.value_heads; ++h) {
    const float* kh = k + (h / group) * dk;
    const float* qh = q + (h / group) * dk;
    const float* gh = shape.gate_per_lane ? g + h * dk : nullptr;
    const auto gs = hn::Set(d, shape.gate_per_lane ? 1.0f : g[h]);
    const float b = beta[h];
    for (size_t i = 0; i < dv; ++i) {
      const float* in = state_in + (h * dv + i) * dk;
      float* out = state_out + (h * dv + i) * dk;
      auto acc = hn::Zero(d);
      size_t j = 0;
      for (; j + N <= dk; j += N) {
        const auto gv = gh ? hn::LoadU(d, gh + j) : gs;
        const auto row = hn::Mul(gv, hn::LoadU(d, in + j));
        hn::StoreU(row, d, out + j);
        acc = hn::MulAdd(row, hn::LoadU(d, kh + j), acc);
      }
      float m = hn::GetLane(hn::SumOfLanes(d, acc));
      for (; j < dk; ++j) {
        out[j] = (gh ? gh[j] : g[h]) * in[j];
        m += out[j] * kh[j];
      }
      const float delta = b * (v[h * dv + i] - m);
      const auto dvec = hn::Set(d, delta);
      auto yacc = hn::Zero(d);
      j = 0;
      for (; j + N <= dk; j += N) {
        const auto row = hn::MulAdd(dvec, hn::LoadU(d, kh + j), hn::LoadU(d, out + j));
        hn::StoreU(row, d, out + j);
        yacc = hn::MulAdd(row, hn::LoadU(d, qh + j), yacc);
      }
      float yi = hn::GetLane(hn::SumOfLanes(d, yacc));
      for (; j < dk; ++j) {
        out[j] = out[j] + delta * kh[j];
        yi += out[j] * qh[j];
      }
      y[h * dv + i] = yi;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvspec_test_old
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <gtest/gtest.h>

#include "kernels/test_random.h"
#include "testing/target_params.h"

namespace kvspec_test_old {
HWY_EXPORT(OldGatedDeltaStepImpl);
}  // namespace kvspec_test_old

namespace kvspec {
namespace {

void OldGatedDeltaStep(const float* state_in, float* state_out, const float* q, const float* k,
                       const float* v, const float* g, const float* beta, float* y,
                       const GatedDeltaShape& shape) {
  HWY_DYNAMIC_DISPATCH(kvspec_test_old::OldGatedDeltaStepImpl)
  (state_in, state_out, q, k, v, g, beta, y, shape);
}

using kernel_test::Rand;

// One token's kernel inputs for `shape`, q and k prepared.
struct DeltaToken {
  std::vector<float> q, k, v, g, beta;
};

DeltaToken MakeDeltaToken(const GatedDeltaShape& s, Rand* r) {
  DeltaToken t;
  const size_t hk = s.key_heads * s.dk;
  std::vector<float> qr(hk), kr(hk);
  r->Fill(&qr, -1, 1);
  r->Fill(&kr, -1, 1);
  t.q.resize(hk);
  t.k.resize(hk);
  PrepareQueryKey(qr.data(), kr.data(), t.q.data(), t.k.data(), s);
  t.v.resize(s.value_heads * s.dv);
  r->Fill(&t.v, -1, 1);
  t.g.resize(s.gate_per_lane ? s.value_heads * s.dk : s.value_heads);
  r->Fill(&t.g, 0.5f, 0.999f);
  t.beta.resize(s.value_heads);
  r->Fill(&t.beta, 0.05f, 0.999f);
  return t;
}

GatedDeltaShape RandomShape(Rand* r) {
  GatedDeltaShape s;
  s.key_heads = r->Int(1, 3);
  s.value_heads = s.key_heads * r->Int(1, 3);
  static const size_t kDks[] = {1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 100, 128, 130};
  s.dk = r->Int(0, 3) == 0 ? r->Int(1, 140) : kDks[r->Int(0, sizeof(kDks) / sizeof(kDks[0]) - 1)];
  s.dv = r->Int(0, 3) == 0 ? 128 : r->Int(1, 21);
  s.gate_per_lane = r->Int(0, 2) == 0;
  return s;
}

std::string Describe(const GatedDeltaShape& s) {
  return "Hv=" + std::to_string(s.value_heads) + " Hk=" + std::to_string(s.key_heads) +
         " dk=" + std::to_string(s.dk) + " dv=" + std::to_string(s.dv) +
         (s.gate_per_lane ? " per-lane gate" : " per-head gate");
}

class GatedDeltaTargets : public ::testing::TestWithParam<int64_t> {};

TEST_P(GatedDeltaTargets, IsBitIdenticalToOldKernel) {
  testing::TargetScope scope(GetParam());
  Rand r(1234);
  for (int trial = 0; trial < 150; ++trial) {
    const GatedDeltaShape s = RandomShape(&r);
    const size_t n = s.value_heads * s.dv * s.dk;
    std::vector<float> state(n);
    r.Fill(&state, -1, 1);
    const bool in_place = trial % 2 == 0;
    std::vector<float> a = state, b = state, a_out(n), b_out(n);
    const int tokens = static_cast<int>(r.Int(1, 6));
    for (int t = 0; t < tokens; ++t) {
      const DeltaToken tok = MakeDeltaToken(s, &r);
      std::vector<float> ya(s.value_heads * s.dv, -7.0f), yb(ya.size(), 7.0f);
      GatedDeltaStep(a.data(), in_place ? a.data() : a_out.data(), tok.q.data(), tok.k.data(),
                     tok.v.data(), tok.g.data(), tok.beta.data(), ya.data(), s);
      OldGatedDeltaStep(b.data(), in_place ? b.data() : b_out.data(), tok.q.data(), tok.k.data(),
                        tok.v.data(), tok.g.data(), tok.beta.data(), yb.data(), s);
      if (!in_place) {
        a.swap(a_out);
        b.swap(b_out);
      }
      ASSERT_EQ(0, std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float)))
          << Describe(s) << " token " << t;
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), n * sizeof(float)))
          << Describe(s) << " token " << t;
    }
  }
}

TEST_P(GatedDeltaTargets, WithinToleranceOfReference) {
  testing::TargetScope scope(GetParam());
  Rand r(99);
  for (int trial = 0; trial < 80; ++trial) {
    const GatedDeltaShape s = RandomShape(&r);
    const size_t n = s.value_heads * s.dv * s.dk;
    std::vector<float> state(n);
    r.Fill(&state, -1, 1);
    std::vector<float> ref = state;
    for (int t = 0; t < 8; ++t) {
      const DeltaToken tok = MakeDeltaToken(s, &r);
      std::vector<float> y(s.value_heads * s.dv), y_ref(y.size());
      GatedDeltaStep(state.data(), state.data(), tok.q.data(), tok.k.data(), tok.v.data(),
                     tok.g.data(), tok.beta.data(), y.data(), s);
      GatedDeltaStepReference(ref.data(), ref.data(), tok.q.data(), tok.k.data(), tok.v.data(),
                              tok.g.data(), tok.beta.data(), y_ref.data(), s);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_LE(std::fabs(y[i] - y_ref[i]), kGatedDeltaTolerance * (1 + std::fabs(y_ref[i])))
            << Describe(s) << " token " << t << " y " << i;
      }
      for (size_t i = 0; i < n; ++i) {
        ASSERT_LE(std::fabs(state[i] - ref[i]), kGatedDeltaTolerance * (1 + std::fabs(ref[i])))
            << Describe(s) << " token " << t << " state " << i;
      }
    }
  }
}

// Rows [i0, i1) of every head as their own call (value_heads = 1 each).
TEST_P(GatedDeltaTargets, RowsDoNotDependOnGrouping) {
  testing::TargetScope scope(GetParam());
  Rand r(4321);
  for (int trial = 0; trial < 100; ++trial) {
    GatedDeltaShape s = RandomShape(&r);
    const size_t n = s.value_heads * s.dv * s.dk;
    std::vector<float> whole(n);
    r.Fill(&whole, -1, 1);
    std::vector<float> pieces = whole;
    for (int t = 0; t < 3; ++t) {
      const DeltaToken tok = MakeDeltaToken(s, &r);
      std::vector<float> y(s.value_heads * s.dv), y_pieces(y.size());
      GatedDeltaStep(whole.data(), whole.data(), tok.q.data(), tok.k.data(), tok.v.data(),
                     tok.g.data(), tok.beta.data(), y.data(), s);
      const size_t group = s.value_heads / s.key_heads;
      for (size_t h = 0; h < s.value_heads; ++h) {
        const size_t kh = h / group;
        const float* g = tok.g.data() + (s.gate_per_lane ? h * s.dk : h);
        for (size_t i0 = 0; i0 < s.dv;) {
          const size_t i1 = std::min(s.dv, i0 + r.Int(1, 7));
          GatedDeltaShape part = s;
          part.value_heads = part.key_heads = 1;
          part.dv = i1 - i0;
          float* st = pieces.data() + (h * s.dv + i0) * s.dk;
          GatedDeltaStep(st, st, tok.q.data() + kh * s.dk, tok.k.data() + kh * s.dk,
                         tok.v.data() + h * s.dv + i0, g, tok.beta.data() + h,
                         y_pieces.data() + h * s.dv + i0, part);
          i0 = i1;
        }
      }
      ASSERT_EQ(0, std::memcmp(y.data(), y_pieces.data(), y.size() * sizeof(float)))
          << Describe(s);
      ASSERT_EQ(0, std::memcmp(whole.data(), pieces.data(), n * sizeof(float))) << Describe(s);
    }
  }
}

// Same inputs, same bits: repeated calls, in place or not.
TEST_P(GatedDeltaTargets, IsDeterministicInAndOutOfPlace) {
  testing::TargetScope scope(GetParam());
  Rand r(777);
  for (int trial = 0; trial < 40; ++trial) {
    const GatedDeltaShape s = RandomShape(&r);
    const size_t n = s.value_heads * s.dv * s.dk;
    std::vector<float> state(n);
    r.Fill(&state, -1, 1);
    const DeltaToken tok = MakeDeltaToken(s, &r);
    std::vector<float> in_place = state, out(n), y1(s.value_heads * s.dv), y2(y1.size());
    GatedDeltaStep(in_place.data(), in_place.data(), tok.q.data(), tok.k.data(), tok.v.data(),
                   tok.g.data(), tok.beta.data(), y1.data(), s);
    GatedDeltaStep(state.data(), out.data(), tok.q.data(), tok.k.data(), tok.v.data(),
                   tok.g.data(), tok.beta.data(), y2.data(), s);
    ASSERT_EQ(0, std::memcmp(in_place.data(), out.data(), n * sizeof(float))) << Describe(s);
    ASSERT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float))) << Describe(s);
  }
}

KVSPEC_FOR_EACH_TARGET(GatedDeltaTargets);

}  // namespace
}  // namespace kvspec
#endif  // HWY_ONCE

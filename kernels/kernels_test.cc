// Unit tests of the SSM kernels (core/gated_delta, core/conv1d), per Highway
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
//   into pieces) gives the same bytes as one call;
// - ConvStep stays within kConvTolerance of ConvStepReference, including
//   extreme pre-activations, and a channel's output does not depend on the
//   channels processed with it.
//
// This file is itself compiled once per Highway target (foreach_target) so
// the old kernel exists for every target the library has.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/conv1d.h"
#include "kernels/gated_delta.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kernels_test.cc"
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

class Rand {
 public:
  explicit Rand(uint32_t seed) : gen_(seed) {}
  float Uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  size_t Int(size_t lo, size_t hi) { return std::uniform_int_distribution<size_t>(lo, hi)(gen_); }
  void Fill(std::vector<float>* v, float lo, float hi) {
    for (float& x : *v) x = Uniform(lo, hi);
  }

 private:
  std::mt19937 gen_;
};

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

class KernelTargets : public ::testing::TestWithParam<int64_t> {};

TEST_P(KernelTargets, GatedDeltaIsBitIdenticalToOldKernel) {
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

TEST_P(KernelTargets, GatedDeltaWithinToleranceOfReference) {
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
TEST_P(KernelTargets, GatedDeltaRowsDoNotDependOnGrouping) {
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
TEST_P(KernelTargets, GatedDeltaIsDeterministicInAndOutOfPlace) {
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

void CheckConv(size_t C, size_t K, float scale, Rand* r, const std::string& what) {
  std::vector<float> w(K * C), state((K - 1) * C), x(C), u(C), u_ref(C);
  r->Fill(&w, -1, 1);
  r->Fill(&state, -scale, scale);
  r->Fill(&x, -scale, scale);
  std::vector<float> s1 = state, s2 = state, s3((K - 1) * C);
  ConvStep(w.data(), s1.data(), s1.data(), x.data(), u.data(), C, K);
  ConvStepReference(w.data(), s2.data(), s2.data(), x.data(), u_ref.data(), C, K);
  ASSERT_EQ(s1, s2) << what;
  for (size_t c = 0; c < C; ++c) {
    ASSERT_LE(std::fabs(u[c] - u_ref[c]), kConvTolerance * (1 + std::fabs(u_ref[c])))
        << what << " channel " << c << " expected " << u_ref[c] << " got " << u[c];
  }
  // Out of place gives the same bits.
  std::vector<float> u2(C);
  ConvStep(w.data(), state.data(), s3.data(), x.data(), u2.data(), C, K);
  ASSERT_EQ(s3, s1) << what;
  ASSERT_EQ(0, std::memcmp(u.data(), u2.data(), C * sizeof(float))) << what;
}

TEST_P(KernelTargets, ConvWithinToleranceOfReference) {
  testing::TargetScope scope(GetParam());
  Rand r(55);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t C = r.Int(1, 300);
    const size_t K = r.Int(0, 4) == 0 ? r.Int(1, kMaxConvKernel) : r.Int(1, 5);
    // Moderate inputs: with large ones the sum itself (FMA here, separate
    // multiply and add in the reference) differs by more than the tolerance
    // when it cancels; large pre-activations are covered by the grid below.
    static const float kScales[] = {0.1f, 1.0f, 2.0f, 4.0f};
    const float scale = kScales[r.Int(0, 3)];
    CheckConv(C, K, scale, &r,
              "C=" + std::to_string(C) + " K=" + std::to_string(K) +
                  " scale=" + std::to_string(scale));
    if (HasFailure()) return;
  }
}

// Every pre-activation on a fine grid over [-120, 120] and the extremes.
TEST_P(KernelTargets, ConvSiluOverTheWholeRange) {
  testing::TargetScope scope(GetParam());
  std::vector<float> z;
  for (float v = -120.0f; v <= 120.0f; v += 0.001953125f) z.push_back(v);
  const float big[] = {-1e30f, -3e38f, -1e5f, -200.0f, -104.0f, -89.0f, -88.5f, -87.5f,
                       -0.0f,  0.0f,   1e-30f, -1e-30f, 88.0f, 89.0f,  200.0f, 1e30f,
                       3e38f,  std::numeric_limits<float>::denorm_min()};
  z.insert(z.end(), std::begin(big), std::end(big));
  const size_t C = z.size();
  std::vector<float> w(C, 1.0f), u(C), u_ref(C);
  ConvStep(w.data(), nullptr, nullptr, z.data(), u.data(), C, 1);
  ConvStepReference(w.data(), nullptr, nullptr, z.data(), u_ref.data(), C, 1);
  for (size_t c = 0; c < C; ++c) {
    ASSERT_LE(std::fabs(u[c] - u_ref[c]), kConvTolerance * (1 + std::fabs(u_ref[c])))
        << "z=" << z[c] << " expected " << u_ref[c] << " got " << u[c];
  }
  // A NaN pre-activation stays NaN.
  std::vector<float> nan_in = {std::numeric_limits<float>::quiet_NaN()};
  std::vector<float> w1 = {1.0f}, u1(1);
  ConvStep(w1.data(), nullptr, nullptr, nan_in.data(), u1.data(), 1, 1);
  EXPECT_TRUE(std::isnan(u1[0]));
}

TEST_P(KernelTargets, ConvChannelsDoNotDependOnGrouping) {
  testing::TargetScope scope(GetParam());
  Rand r(66);
  for (int trial = 0; trial < 60; ++trial) {
    const size_t C = r.Int(1, 200), K = r.Int(1, 6);
    std::vector<float> w(K * C), state((K - 1) * C), x(C), u(C), u_parts(C);
    r.Fill(&w, -1, 1);
    r.Fill(&state, -3, 3);
    r.Fill(&x, -3, 3);
    std::vector<float> st = state;
    ConvStep(w.data(), st.data(), st.data(), x.data(), u.data(), C, K);
    // Channels [c0, c1) alone: gather into a compact layout.
    for (size_t c0 = 0; c0 < C;) {
      const size_t c1 = std::min(C, c0 + r.Int(1, 20)), n = c1 - c0;
      std::vector<float> wp(K * n), sp((K - 1) * n), xp(n), up(n);
      for (size_t j = 0; j < K; ++j) {
        for (size_t c = 0; c < n; ++c) {
          wp[j * n + c] = w[j * C + c0 + c];
          if (j + 1 < K) sp[j * n + c] = state[j * C + c0 + c];
        }
      }
      for (size_t c = 0; c < n; ++c) xp[c] = x[c0 + c];
      ConvStep(wp.data(), sp.data(), sp.data(), xp.data(), up.data(), n, K);
      for (size_t c = 0; c < n; ++c) u_parts[c0 + c] = up[c];
      c0 = c1;
    }
    ASSERT_EQ(0, std::memcmp(u.data(), u_parts.data(), C * sizeof(float)))
        << "C=" << C << " K=" << K;
  }
}

KVSPEC_FOR_EACH_TARGET(KernelTargets);

}  // namespace
}  // namespace kvspec
#endif  // HWY_ONCE

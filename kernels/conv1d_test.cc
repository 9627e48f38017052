// Unit tests of the causal conv1d kernel (kernels/conv1d.h), per Highway
// target: ConvStep stays within kConvTolerance of ConvStepReference,
// including extreme pre-activations, a NaN stays NaN, and a channel's
// output does not depend on the channels processed with it. The kernel
// order (channel blocks) is checked against the trace order [rows][C]: the
// conversions are exact and inverse, and the reference computes, from
// trace-order inputs converted in, the definition written here directly on
// the trace order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "kvspec/kernels/conv1d.h"
#include "kvspec/kernels/test_random.h"
#include "kvspec/testing/target_params.h"

namespace kvspec {
namespace {

using kernel_test::Rand;

class ConvTargets : public ::testing::TestWithParam<int64_t> {};

// One step from trace-order inputs (w [K][C], state [K-1][C]) through the
// kernel order; u and the next state (trace order) out.
void StepTrace(bool reference, const std::vector<float>& w, const std::vector<float>& state,
               const std::vector<float>& x, std::vector<float>* u, std::vector<float>* next,
               size_t C, size_t K) {
  std::vector<float> packed(K * C), s((K - 1) * C);
  PackConvWeights(w.data(), packed.data(), C, K);
  ConvStateFromTrace(state.data(), s.data(), C, K);
  u->assign(C, 0.0f);
  (reference ? ConvStepReference : ConvStep)(packed.data(), s.data(), s.data(), x.data(),
                                             u->data(), C, K);
  next->assign((K - 1) * C, 0.0f);
  ConvStateToTrace(s.data(), next->data(), C, K);
}

void CheckConv(size_t C, size_t K, float scale, Rand* r, const std::string& what) {
  std::vector<float> w(K * C), state((K - 1) * C), x(C);
  r->Fill(&w, -1, 1);
  r->Fill(&state, -scale, scale);
  r->Fill(&x, -scale, scale);
  std::vector<float> u, u_ref, s1, s2;
  StepTrace(false, w, state, x, &u, &s1, C, K);
  StepTrace(true, w, state, x, &u_ref, &s2, C, K);
  ASSERT_EQ(s1, s2) << what;
  // The shift, on the trace order: rows 1 .. K-2, then x.
  for (size_t j = 0; j + 1 < K; ++j) {
    for (size_t c = 0; c < C; ++c) {
      const float want = j + 2 < K ? state[(j + 1) * C + c] : x[c];
      ASSERT_EQ(s1[j * C + c], want) << what << " row " << j << " channel " << c;
    }
  }
  for (size_t c = 0; c < C; ++c) {
    ASSERT_LE(std::fabs(u[c] - u_ref[c]), kConvTolerance * (1 + std::fabs(u_ref[c])))
        << what << " channel " << c << " expected " << u_ref[c] << " got " << u[c];
    // The reference against the definition on the trace order (double).
    double z = 0;
    for (size_t j = 0; j < K; ++j) {
      z += static_cast<double>(w[j * C + c]) * (j + 1 < K ? state[j * C + c] : x[c]);
    }
    const double want = z / (1 + std::exp(-z));
    ASSERT_LE(std::fabs(u_ref[c] - want), kConvTolerance * (1 + std::fabs(want)))
        << what << " channel " << c << " definition " << want << " reference " << u_ref[c];
  }
  // Out of place gives the same bits, and leaves the input state alone.
  std::vector<float> packed(K * C), sin((K - 1) * C), sout((K - 1) * C), u2(C), s3((K - 1) * C);
  PackConvWeights(w.data(), packed.data(), C, K);
  ConvStateFromTrace(state.data(), sin.data(), C, K);
  const std::vector<float> sin_copy = sin;
  ConvStep(packed.data(), sin.data(), sout.data(), x.data(), u2.data(), C, K);
  ASSERT_EQ(sin, sin_copy) << what;
  ConvStateToTrace(sout.data(), s3.data(), C, K);
  ASSERT_EQ(s3, s1) << what;
  ASSERT_EQ(0, std::memcmp(u.data(), u2.data(), C * sizeof(float))) << what;
  // The state update alone (replays) gives the same state, in and out of place.
  std::vector<float> shifted((K - 1) * C), s4((K - 1) * C);
  ConvShiftState(sin.data(), shifted.data(), x.data(), C, K);
  ASSERT_EQ(shifted, sout) << what;
  ConvShiftState(sin.data(), sin.data(), x.data(), C, K);
  ASSERT_EQ(sin, sout) << what;
}

// The kernel order is the one conv1d.h describes, and the conversions are
// exact inverses.
TEST(ConvLayout, BlocksOfChannels) {
  Rand r(77);
  for (const size_t C : {1, 5, 15, 16, 17, 31, 32, 33, 100, 160}) {
    for (const size_t K : {1, 2, 4, 7}) {
      std::vector<float> w(K * C), packed(K * C);
      r.Fill(&w, -1, 1);
      PackConvWeights(w.data(), packed.data(), C, K);
      for (size_t c = 0; c < C; ++c) {
        const size_t b = c / kConvBlock * kConvBlock, n = std::min(kConvBlock, C - b);
        for (size_t j = 0; j < K; ++j) {
          ASSERT_EQ(packed[b * K + j * n + (c - b)], w[j * C + c])
              << "C=" << C << " K=" << K << " c=" << c << " j=" << j;
        }
      }
      std::vector<float> trace((K - 1) * C), state((K - 1) * C), back((K - 1) * C);
      r.Fill(&trace, -1, 1);
      ConvStateFromTrace(trace.data(), state.data(), C, K);
      for (size_t c = 0; c < C && K > 1; ++c) {
        const size_t b = c / kConvBlock * kConvBlock, n = std::min(kConvBlock, C - b);
        for (size_t j = 0; j + 1 < K; ++j) {
          ASSERT_EQ(state[b * (K - 1) + j * n + (c - b)], trace[j * C + c]);
        }
      }
      ConvStateToTrace(state.data(), back.data(), C, K);
      ASSERT_EQ(back, trace) << "C=" << C << " K=" << K;
    }
  }
}

TEST_P(ConvTargets, WithinToleranceOfReference) {
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
TEST_P(ConvTargets, SiluOverTheWholeRange) {
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

TEST_P(ConvTargets, ChannelsDoNotDependOnGrouping) {
  testing::TargetScope scope(GetParam());
  Rand r(66);
  for (int trial = 0; trial < 60; ++trial) {
    const size_t C = r.Int(1, 200), K = r.Int(1, 6);
    std::vector<float> w(K * C), state((K - 1) * C), x(C), u, next, u_parts(C);
    r.Fill(&w, -1, 1);
    r.Fill(&state, -3, 3);
    r.Fill(&x, -3, 3);
    StepTrace(false, w, state, x, &u, &next, C, K);
    // Channels [c0, c1) alone: gather into a compact layout (their blocks
    // and lanes differ from the whole run's).
    for (size_t c0 = 0; c0 < C;) {
      const size_t c1 = std::min(C, c0 + r.Int(1, 20)), n = c1 - c0;
      std::vector<float> wp(K * n), sp((K - 1) * n), xp(n), up, nextp;
      for (size_t j = 0; j < K; ++j) {
        for (size_t c = 0; c < n; ++c) {
          wp[j * n + c] = w[j * C + c0 + c];
          if (j + 1 < K) sp[j * n + c] = state[j * C + c0 + c];
        }
      }
      for (size_t c = 0; c < n; ++c) xp[c] = x[c0 + c];
      StepTrace(false, wp, sp, xp, &up, &nextp, n, K);
      for (size_t c = 0; c < n; ++c) u_parts[c0 + c] = up[c];
      c0 = c1;
    }
    ASSERT_EQ(0, std::memcmp(u.data(), u_parts.data(), C * sizeof(float)))
        << "C=" << C << " K=" << K;
  }
}

// T tokens step by step give the same bits whether the state stays in place
// or alternates between two buffers (the cache's verify rounds), and the
// shift alone (rollback replays) reproduces every state.
TEST_P(ConvTargets, TokensInPlaceOrAlternating) {
  testing::TargetScope scope(GetParam());
  Rand r(88);
  for (const size_t K : {2, 4, 5}) {
    const size_t C = 8 * kConvBlock + 7, T = 9;
    std::vector<float> w(K * C), packed(K * C), start((K - 1) * C), xs(T * C);
    r.Fill(&w, -1, 1);
    r.Fill(&start, -2, 2);
    r.Fill(&xs, -2, 2);
    PackConvWeights(w.data(), packed.data(), C, K);
    std::vector<float> a = start, b0 = start, b1((K - 1) * C), replay = start, ua(C), ub(C);
    for (size_t t = 0; t < T; ++t) {
      const float* x = &xs[t * C];
      ConvStep(packed.data(), a.data(), a.data(), x, ua.data(), C, K);
      float* src = t % 2 == 0 ? b0.data() : b1.data();
      float* dst = t % 2 == 0 ? b1.data() : b0.data();
      ConvStep(packed.data(), src, dst, x, ub.data(), C, K);
      ConvShiftState(replay.data(), replay.data(), x, C, K);
      ASSERT_EQ(0, std::memcmp(ua.data(), ub.data(), C * sizeof(float))) << "K=" << K;
      ASSERT_EQ(a, t % 2 == 0 ? b1 : b0) << "K=" << K << " t=" << t;
      ASSERT_EQ(a, replay) << "K=" << K << " t=" << t;
    }
  }
}

KVSPEC_FOR_EACH_TARGET(ConvTargets);

}  // namespace
}  // namespace kvspec

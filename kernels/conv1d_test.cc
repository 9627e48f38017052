// Unit tests of the causal conv1d kernel (kernels/conv1d.h), per Highway
// target: ConvStep stays within kConvTolerance of ConvStepReference,
// including extreme pre-activations, a NaN stays NaN, and a channel's
// output does not depend on the channels processed with it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "kernels/conv1d.h"
#include "kernels/test_random.h"
#include "testing/target_params.h"

namespace kvspec {
namespace {

using kernel_test::Rand;

class ConvTargets : public ::testing::TestWithParam<int64_t> {};

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

KVSPEC_FOR_EACH_TARGET(ConvTargets);

}  // namespace
}  // namespace kvspec

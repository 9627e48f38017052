// Properties of recurrent gated-DeltaNet caches, each run once per Highway
// target (test names end in the target, e.g. SsmTargets.../AVX2):
//
// - rollback replay is bit-exact: for every keep from 0 to T, arm + verify
//   window of T tokens + rollback(keep) leaves every row's conv and
//   recurrent state byte-identical to a cache that only ever saw the kept
//   tokens;
// - tail independence: different rejected tails leave identical states;
// - padded steps change nothing (pad inputs hold NaN);
// - a window call equals token-by-token decoding, byte for byte;
// - a row's rollback does not touch other rows;
// - the Highway kernels agree with the scalar references within
//   kConvTolerance / kGatedDeltaTolerance (per-head and per-lane gates).
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kvspec/kernels/conv1d.h"
#include "kvspec/kernels/gated_delta.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/trace/values.h"
#include "kvspec/testing/target_params.h"

namespace kvspec {
namespace {

rc::Gen<SsmShape> GenShape() {
  return rc::gen::exec([] {
    SsmShape s;
    s.key_heads = *rc::gen::inRange(1, 3);
    s.value_heads = s.key_heads * *rc::gen::inRange(1, 3);
    s.dk = *rc::gen::inRange(1, 20);
    s.dv = *rc::gen::inRange(1, 9);
    s.conv = *rc::gen::inRange(1, 5);
    s.gate_per_lane = *rc::gen::inRange(0, 4) == 0;
    return s;
  });
}

// Inputs of one token: x[C] in [-1, 1), gate in (0, 1), beta in (0, 1).
struct Token {
  std::vector<float> x, gate, beta;
};

Token MakeToken(const SsmShape& s, uint64_t seed) {
  ValueStream v(seed);
  Token t;
  t.x.resize(s.Channels());
  v.Fill(t.x.data(), t.x.size());
  t.gate.resize(s.GateFloats());
  for (float& g : t.gate) g = 0.5f + 0.49f * v.Next();
  t.beta.resize(static_cast<size_t>(s.value_heads));
  for (float& b : t.beta) b = 0.5f + 0.49f * v.Next();
  return t;
}

std::vector<float> Weights(const SsmShape& s, uint64_t seed) {
  std::vector<float> w(static_cast<size_t>(s.conv) * s.Channels());
  ValueStream(seed).Fill(w.data(), w.size());
  for (float& x : w) x *= 0.5f;
  return w;
}

// Feeds rows' tokens as one forward of L columns: tokens[r] real tokens
// after left[r] pads, the rest right pads (pad inputs are NaN).
Status Feed(SsmCacheBase* cache, const SsmShape& s, const std::vector<float>& w,
          const std::vector<std::vector<Token>>& tokens, int32_t columns,
          const std::vector<int32_t>& left, std::vector<float>* y = nullptr) {
  const int rows = cache->rows();
  const size_t L = static_cast<size_t>(columns), C = s.Channels(), gf = s.GateFloats();
  const size_t hv = static_cast<size_t>(s.value_heads);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x(rows * L * C, nan), g(rows * L * gf, nan), b(rows * L * hv, nan);
  ForwardColumns cols = ForwardColumns::Dense(rows, columns);
  for (int r = 0; r < rows; ++r) {
    cols.left[r] = left[r];
    cols.right[r] = columns - left[r] - static_cast<int32_t>(tokens[r].size());
    for (size_t j = 0; j < tokens[r].size(); ++j) {
      const size_t at = r * L + left[r] + j;
      std::copy(tokens[r][j].x.begin(), tokens[r][j].x.end(), x.begin() + at * C);
      std::copy(tokens[r][j].gate.begin(), tokens[r][j].gate.end(), g.begin() + at * gf);
      std::copy(tokens[r][j].beta.begin(), tokens[r][j].beta.end(), b.begin() + at * hv);
    }
  }
  SsmIO io;
  io.conv_weights = w.data();
  io.x = x.data();
  io.gate = g.data();
  io.beta = b.data();
  if (y) {
    y->assign(rows * L * hv * s.dv, 0.0f);
    io.y = y->data();
  }
  return cache->Forward(cols, io);
}

// Every row's token list as its own single-row run, one token per forward.
std::unique_ptr<SsmCache> Alone(const SsmShape& s, const std::vector<float>& w,
                                const std::vector<Token>& tokens) {
  auto cache = std::make_unique<SsmCache>(s);
  for (const Token& t : tokens) RC_ASSERT(Feed(cache.get(), s, w, {{t}}, 1, {0}).ok());
  return cache;
}

bool SameRowState(const SsmCacheBase& a, int ra, const SsmCacheBase& b, int rb) {
  const SsmShape& s = a.shape();
  return std::memcmp(a.ConvState(ra), b.ConvState(rb), s.ConvFloats() * 4) == 0 &&
         std::memcmp(a.RecurrentState(ra), b.RecurrentState(rb), s.RecurrentFloats() * 4) == 0;
}

std::vector<Token> Tokens(const SsmShape& s, size_t n, uint64_t seed) {
  std::vector<Token> t;
  for (size_t i = 0; i < n; ++i) t.push_back(MakeToken(s, Mix(seed + i)));
  return t;
}

class SsmTargets : public ::testing::TestWithParam<int64_t> {
 protected:
  void Check(const std::string& name, const std::function<void()>& property) {
    testing::TargetScope scope(GetParam());
    EXPECT_TRUE(rc::check(name + " on " + hwy::TargetName(GetParam()), property));
  }
};

TEST_P(SsmTargets, RollbackReplayIsBitExactForEveryKeep) {
  Check("rollback replay", [] {
    const SsmShape s = *GenShape();
    const auto w = Weights(s, *rc::gen::arbitrary<uint64_t>());
    const auto prefix = Tokens(s, *rc::gen::inRange<size_t>(0, 6), *rc::gen::arbitrary<uint64_t>());
    const auto round = Tokens(s, *rc::gen::inRange<size_t>(1, 8), *rc::gen::arbitrary<uint64_t>());
    const int32_t T = static_cast<int32_t>(round.size());
    SsmCache base(s);
    if (!prefix.empty()) {
      RC_ASSERT(Feed(&base, s, w, {prefix}, static_cast<int32_t>(prefix.size()), {0}).ok());
    }
    for (int32_t keep = 0; keep <= T; ++keep) {
      std::unique_ptr<Cache> copy = base.Copy();
      auto* armed = static_cast<SsmCacheBase*>(copy.get());
      RC_ASSERT(armed->ArmRound().ok());
      RC_ASSERT(Feed(armed, s, w, {round}, T, {0}).ok());
      if (keep == T) {
        RC_ASSERT(armed->Commit().ok());
      } else {
        RC_ASSERT(armed->Rollback({keep}).ok());
      }
      std::vector<Token> seen = prefix;
      seen.insert(seen.end(), round.begin(), round.begin() + keep);
      const auto alone = Alone(s, w, seen);
      RC_ASSERT(SameRowState(*armed, 0, *alone, 0));
      RC_ASSERT(armed->positions() == alone->positions());
    }
  });
}

TEST_P(SsmTargets, RejectedTailsDoNotMatter) {
  Check("tail independence", [] {
    const SsmShape s = *GenShape();
    const auto w = Weights(s, 7);
    const auto kept = Tokens(s, *rc::gen::inRange<size_t>(0, 5), *rc::gen::arbitrary<uint64_t>());
    const size_t tail = *rc::gen::inRange<size_t>(1, 5);
    std::vector<std::unique_ptr<SsmCache>> caches;
    for (int variant = 0; variant < 2; ++variant) {
      auto c = std::make_unique<SsmCache>(s);
      RC_ASSERT(c->ArmRound().ok());
      auto round = kept;
      const auto rejected = Tokens(s, tail, *rc::gen::arbitrary<uint64_t>());
      round.insert(round.end(), rejected.begin(), rejected.end());
      RC_ASSERT(Feed(c.get(), s, w, {round}, static_cast<int32_t>(round.size()), {0}).ok());
      RC_ASSERT(c->Rollback({static_cast<int32_t>(kept.size())}).ok());
      caches.push_back(std::move(c));
    }
    RC_ASSERT(SameRowState(*caches[0], 0, *caches[1], 0));
  });
}

TEST_P(SsmTargets, WindowEqualsTokenByTokenAndPadsChangeNothing) {
  Check("window = token by token, pads invisible", [] {
    const SsmShape s = *GenShape();
    const auto w = Weights(s, 11);
    const auto tokens = Tokens(s, *rc::gen::inRange<size_t>(1, 10), *rc::gen::arbitrary<uint64_t>());
    const int32_t left = *rc::gen::inRange<int32_t>(0, 3);
    const int32_t right = *rc::gen::inRange<int32_t>(0, 3);
    SsmCache window(s);
    std::vector<float> y_window;
    RC_ASSERT(Feed(&window, s, w, {tokens}, left + static_cast<int32_t>(tokens.size()) + right, {left},
         &y_window).ok());
    const auto alone = Alone(s, w, tokens);
    RC_ASSERT(SameRowState(window, 0, *alone, 0));
    // Outputs: each real token's y equals the single-step run's.
    SsmCache steps(s);
    const size_t yf = static_cast<size_t>(s.value_heads) * s.dv;
    for (size_t j = 0; j < tokens.size(); ++j) {
      std::vector<float> y;
      RC_ASSERT(Feed(&steps, s, w, {{tokens[j]}}, 1, {0}, &y).ok());
      RC_ASSERT(std::memcmp(y.data(), &y_window[(left + j) * yf], yf * 4) == 0);
    }
    // Pad outputs are zeros, never NaN.
    for (size_t i = 0; i < static_cast<size_t>(left) * yf; ++i) RC_ASSERT(y_window[i] == 0.0f);
  });
}

TEST_P(SsmTargets, RowRollbackLeavesOtherRowsAlone) {
  Check("row isolation", [] {
    const SsmShape s = *GenShape();
    const auto w = Weights(s, 13);
    const int rows = *rc::gen::inRange(2, 4);
    const int32_t T = *rc::gen::inRange<int32_t>(1, 6);
    std::vector<std::vector<Token>> round(rows);
    std::vector<int32_t> keep(rows), left(rows, 0);
    for (int r = 0; r < rows; ++r) {
      const int32_t real = *rc::gen::inRange<int32_t>(0, T + 1);
      round[r] = Tokens(s, static_cast<size_t>(real), *rc::gen::arbitrary<uint64_t>());
      keep[r] = *rc::gen::inRange<int32_t>(0, real + 1);
    }
    BatchedSsmCache batch(rows, s);
    RC_ASSERT(batch.ArmRound().ok());
    RC_ASSERT(Feed(&batch, s, w, round, T, left).ok());
    RC_ASSERT(batch.Rollback(keep).ok());
    for (int r = 0; r < rows; ++r) {
      std::vector<Token> seen(round[r].begin(), round[r].begin() + keep[r]);
      const auto alone = Alone(s, w, seen);
      RC_ASSERT(SameRowState(batch, r, *alone, 0));
    }
  });
}

TEST_P(SsmTargets, RoundMisuseIsRefusedAndChangesNothing) {
  testing::TargetScope scope(GetParam());
  SsmShape s;
  const auto w = Weights(s, 3);
  SsmCache c(s);
  auto hash = [&] {
    Hasher h;
    c.HashState(&h);
    return h.value();
  };
  const uint64_t h0 = hash();
  EXPECT_FALSE(c.Rollback({0}).ok());  // nothing armed
  EXPECT_FALSE(c.Commit().ok());
  EXPECT_FALSE(c.trim(0).ok());
  EXPECT_FALSE(c.isTrimmable());
  EXPECT_EQ(c.bytesPerToken(), 0u);
  EXPECT_EQ(hash(), h0);
  ASSERT_TRUE(c.ArmRound().ok());
  const uint64_t h1 = hash();
  EXPECT_FALSE(c.ArmRound().ok());  // arming twice
  EXPECT_FALSE(c.Rollback({0}).ok());  // before the verify forward
  EXPECT_EQ(hash(), h1);
  ASSERT_TRUE(Feed(&c, s, w, {Tokens(s, 3, 5)}, 3, {0}).ok());
  EXPECT_FALSE(Feed(&c, s, w, {Tokens(s, 1, 6)}, 1, {0}).ok());  // a second forward
  const uint64_t h2 = hash();
  EXPECT_FALSE(c.Rollback({4}).ok());  // more than the round
  EXPECT_FALSE(c.Rollback({1, 1}).ok());  // wrong row count
  EXPECT_EQ(hash(), h2);
  EXPECT_TRUE(c.Rollback({1}).ok());
  EXPECT_EQ(c.positions()[0], 1);
}

TEST_P(SsmTargets, KernelsMatchScalarReferences) {
  const std::string target = hwy::TargetName(GetParam());
  Check("conv and gated delta vs scalar", [&] {
    const SsmShape s = *GenShape();
    const size_t C = s.Channels(), K = static_cast<size_t>(s.conv);
    const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
    ValueStream v(seed);
    std::vector<float> w(K * C), state((K - 1) * C), x(C), u(C), u_ref(C);
    v.Fill(w.data(), w.size());
    v.Fill(state.data(), state.size());
    v.Fill(x.data(), x.size());
    // The kernels' order (kernels/conv1d.h) from the trace order.
    std::vector<float> packed(K * C), st1(state.size()), st2, trace(state.size());
    PackConvWeights(w.data(), packed.data(), C, K);
    ConvStateFromTrace(state.data(), st1.data(), C, K);
    st2 = st1;
    ConvStep(packed.data(), st1.data(), st1.data(), x.data(), u.data(), C, K);
    ConvStepReference(packed.data(), st2.data(), st2.data(), x.data(), u_ref.data(), C, K);
    RC_ASSERT(st1 == st2);  // the state update is a copy: exact
    ConvStateToTrace(st1.data(), trace.data(), C, K);
    for (size_t i = 0; i + C < state.size(); ++i) RC_ASSERT(trace[i] == state[i + C]);
    for (size_t c = 0; c < C && K > 1; ++c) RC_ASSERT(trace[(K - 2) * C + c] == x[c]);
    for (size_t c = 0; c < C; ++c) {
      if (!(std::fabs(u[c] - u_ref[c]) <= kConvTolerance * (1 + std::fabs(u_ref[c])))) {
        RC_FAIL("conv target " + target + " channel " + std::to_string(c) + ": expected " +
                std::to_string(u_ref[c]) + " got " + std::to_string(u[c]));
      }
    }
    // Several tokens of the recurrence from a random state.
    const GatedDeltaShape d = s.Delta();
    const size_t hk = d.key_heads * d.dk;
    // S_ref in trace order for the reference, S the same state in the
    // Highway kernel's order (kernels/gated_delta.h).
    std::vector<float> S_ref(s.RecurrentFloats()), S(S_ref.size()), S_trace(S_ref.size());
    v.Fill(S_ref.data(), S_ref.size());
    GatedDeltaStateFromTrace(S_ref.data(), S.data(), d);
    const int steps = *rc::gen::inRange(1, 5);
    for (int t = 0; t < steps; ++t) {
      std::vector<float> qr(hk), kr(hk), q(hk), k(hk), q_ref(hk), k_ref(hk);
      std::vector<float> vv(d.value_heads * d.dv), y(vv.size()), y_ref(vv.size());
      v.Fill(qr.data(), hk);
      v.Fill(kr.data(), hk);
      v.Fill(vv.data(), vv.size());
      const Token tok = MakeToken(s, Mix(seed + t));
      PrepareQueryKey(qr.data(), kr.data(), q.data(), k.data(), d);
      PrepareQueryKeyReference(qr.data(), kr.data(), q_ref.data(), k_ref.data(), d);
      GatedDeltaStep(S.data(), S.data(), q.data(), k.data(), vv.data(), tok.gate.data(),
                     tok.beta.data(), y.data(), d);
      GatedDeltaStepReference(S_ref.data(), S_ref.data(), q_ref.data(), k_ref.data(),
                              vv.data(), tok.gate.data(), tok.beta.data(), y_ref.data(), d);
      for (size_t i = 0; i < y.size(); ++i) {
        if (!(std::fabs(y[i] - y_ref[i]) <= kGatedDeltaTolerance * (1 + std::fabs(y_ref[i])))) {
          RC_FAIL("gated delta target " + target + " y lane " + std::to_string(i) +
                  ": expected " + std::to_string(y_ref[i]) + " got " + std::to_string(y[i]));
        }
      }
      GatedDeltaStateToTrace(S.data(), S_trace.data(), d);
      for (size_t i = 0; i < S.size(); ++i) {
        if (!(std::fabs(S_trace[i] - S_ref[i]) <=
              kGatedDeltaTolerance * (1 + std::fabs(S_ref[i])))) {
          RC_FAIL("gated delta target " + target + " state lane " + std::to_string(i) +
                  " (trace order): expected " + std::to_string(S_ref[i]) + " got " +
                  std::to_string(S_trace[i]));
        }
      }
    }
  });
}

KVSPEC_FOR_EACH_TARGET(SsmTargets);

}  // namespace
}  // namespace kvspec

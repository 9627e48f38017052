// Unit tests of the gated delta kernel (kernels/gated_delta.h):
//
// - the state order conversions are inverses, with the documented tiled
//   indexing, and the kernel-order reference is the trace-order reference,
//   bit for bit;
// - per Highway target, GatedDeltaStep (kernel order) stays within
//   kGatedDeltaTolerance of the scalar reference (trace order) over many
//   tokens, for dk and dv not multiples of the lanes or the column blocks,
//   dk wider than the kernel's row chunk, both gate kinds;
// - a head's result does not depend on which heads are processed with it:
//   any split of the heads (whole key-head groups) into separate calls gives
//   the same bytes as one call (what a split across threads relies on),
//   and a pool of 1-4 threads gives the bytes of the calling thread alone;
// - same inputs, same bits: in place and out of place.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvspec/kernels/gated_delta.h"
#include "kvspec/kernels/thread_pool.h"
#include "kvspec/kernels/test_random.h"
#include "kvspec/testing/target_params.h"

namespace kvspec {
namespace {

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
  static const size_t kDks[] = {1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 100, 128, 130, 257};
  s.dk = r->Int(0, 3) == 0 ? r->Int(1, 140) : kDks[r->Int(0, sizeof(kDks) / sizeof(kDks[0]) - 1)];
  static const size_t kDvs[] = {1, 5, 15, 16, 17, 31, 32, 33, 63, 64, 65, 128, 129, 130};
  s.dv = r->Int(0, 3) == 0 ? r->Int(1, 21) : kDvs[r->Int(0, sizeof(kDvs) / sizeof(kDvs[0]) - 1)];
  s.gate_per_lane = r->Int(0, 2) == 0;
  return s;
}

std::string Describe(const GatedDeltaShape& s) {
  return "Hv=" + std::to_string(s.value_heads) + " Hk=" + std::to_string(s.key_heads) +
         " dk=" + std::to_string(s.dk) + " dv=" + std::to_string(s.dv) +
         (s.gate_per_lane ? " per-lane gate" : " per-head gate");
}

// Where kernel order puts S[h][i][j], counted tile by tile: the heads
// before h, the whole tiles of kGatedDeltaTile columns before i's tile
// (each dk rows of its width), then row j of i's tile.
size_t Tiled(const GatedDeltaShape& s, size_t h, size_t i, size_t j) {
  size_t at = h * s.dv * s.dk;
  size_t c0 = 0;
  for (; c0 + kGatedDeltaTile <= i; c0 += kGatedDeltaTile) at += kGatedDeltaTile * s.dk;
  const size_t width = std::min(kGatedDeltaTile, s.dv - c0);
  return at + j * width + (i - c0);
}

TEST(GatedDeltaOrder, ConversionsTransposeEachTile) {
  Rand r(5);
  for (int trial = 0; trial < 50; ++trial) {
    const GatedDeltaShape s = RandomShape(&r);
    const size_t n = s.value_heads * s.dv * s.dk;
    std::vector<float> trace(n), kernel(n, -1.0f), back(n, -2.0f);
    for (size_t e = 0; e < n; ++e) trace[e] = static_cast<float>(e);
    GatedDeltaStateFromTrace(trace.data(), kernel.data(), s);
    for (size_t h = 0; h < s.value_heads; ++h) {
      for (size_t i = 0; i < s.dv; ++i) {
        for (size_t j = 0; j < s.dk; ++j) {
          ASSERT_EQ(kernel[Tiled(s, h, i, j)], trace[(h * s.dv + i) * s.dk + j])
              << Describe(s);
          ASSERT_EQ(GatedDeltaKernelIndex(s, h, i, j), Tiled(s, h, i, j));
        }
      }
    }
    GatedDeltaStateToTrace(kernel.data(), back.data(), s);
    ASSERT_EQ(trace, back) << Describe(s);
  }
}

TEST(GatedDeltaOrder, KernelOrderReferenceIsTheReference) {
  Rand r(6);
  for (int trial = 0; trial < 60; ++trial) {
    const GatedDeltaShape s = RandomShape(&r);
    const size_t n = s.value_heads * s.dv * s.dk;
    std::vector<float> trace(n), kernel(n), as_trace(n);
    r.Fill(&trace, -1, 1);
    GatedDeltaStateFromTrace(trace.data(), kernel.data(), s);
    for (int t = 0; t < 3; ++t) {
      const DeltaToken tok = MakeDeltaToken(s, &r);
      std::vector<float> y(s.value_heads * s.dv, 1.0f), y_kernel(y.size(), -1.0f);
      GatedDeltaStepReference(trace.data(), trace.data(), tok.q.data(), tok.k.data(),
                              tok.v.data(), tok.g.data(), tok.beta.data(), y.data(), s);
      GatedDeltaStepReferenceKernelOrder(kernel.data(), kernel.data(), tok.q.data(),
                                         tok.k.data(), tok.v.data(), tok.g.data(),
                                         tok.beta.data(), y_kernel.data(), s);
      GatedDeltaStateToTrace(kernel.data(), as_trace.data(), s);
      ASSERT_EQ(0, std::memcmp(y.data(), y_kernel.data(), y.size() * sizeof(float)))
          << Describe(s);
      ASSERT_EQ(0, std::memcmp(trace.data(), as_trace.data(), n * sizeof(float)))
          << Describe(s);
    }
  }
}

class GatedDeltaTargets : public ::testing::TestWithParam<int64_t> {};

TEST_P(GatedDeltaTargets, WithinToleranceOfReference) {
  testing::TargetScope scope(GetParam());
  Rand r(99);
  for (int trial = 0; trial < 80; ++trial) {
    const GatedDeltaShape s = RandomShape(&r);
    const size_t n = s.value_heads * s.dv * s.dk;
    std::vector<float> ref(n), state(n), as_trace(n);
    r.Fill(&ref, -1, 1);
    GatedDeltaStateFromTrace(ref.data(), state.data(), s);
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
      GatedDeltaStateToTrace(state.data(), as_trace.data(), s);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_LE(std::fabs(as_trace[i] - ref[i]), kGatedDeltaTolerance * (1 + std::fabs(ref[i])))
            << Describe(s) << " token " << t << " state (trace order) " << i;
      }
    }
  }
}

// Runs of whole key-head groups as their own calls.
TEST_P(GatedDeltaTargets, HeadsDoNotDependOnGrouping) {
  testing::TargetScope scope(GetParam());
  Rand r(4321);
  for (int trial = 0; trial < 100; ++trial) {
    GatedDeltaShape s = RandomShape(&r);
    s.key_heads = r.Int(1, 4);
    s.value_heads = s.key_heads * r.Int(1, 3);
    const size_t group = s.value_heads / s.key_heads;
    const size_t head = s.dv * s.dk;
    const size_t n = s.value_heads * head;
    std::vector<float> whole(n);
    r.Fill(&whole, -1, 1);
    std::vector<float> pieces = whole;
    for (int t = 0; t < 3; ++t) {
      const DeltaToken tok = MakeDeltaToken(s, &r);
      std::vector<float> y(s.value_heads * s.dv), y_pieces(y.size());
      GatedDeltaStep(whole.data(), whole.data(), tok.q.data(), tok.k.data(), tok.v.data(),
                     tok.g.data(), tok.beta.data(), y.data(), s);
      for (size_t k0 = 0; k0 < s.key_heads;) {
        const size_t k1 = std::min(s.key_heads, k0 + r.Int(1, 3));
        GatedDeltaShape part = s;
        part.key_heads = k1 - k0;
        part.value_heads = part.key_heads * group;
        const size_t h0 = k0 * group;
        float* st = pieces.data() + h0 * head;
        GatedDeltaStep(st, st, tok.q.data() + k0 * s.dk, tok.k.data() + k0 * s.dk,
                       tok.v.data() + h0 * s.dv,
                       tok.g.data() + (s.gate_per_lane ? h0 * s.dk : h0), tok.beta.data() + h0,
                       y_pieces.data() + h0 * s.dv, part);
        k0 = k1;
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

// On a pool of 1, 2, 3 or 4 threads (each value head a task): the same
// states and outputs, byte for byte, as on the calling thread alone, over
// several tokens, in place and out of place.
TEST_P(GatedDeltaTargets, ThreadsGiveTheSameBits) {
  testing::TargetScope scope(GetParam());
  Rand r(2468);
  ThreadPool pool1(1), pool2(2), pool3(3), pool4(4);
  ThreadPool* const pools[] = {&pool1, &pool2, &pool3, &pool4};
  for (int trial = 0; trial < 40; ++trial) {
    GatedDeltaShape s = RandomShape(&r);
    s.key_heads = r.Int(1, 4);
    s.value_heads = s.key_heads * r.Int(1, 4);
    const size_t n = s.value_heads * s.dv * s.dk;
    std::vector<float> alone(n);
    r.Fill(&alone, -1, 1);
    std::vector<std::vector<float>> threaded(4, alone);
    for (int t = 0; t < 3; ++t) {
      const DeltaToken tok = MakeDeltaToken(s, &r);
      std::vector<float> y(s.value_heads * s.dv);
      GatedDeltaStep(alone.data(), alone.data(), tok.q.data(), tok.k.data(), tok.v.data(),
                     tok.g.data(), tok.beta.data(), y.data(), s);
      for (size_t p = 0; p < 4; ++p) {
        std::vector<float> next(n), yp(y.size(), -5.0f);
        GatedDeltaStep(threaded[p].data(), t % 2 == 0 ? next.data() : threaded[p].data(),
                       tok.q.data(), tok.k.data(), tok.v.data(), tok.g.data(), tok.beta.data(),
                       yp.data(), s, pools[p]);
        if (t % 2 == 0) threaded[p] = next;
        ASSERT_EQ(0, std::memcmp(y.data(), yp.data(), y.size() * sizeof(float)))
            << Describe(s) << " on " << pools[p]->threads() << " threads";
        ASSERT_EQ(0, std::memcmp(alone.data(), threaded[p].data(), n * sizeof(float)))
            << Describe(s) << " on " << pools[p]->threads() << " threads";
      }
    }
  }
}

KVSPEC_FOR_EACH_TARGET(GatedDeltaTargets);

}  // namespace
}  // namespace kvspec

// The Highway attention kernel against its scalar reference, on every
// Highway target compiled in and supported here (test names end in the
// target: AttentionTargets/Targets.*/AVX2).
//
// Shapes cover dims 1..160 (partial vectors), GQA groups, rows with masks of
// every kind (empty, one slot, sliding ranges, holes), and slots the mask
// does not admit hold NaN and infinities: they must contribute nothing.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kvspec/kernels/attention.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/mask_builder.h"
#include "kvspec/trace/values.h"
#include "kvspec/testing/target_params.h"

namespace kvspec {
namespace {

class AttentionTargets : public ::testing::TestWithParam<int64_t> {};

TEST_P(AttentionTargets, DispatchesToTheRequestedTarget) {
  testing::TargetScope scope(GetParam());
  EXPECT_STREQ(AttentionTargetName(), hwy::TargetName(GetParam()));
}

TEST_P(AttentionTargets, MatchesScalarReference) {
  testing::TargetScope scope(GetParam());
  const std::string target = hwy::TargetName(GetParam());
  const bool ok = rc::check("attention " + target + " vs scalar reference", [&] {
    const int rows = *rc::gen::inRange(1, 4);
    const int kv_heads = *rc::gen::inRange(1, 4);
    const int group = *rc::gen::inRange(1, 7);  // the kernel takes 4 query heads at a time
    const int q_heads = kv_heads * group;
    const int dim = *rc::gen::oneOf(rc::gen::inRange(1, 34), rc::gen::element(64, 128, 160));
    // Mostly a few slots; one case in four enough for several key/value
    // blocks (8-16 KiB each), so accumulators carry over between blocks.
    const int32_t slots = *rc::gen::weightedOneOf<int32_t>(
        {{3, rc::gen::inRange<int32_t>(0, 70)}, {1, rc::gen::inRange<int32_t>(70, 400)}});
    // Mostly a few queries; one case in eight a forward of more than one
    // tile of queries (Attend takes them 32 at a time).
    const int32_t queries = *rc::gen::weightedOneOf<int32_t>(
        {{7, rc::gen::inRange<int32_t>(1, 5)}, {1, rc::gen::inRange<int32_t>(30, 80)}});
    const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
    const bool bf16 = *rc::gen::arbitrary<bool>();
    const int32_t first_slot = slots == 0 ? 0 : *rc::gen::inRange<int32_t>(0, slots);
    RC_TAG(dim % 16 == 0 ? "whole vectors" : "partial vectors");
    RC_TAG(queries > 32 ? "several query tiles" : "one query tile");
    RC_TAG(bf16 ? "bf16 storage" : "fp32 storage");
    RC_TAG(slots >= 70 ? "several blocks" : "few slots");

    // Storage [rows][kv_heads][slots][dim]; slot positions with holes.
    const size_t cap = static_cast<size_t>(slots) + 1;
    std::vector<float> k(rows * kv_heads * cap * dim), v(k.size());
    ValueStream stream(seed);
    stream.Fill(k.data(), k.size());
    stream.Fill(v.data(), v.size());
    std::vector<int32_t> pos(rows * cap, -1);
    for (int r = 0; r < rows; ++r) {
      int32_t next = 0;
      for (int32_t s = 0; s < slots; ++s) {
        pos[r * cap + s] = *rc::gen::inRange(0, 5) == 0 ? -1 : next++;
      }
    }
    Mask mask;
    mask.rows = rows;
    mask.queries = queries;
    mask.slot_pos = pos.data();
    mask.slot_stride = cap;
    mask.slots = slots;
    mask.first_slot = first_slot;
    for (int r = 0; r < rows; ++r) {
      for (int32_t q = 0; q < queries; ++q) {
        const int32_t hi = *rc::gen::inRange<int32_t>(-1, slots + 1);
        const int32_t lo = *rc::gen::inRange<int32_t>(0, std::max(hi, 0) + 2);
        mask.query_pos.push_back(hi);
        mask.lo.push_back(lo);
        mask.hi.push_back(hi);
      }
    }
    // Poison every slot no query of its row admits.
    const float poison[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(), -3e38f};
    for (int r = 0; r < rows; ++r) {
      for (int32_t s = 0; s < slots; ++s) {
        bool admitted = false;
        for (int32_t q = 0; q < queries; ++q) admitted = admitted || mask.Admits(r, q, s);
        if (admitted) continue;
        for (int h = 0; h < kv_heads; ++h) {
          for (int i = 0; i < dim; ++i) {
            const size_t at = ((r * kv_heads + h) * cap + s) * dim + i;
            k[at] = poison[(s + i) % 3];
            v[at] = poison[(s + i + 1) % 3];
          }
        }
      }
    }
    KvView view = KvView::Dense(k.data(), v.data(), pos.data(), rows, kv_heads, dim,
                                static_cast<int32_t>(cap), first_slot);
    view.slots = slots;
    std::vector<uint16_t> k16, v16;
    if (bf16) {
      for (float x : k) k16.push_back(FloatToBf16(x));
      for (float x : v) v16.push_back(FloatToBf16(x));
      view.k_bf16 = k16.data();
      view.v_bf16 = v16.data();
    }

    std::vector<float> q(static_cast<size_t>(rows) * queries * q_heads * dim);
    stream.Fill(q.data(), q.size());
    std::vector<float> got(q.size(), -1.0f), want(q.size(), -2.0f);
    Attend(q.data(), q_heads, view, mask, got.data());
    AttendReference(q.data(), q_heads, view, mask, want.data());
    for (size_t i = 0; i < got.size(); ++i) {
      if (!(std::fabs(got[i] - want[i]) <= kAttentionTolerance * (1.0f + std::fabs(want[i])))) {
        RC_FAIL("target " + target + " lane " + std::to_string(i) + " (dim " +
                std::to_string(dim) + "): expected " + std::to_string(want[i]) + " got " +
                std::to_string(got[i]));
      }
    }
    // Each query alone (a decode-sized forward, other blocks and no other
    // queries in its tile) gets the bits it got in the whole forward.
    const size_t per_query = static_cast<size_t>(q_heads) * dim;
    for (int32_t qi = 0; qi < queries; ++qi) {
      Mask one = mask;
      one.queries = 1;
      one.query_pos.clear();
      one.lo.clear();
      one.hi.clear();
      std::vector<float> q1(static_cast<size_t>(rows) * per_query), out1(q1.size(), -3.0f);
      for (int r = 0; r < rows; ++r) {
        const size_t rq = static_cast<size_t>(r) * queries + qi;
        one.query_pos.push_back(mask.query_pos[rq]);
        one.lo.push_back(mask.lo[rq]);
        one.hi.push_back(mask.hi[rq]);
        std::copy_n(q.data() + rq * per_query, per_query, q1.data() + r * per_query);
      }
      Attend(q1.data(), q_heads, view, one, out1.data());
      for (int r = 0; r < rows; ++r) {
        const size_t rq = static_cast<size_t>(r) * queries + qi;
        if (std::memcmp(out1.data() + r * per_query, got.data() + rq * per_query,
                        per_query * sizeof(float)) != 0) {
          RC_FAIL("target " + target + ": query " + std::to_string(qi) + " of row " +
                  std::to_string(r) + " alone differs from the same query in a forward of " +
                  std::to_string(queries));
        }
      }
    }
  });
  EXPECT_TRUE(ok);
}

// Layout invariance: a row's output is bit-identical wherever its tokens
// sit: alone in a fresh cache, or in a batch whose other rows hold anything,
// with pad holes (holding garbage) between its own tokens, in a ring at any
// phase, in fp32 or bf16 storage.
TEST_P(AttentionTargets, OutputDoesNotDependOnLayout) {
  testing::TargetScope scope(GetParam());
  const std::string target = hwy::TargetName(GetParam());
  const bool ok = rc::check("attention " + target + " layout invariance", [&] {
    const int kv_heads = *rc::gen::inRange(1, 4);
    const int group = *rc::gen::inRange(1, 6);
    const int q_heads = kv_heads * group;
    const int dim = *rc::gen::oneOf(rc::gen::inRange(1, 34), rc::gen::element(64, 128));
    const int32_t n = *rc::gen::inRange<int32_t>(0, 90);  // the row's tokens
    const int32_t queries = *rc::gen::inRange<int32_t>(1, 4);
    const int rows = *rc::gen::inRange(1, 5);
    const int row = *rc::gen::inRange(0, rows);  // where the row sits in the batch
    const int32_t holes = *rc::gen::inRange<int32_t>(0, n + 6);
    const int32_t cap = n + holes;
    const int32_t phase = cap == 0 ? 0 : *rc::gen::inRange<int32_t>(0, cap);
    const bool bf16 = *rc::gen::arbitrary<bool>();
    ValueStream stream(*rc::gen::arbitrary<uint64_t>());
    RC_TAG(bf16 ? "bf16 storage" : "fp32 storage");

    std::vector<float> tk(static_cast<size_t>(kv_heads) * n * dim), tv(tk.size());
    stream.Fill(tk.data(), tk.size());
    stream.Fill(tv.data(), tv.size());
    std::vector<float> q(static_cast<size_t>(queries) * q_heads * dim);
    stream.Fill(q.data(), q.size());
    std::vector<int32_t> lo(static_cast<size_t>(queries)), hi(lo.size());
    for (int32_t i = 0; i < queries; ++i) {
      hi[i] = *rc::gen::inRange<int32_t>(-1, n + 1);
      lo[i] = *rc::gen::inRange<int32_t>(0, std::max(hi[i], 0) + 2);
    }

    // Runs attention over storage [rows][kv_heads][c][dim] and returns the
    // output of row `at`.
    const auto run = [&](int nrows, int at, int32_t c, int32_t first, std::vector<float>& k,
                         std::vector<float>& v, std::vector<int32_t>& pos,
                         std::vector<float>& qs, const std::vector<int32_t>& mlo,
                         const std::vector<int32_t>& mhi) {
      std::vector<uint16_t> k16, v16;
      KvView view =
          KvView::Dense(k.data(), v.data(), pos.data(), nrows, kv_heads, dim, c, first);
      if (bf16) {
        for (float x : k) k16.push_back(FloatToBf16(x));
        for (float x : v) v16.push_back(FloatToBf16(x));
        view.k_bf16 = k16.data();
        view.v_bf16 = v16.data();
      }
      Mask mask;
      mask.rows = nrows;
      mask.queries = queries;
      mask.slot_pos = pos.data();
      mask.slot_stride = static_cast<size_t>(c);
      mask.slots = c;
      mask.first_slot = first;
      mask.lo = mlo;
      mask.hi = mhi;
      mask.query_pos = mhi;
      std::vector<float> out(static_cast<size_t>(nrows) * queries * q_heads * dim, -7.0f);
      Attend(qs.data(), q_heads, view, mask, out.data());
      const size_t per_row = static_cast<size_t>(queries) * q_heads * dim;
      return std::vector<float>(out.begin() + at * per_row, out.begin() + (at + 1) * per_row);
    };

    // Alone: token t in slot t.
    std::vector<float> k1 = tk, v1 = tv;
    std::vector<int32_t> pos1(static_cast<size_t>(n));
    for (int32_t t = 0; t < n; ++t) pos1[t] = t;
    std::vector<float> q1 = q;
    const std::vector<float> alone = run(1, 0, n, 0, k1, v1, pos1, q1, lo, hi);

    // In a batch: the row's tokens in logical order with holes between
    // them, logical index l in physical slot (phase + l) % cap; every other
    // slot (holes, other rows) holds garbage and any position.
    std::vector<float> k2(static_cast<size_t>(rows) * kv_heads * cap * dim);
    std::vector<float> v2(k2.size());
    const float garbage[] = {std::numeric_limits<float>::quiet_NaN(),
                             std::numeric_limits<float>::infinity(), -3e38f, 1e30f, 0.5f};
    for (size_t i = 0; i < k2.size(); ++i) {
      k2[i] = garbage[*rc::gen::inRange(0, 5)];
      v2[i] = garbage[(i * 7) % 5];
    }
    std::vector<int32_t> pos2(static_cast<size_t>(rows) * cap);
    for (int r = 0; r < rows; ++r) {
      for (int32_t s = 0; s < cap; ++s) pos2[r * cap + s] = *rc::gen::inRange<int32_t>(-1, 100);
    }
    std::vector<bool> is_hole(static_cast<size_t>(cap), false);
    for (int32_t h = 0; h < holes; ++h) is_hole[h] = true;
    for (int32_t l = cap - 1; l > 0; --l) {  // shuffle holes among tokens
      const int32_t o = *rc::gen::inRange<int32_t>(0, l + 1);
      const bool t = is_hole[l];
      is_hole[l] = is_hole[o];
      is_hole[o] = t;
    }
    int32_t token = 0;
    for (int32_t l = 0; l < cap; ++l) {
      const int32_t s = (phase + l) % cap;
      if (is_hole[l]) {
        pos2[row * cap + s] = -1;
        continue;
      }
      pos2[row * cap + s] = token;
      for (int h = 0; h < kv_heads; ++h) {
        for (int i = 0; i < dim; ++i) {
          const size_t src = (static_cast<size_t>(h) * n + token) * dim + i;
          const size_t dst = ((static_cast<size_t>(row) * kv_heads + h) * cap + s) * dim + i;
          k2[dst] = tk[src];
          v2[dst] = tv[src];
        }
      }
      ++token;
    }
    std::vector<float> q2(static_cast<size_t>(rows) * q.size());
    stream.Fill(q2.data(), q2.size());
    std::copy(q.begin(), q.end(), q2.begin() + row * q.size());
    std::vector<int32_t> lo2, hi2;
    for (int r = 0; r < rows; ++r) {
      for (int32_t i = 0; i < queries; ++i) {
        lo2.push_back(r == row ? lo[i] : *rc::gen::inRange<int32_t>(0, 50));
        hi2.push_back(r == row ? hi[i] : *rc::gen::inRange<int32_t>(-1, 100));
      }
    }
    const std::vector<float> placed = run(rows, row, cap, phase, k2, v2, pos2, q2, lo2, hi2);
    RC_ASSERT(alone.size() == placed.size());
    RC_ASSERT(std::memcmp(alone.data(), placed.data(), alone.size() * sizeof(float)) == 0);
  });
  EXPECT_TRUE(ok);
}

KVSPEC_FOR_EACH_TARGET(AttentionTargets);

}  // namespace
}  // namespace kvspec

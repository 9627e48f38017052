// Unit tests of the attention kernel (kernels/attention.h) over q8_0 and
// q4_0 storage (kernels/kv_blocks.h), per Highway target:
// - Attend within kAttentionTolerance of AttendReference for decodes and
//   window forwards (with and without a window, pad queries, more queries
//   than a tile), grouped-query heads, ring phases, empty slots whose
//   blocks hold NaN scales (never read), slot counts crossing the kernel's
//   blocks, dims 32..160, views starting 0..3 blocks into their buffers;
// - bit for bit the fp32 kernel over the blocks' values (dequantization is
//   exact), so the fp32 kernel's layout independence carries over; and the
//   same directly: one row's tokens at other ring phases and paddings;
// - flash-decoding (AttendOptions): bit-identical on 1..4 threads and
//   within tolerance;
// - an abort for a q8_0 or q4_0 view whose dim is not a multiple of 32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "kvspec/kernels/attention.h"
#include "kvspec/kernels/kv_view.h"
#include "kvspec/kernels/mask.h"
#include "kvspec/kernels/quantize.h"
#include "kvspec/kernels/test_mask.h"
#include "kvspec/kernels/test_random.h"
#include "kvspec/kernels/thread_pool.h"
#include "kvspec/testing/target_params.h"

namespace kvspec {
namespace {

using kernel_test::Rand;

struct QuantCase {
  KvType type = KvType::kQ8_0;
  int rows = 1;
  int kv_heads = 1;
  int group = 1;
  int dim = 32;
  int32_t slots = 0;
  int32_t queries = 1;
  int32_t window = kNoWindow;
  int32_t first_slot = 0;
  int misalign = 0;   // blocks off the buffers' start
  int pad_every = 0;  // every pad_every-th query is a pad query (0: none)

  std::string Describe() const {
    std::ostringstream s;
    s << KvTypeName(type) << " rows=" << rows << " kv_heads=" << kv_heads
      << " q_heads=" << kv_heads * group << " dim=" << dim << " slots=" << slots
      << " queries=" << queries << " window=" << window << " first_slot=" << first_slot
      << " misalign=" << misalign << " pad_every=" << pad_every;
    return s.str();
  }
};

// The stored blocks, their values as fp32 (a view of each), the positions
// and the mask.
struct QuantInputs {
  std::vector<BlockQ8_0> k8, v8;
  std::vector<BlockQ4_0> k4, v4;
  std::vector<float> kf, vf, q;
  std::vector<int32_t> pos;
  KvView kv;       // over the blocks
  KvView kv_f32;   // over their values
  Mask mask;
};

template <typename Block>
void StoreAll(const QuantCase& c, const std::vector<float>& x, std::vector<Block>* blocks,
              std::vector<float>* values) {
  const size_t per_row = static_cast<size_t>(c.dim) / 32;
  const size_t rows_total = x.size() / c.dim;
  blocks->resize(rows_total * per_row + c.misalign);
  values->assign(x.size(), 0.0f);
  Block* out = blocks->data() + c.misalign;
  for (size_t i = 0; i < rows_total; ++i) {
    const float* xi = x.data() + i * c.dim;
    if (std::isnan(xi[0])) {  // an empty slot: garbage with a NaN scale
      for (size_t b = 0; b < per_row; ++b) {
        std::memset(&out[i * per_row + b], 0x5A, sizeof(Block));
        out[i * per_row + b].d = 0x7E00;
      }
      std::fill(values->begin() + i * c.dim, values->begin() + (i + 1) * c.dim, NAN);
      continue;
    }
    ASSERT_TRUE(StoreKvRow(c.type, xi, c.dim, out + i * per_row).ok());
    LoadKvRow(c.type, out + i * per_row, c.dim, values->data() + i * c.dim);
  }
}

void FillInputs(const QuantCase& c, Rand* r, QuantInputs* in) {
  const size_t head_stride = static_cast<size_t>(c.slots) * c.dim;
  const size_t row_stride = c.kv_heads * head_stride;
  std::vector<float> k(c.rows * row_stride), v(c.rows * row_stride);
  r->Fill(&k, -1, 1);
  r->Fill(&v, -1, 1);
  in->pos.assign(static_cast<size_t>(c.rows) * c.slots, -1);
  for (int row = 0; row < c.rows; ++row) {
    const int32_t held = c.slots == 0 ? 0 : static_cast<int32_t>(r->Int(c.slots / 2, c.slots));
    const int32_t base = static_cast<int32_t>(r->Int(0, 3));
    for (int32_t t = 0; t < held; ++t) {
      if (r->Int(0, 15) == 0) continue;  // a hole
      in->pos[row * c.slots + (c.first_slot + t) % c.slots] = base + t;
    }
    for (int32_t s = 0; s < c.slots; ++s) {
      if (in->pos[row * c.slots + s] >= 0) continue;
      for (int kh = 0; kh < c.kv_heads; ++kh) {
        const size_t at = row * row_stride + kh * head_stride + s * c.dim;
        std::fill(k.begin() + at, k.begin() + at + c.dim, NAN);
        std::fill(v.begin() + at, v.begin() + at + c.dim, NAN);
      }
    }
  }
  KvView kv;
  kv.head_stride = head_stride;
  kv.row_stride = row_stride;
  kv.rows = c.rows;
  kv.kv_heads = c.kv_heads;
  kv.dim = c.dim;
  kv.slot_pos = in->pos.data();
  kv.slot_stride = c.slots;
  kv.slots = c.slots;
  kv.first_slot = c.first_slot;
  in->kv_f32 = kv;
  if (c.type == KvType::kQ8_0) {
    StoreAll(c, k, &in->k8, &in->kf);
    StoreAll(c, v, &in->v8, &in->vf);
    kv.k_q8_0 = in->k8.data() + c.misalign;
    kv.v_q8_0 = in->v8.data() + c.misalign;
  } else {
    StoreAll(c, k, &in->k4, &in->kf);
    StoreAll(c, v, &in->v4, &in->vf);
    kv.k_q4_0 = in->k4.data() + c.misalign;
    kv.v_q4_0 = in->v4.data() + c.misalign;
  }
  in->kv = kv;
  in->kv_f32.k = in->kf.data();
  in->kv_f32.v = in->vf.data();

  FillTestMask(c.window, c.rows, c.queries, c.slots, c.first_slot, c.pad_every, in->pos.data(), r,
               &in->mask);
  const size_t n = static_cast<size_t>(c.rows) * c.queries;
  in->q.resize(n * c.kv_heads * c.group * c.dim);
  r->Fill(&in->q, -2, 2);
}

// Attend over the blocks: within tolerance of AttendReference over them,
// and bit for bit Attend over their fp32 values; with a chunk, AttendWith
// on 0..4 threads bit for bit the same as alone and within tolerance.
::testing::AssertionResult Check(const QuantCase& c, uint32_t seed, int32_t chunk = 0) {
  Rand r(seed);
  QuantInputs in;
  FillInputs(c, &r, &in);
  const int q_heads = c.kv_heads * c.group;
  const size_t n = static_cast<size_t>(c.rows) * c.queries * q_heads * c.dim;
  std::vector<float> out(n, 777.0f), expected(n, -777.0f), f32(n, 555.0f);
  AttendOptions options;
  options.chunk = chunk;
  AttendWith(in.q.data(), q_heads, in.kv, in.mask, out.data(), options);
  AttendReference(in.q.data(), q_heads, in.kv, in.mask, expected.data());
  AttendWith(in.q.data(), q_heads, in.kv_f32, in.mask, f32.data(), options);
  const std::string where = std::string("target ") + AttentionTargetName() + ", " + c.Describe() +
                            " chunk=" + std::to_string(chunk) + " seed " + std::to_string(seed);
  for (size_t i = 0; i < n; ++i) {
    const float want = expected[i];
    if (std::fabs(out[i] - want) > kAttentionTolerance * (1 + std::fabs(want))) {
      return ::testing::AssertionFailure() << where << ": output " << i << ": expected " << want
                                           << ", actual " << out[i];
    }
    if (std::memcmp(&out[i], &f32[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << where << ": output " << i << ": " << out[i]
                                           << ", fp32 kernel over the same values " << f32[i];
    }
  }
  if (chunk > 0) {
    for (int threads = 1; threads <= 4; ++threads) {
      ThreadPool pool(threads);
      options.pool = &pool;
      std::vector<float> threaded(n, 4.0f);
      AttendWith(in.q.data(), q_heads, in.kv, in.mask, threaded.data(), options);
      if (std::memcmp(threaded.data(), out.data(), n * sizeof(float)) != 0) {
        return ::testing::AssertionFailure() << where << ": differs on " << threads << " threads";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

class AttentionQuantTargets : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { ASSERT_STREQ(hwy::TargetName(GetParam()), AttentionTargetName()); }
  testing::TargetScope scope_{GetParam()};
};

const KvType kTypes[] = {KvType::kQ8_0, KvType::kQ4_0};

// Slot counts 0..40, every dim of 1..5 blocks, ring phases, windows.
TEST_P(AttentionQuantTargets, DecodeMatchesReference) {
  Rand r(51);
  for (KvType type : kTypes) {
    for (int32_t slots = 0; slots <= 40; ++slots) {
      QuantCase c;
      c.type = type;
      c.rows = 1 + slots % 2;
      c.kv_heads = 1 + slots % 3 / 2;
      c.group = 1 << (slots % 3);
      c.dim = 32 * (1 + slots % 5);
      c.slots = slots;
      c.first_slot = slots == 0 ? 0 : static_cast<int32_t>(r.Int(0, slots - 1));
      c.misalign = static_cast<int>(r.Int(0, 3));
      c.window = r.Int(0, 2) == 0 ? static_cast<int32_t>(r.Int(1, 12)) : kNoWindow;
      ASSERT_TRUE(Check(c, static_cast<uint32_t>(slots)));
    }
  }
}

// Slot counts crossing the kernel's blocks; groups of 4 and 8 (on 512-bit
// targets, a lone query's keys then go in segments from 256 slots).
TEST_P(AttentionQuantTargets, LongDecodeMatchesReference) {
  Rand r(52);
  for (KvType type : kTypes) {
    for (int32_t slots : {64, 129, 600, 2100}) {
      for (int dim : {32, 64, 128}) {
        QuantCase c;
        c.type = type;
        c.kv_heads = 2;
        c.group = 1 << r.Int(0, 3);
        c.dim = dim;
        c.slots = slots;
        c.first_slot = static_cast<int32_t>(r.Int(0, slots - 1));
        c.misalign = static_cast<int>(r.Int(0, 3));
        ASSERT_TRUE(Check(c, static_cast<uint32_t>(slots + dim)));
      }
    }
  }
}

TEST_P(AttentionQuantTargets, WindowMatchesReference) {
  Rand r(53);
  for (KvType type : kTypes) {
    for (int32_t queries : {2, 5, 17, 33, 70}) {
      for (int32_t slots : {1, 40, 300}) {
        QuantCase c;
        c.type = type;
        c.rows = 1 + static_cast<int>(r.Int(0, 1));
        c.kv_heads = 1 + static_cast<int>(r.Int(0, 1));
        c.group = 1 << r.Int(0, 2);
        c.dim = 32 * static_cast<int>(r.Int(1, 4));
        c.slots = slots;
        c.queries = queries;
        c.window = r.Int(0, 1) == 0 ? kNoWindow : static_cast<int32_t>(r.Int(1, slots + 4));
        c.first_slot = static_cast<int32_t>(r.Int(0, slots - 1));
        c.misalign = static_cast<int>(r.Int(0, 3));
        c.pad_every = static_cast<int>(r.Int(0, 4));
        ASSERT_TRUE(Check(c, static_cast<uint32_t>(queries * 1000 + slots)));
      }
    }
  }
}

// Flash-decoding chunks over decodes (and a window whose last tile holds
// one query), on 1..4 threads.
TEST_P(AttentionQuantTargets, ChunkedDecodeIsBitIdenticalOnAnyThreadCount) {
  Rand r(54);
  for (int trial = 0; trial < 16; ++trial) {
    QuantCase c;
    c.type = kTypes[trial % 2];
    c.rows = static_cast<int>(r.Int(1, 2));
    c.kv_heads = static_cast<int>(r.Int(1, 2));
    c.group = static_cast<int>(r.Int(1, 5));
    c.dim = 32 * static_cast<int>(r.Int(1, 4));
    c.slots = static_cast<int32_t>(r.Int(100, 700));
    c.queries = trial % 4 == 3 ? 33 : 1;
    c.window = r.Int(0, 3) == 0 ? static_cast<int32_t>(r.Int(1, 400)) : kNoWindow;
    c.first_slot = static_cast<int32_t>(r.Int(0, c.slots - 1));
    c.misalign = static_cast<int>(r.Int(0, 3));
    const int32_t chunk = kAttendChunkMultiple * static_cast<int32_t>(r.Int(1, 3));
    ASSERT_TRUE(Check(c, static_cast<uint32_t>(trial), chunk));
  }
}

// One row's tokens (positions 0..held-1) in rings of several sizes and
// phases, with or without left padding (empty slots before them): every
// placement gives the same bits, decode and chunked decode.
TEST_P(AttentionQuantTargets, OutputDoesNotDependOnLayout) {
  constexpr int kDim = 64, kHeld = 300, kGroup = 4;
  Rand r(55);
  std::vector<float> k(kHeld * kDim), v(kHeld * kDim), q(kGroup * kDim);
  r.Fill(&k, -1, 1);
  r.Fill(&v, -1, 1);
  r.Fill(&q, -2, 2);
  for (KvType type : kTypes) {
    for (int32_t chunk : {0, 128}) {
      std::vector<float> first;
      for (int32_t slots : {kHeld, kHeld + 5, kHeld + 64}) {
        for (int32_t phase : {0, 1, 77, slots - 1}) {
          // Token t at slot (phase + t) % slots; the rest empty.
          std::vector<int32_t> pos(slots, -1);
          std::vector<BlockQ8_0> k8(slots * kDim / 32), v8(slots * kDim / 32);
          std::vector<BlockQ4_0> k4(slots * kDim / 32), v4(slots * kDim / 32);
          for (int32_t t = 0; t < kHeld; ++t) {
            const int32_t s = (phase + t) % slots;
            pos[s] = t;
            const size_t b = static_cast<size_t>(s) * kDim / 32;
            void* kd = type == KvType::kQ8_0 ? static_cast<void*>(&k8[b]) : &k4[b];
            void* vd = type == KvType::kQ8_0 ? static_cast<void*>(&v8[b]) : &v4[b];
            ASSERT_TRUE(StoreKvRow(type, &k[t * kDim], kDim, kd).ok());
            ASSERT_TRUE(StoreKvRow(type, &v[t * kDim], kDim, vd).ok());
          }
          KvView kv = KvView::Dense(nullptr, nullptr, pos.data(), 1, 1, kDim, slots, phase);
          if (type == KvType::kQ8_0) {
            kv.k_q8_0 = k8.data();
            kv.v_q8_0 = v8.data();
          } else {
            kv.k_q4_0 = k4.data();
            kv.v_q4_0 = v4.data();
          }
          Mask mask;
          mask.rows = mask.queries = 1;
          mask.slot_pos = pos.data();
          mask.slot_stride = mask.slots = slots;
          mask.first_slot = phase;
          mask.query_pos = {kHeld - 1};
          mask.lo = {0};
          mask.hi = {kHeld - 1};
          AttendOptions options;
          options.chunk = chunk;
          std::vector<float> out(kGroup * kDim);
          AttendWith(q.data(), kGroup, kv, mask, out.data(), options);
          if (first.empty()) {
            first = out;
            continue;
          }
          ASSERT_EQ(0, std::memcmp(first.data(), out.data(), out.size() * sizeof(float)))
              << "target " << AttentionTargetName() << " " << KvTypeName(type) << " chunk "
              << chunk << " slots " << slots << " phase " << phase;
        }
      }
    }
  }
}

KVSPEC_FOR_EACH_TARGET(AttentionQuantTargets);

TEST(AttentionQuantDeathTest, DimNotAMultipleOf32Aborts) {
  std::vector<BlockQ8_0> blocks(4);
  std::vector<int32_t> pos = {0, 1};
  KvView kv = KvView::Dense(nullptr, nullptr, pos.data(), 1, 1, 48, 2, 0);
  kv.k_q8_0 = kv.v_q8_0 = blocks.data();
  Mask mask;
  mask.rows = mask.queries = 1;
  mask.slot_pos = pos.data();
  mask.slot_stride = mask.slots = 2;
  mask.query_pos = {1};
  mask.lo = {0};
  mask.hi = {1};
  std::vector<float> q(48), out(48);
  EXPECT_DEATH(Attend(q.data(), 1, kv, mask, out.data()), "q8_0 needs a dim that is a positive multiple of 32");
}

}  // namespace
}  // namespace kvspec

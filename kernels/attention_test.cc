// Unit tests of the attention kernel (kernels/attention.h), per Highway
// target: Attend stays within kAttentionTolerance of AttendReference over
// small shapes, in the manner of gemma.cpp's kernel tests:
//
// - decode (one query) and window forwards (several queries, with and
//   without a window, pad queries among them, more queries than a tile);
// - grouped-query attention, q_heads = 1, 2, 4 x kv_heads, every head with
//   its own data, so a query head reading another head's keys or values,
//   or writing another's output, shows;
// - fp32 and bf16 views, ring phases first_slot != 0, empty slots holding
//   NaN (never read), slot counts and dims 0..2N+1 for N up to 16 lanes and
//   larger counts crossing the kernel's blocks, q, keys, values and outputs
//   misaligned by 0..3 floats;
// - flash-decoding (AttendOptions): chunked decodes within tolerance and
//   bit-identical on 1, 2, 3 and 4 threads, chunks counted in admitted
//   slots only, and an abort for a chunk that is not a non-negative
//   multiple of kAttendChunkMultiple;
// - each query of a window forward bit-identical to its decode alone (the
//   kernel's blocks group its slots differently in the two calls).
//
// A failure prints the target, the case, the lane (row, query, head, i),
// the expected (reference) and the actual value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "kvspec/kernels/attention.h"
#include "kvspec/kernels/kv_view.h"
#include "kvspec/kernels/mask.h"
#include "kvspec/kernels/test_mask.h"
#include "kvspec/kernels/test_random.h"
#include "kvspec/kernels/thread_pool.h"
#include "kvspec/testing/target_params.h"

namespace kvspec {
namespace {

using kernel_test::Rand;

// One Attend call's shape.
struct AttentionCase {
  int rows = 1;
  int kv_heads = 1;
  int group = 1;  // query heads per KV head
  int dim = 4;
  int32_t slots = 0;
  int32_t queries = 1;
  int32_t window = kNoWindow;
  bool bf16 = false;
  int32_t first_slot = 0;
  int misalign = 0;   // floats (or bf16 elements) off the allocation's start
  int pad_every = 0;  // every pad_every-th query is a pad query (0: none)
  bool full = false;  // every slot held, no holes (else a random part, holes)

  std::string Describe() const {
    std::ostringstream s;
    s << "rows=" << rows << " kv_heads=" << kv_heads << " q_heads=" << kv_heads * group
      << " dim=" << dim << " slots=" << slots << " queries=" << queries << " window=" << window
      << (bf16 ? " bf16" : " fp32") << " first_slot=" << first_slot << " misalign=" << misalign
      << " pad_every=" << pad_every << (full ? " full" : "");
    return s.str();
  }
};

// Stored keys, values and positions for a case, and the mask over them.
// Logical slot t of a row holds position base + t for t < held (a few held
// slots are left empty, as holes); empty slots hold NaN.
struct AttentionInputs {
  std::vector<float> k, v, q;
  std::vector<uint16_t> k16, v16;
  std::vector<int32_t> pos;
  KvView kv;
  Mask mask;
};

void FillCache(const AttentionCase& c, Rand* r, AttentionInputs* in) {
  const size_t head_stride = static_cast<size_t>(c.slots) * c.dim;
  const size_t row_stride = c.kv_heads * head_stride;
  const size_t n = c.rows * row_stride + c.misalign;
  in->k.resize(n);
  in->v.resize(n);
  r->Fill(&in->k, -1, 1);
  r->Fill(&in->v, -1, 1);
  in->pos.assign(static_cast<size_t>(c.rows) * c.slots, -1);
  for (int row = 0; row < c.rows; ++row) {
    const int32_t held =
        c.slots == 0 || c.full ? c.slots : static_cast<int32_t>(r->Int(c.slots / 2, c.slots));
    const int32_t base = static_cast<int32_t>(r->Int(0, 3));
    for (int32_t t = 0; t < held; ++t) {
      if (!c.full && r->Int(0, 15) == 0) continue;  // a hole
      in->pos[row * c.slots + (c.first_slot + t) % c.slots] = base + t;
    }
    for (int32_t s = 0; s < c.slots; ++s) {
      if (in->pos[row * c.slots + s] >= 0) continue;
      for (int kh = 0; kh < c.kv_heads; ++kh) {
        const size_t at = c.misalign + row * row_stride + kh * head_stride + s * c.dim;
        for (int i = 0; i < c.dim; ++i) in->k[at + i] = in->v[at + i] = NAN;
      }
    }
  }
  in->k16.resize(n);
  in->v16.resize(n);
  for (size_t i = 0; i < n; ++i) {
    in->k16[i] = FloatToBf16(in->k[i]);
    in->v16[i] = FloatToBf16(in->v[i]);
  }
  KvView& kv = in->kv;
  kv.k = in->k.data() + c.misalign;
  kv.v = in->v.data() + c.misalign;
  if (c.bf16) {
    kv.k_bf16 = in->k16.data() + c.misalign;
    kv.v_bf16 = in->v16.data() + c.misalign;
  }
  kv.head_stride = head_stride;
  kv.row_stride = row_stride;
  kv.rows = c.rows;
  kv.kv_heads = c.kv_heads;
  kv.dim = c.dim;
  kv.slot_pos = in->pos.data();
  kv.slot_stride = c.slots;
  kv.slots = c.slots;
  kv.first_slot = c.first_slot;
}

// The mask (kernel_test::FillTestMask) and the queries.
void FillMask(const AttentionCase& c, Rand* r, AttentionInputs* in) {
  FillTestMask(c.window, c.rows, c.queries, c.slots, c.first_slot, c.pad_every, in->pos.data(), r,
               &in->mask);
  const size_t n = static_cast<size_t>(c.rows) * c.queries;
  in->q.resize(n * c.kv_heads * c.group * c.dim + c.misalign);
  r->Fill(&in->q, -2, 2);
}

// Attend against AttendReference on the current target; the first lane out
// of tolerance as a failure.
::testing::AssertionResult MatchesReference(const AttentionCase& c, uint32_t seed) {
  Rand r(seed);
  AttentionInputs in;
  FillCache(c, &r, &in);
  FillMask(c, &r, &in);
  const int q_heads = c.kv_heads * c.group;
  const size_t n = static_cast<size_t>(c.rows) * c.queries * q_heads * c.dim;
  std::vector<float> out(n + c.misalign, 777.0f), expected(n, -777.0f);
  float* actual = out.data() + c.misalign;
  Attend(in.q.data() + c.misalign, q_heads, in.kv, in.mask, actual);
  AttendReference(in.q.data() + c.misalign, q_heads, in.kv, in.mask, expected.data());
  for (size_t i = 0; i < n; ++i) {
    const float want = expected[i];
    if (std::fabs(actual[i] - want) <= kAttentionTolerance * (1 + std::fabs(want))) continue;
    const size_t lane = i % c.dim, head = i / c.dim % q_heads;
    const size_t query = i / c.dim / q_heads % c.queries, row = i / c.dim / q_heads / c.queries;
    return ::testing::AssertionFailure()
           << "target " << AttentionTargetName() << ", " << c.Describe() << " seed " << seed
           << ": row " << row << " query " << query << " head " << head << " lane " << lane
           << ": expected " << want << ", actual " << actual[i];
  }
  return ::testing::AssertionSuccess();
}

class AttentionTargets : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    // The kernel under test is the target's, not the best one's.
    ASSERT_STREQ(hwy::TargetName(GetParam()), AttentionTargetName());
  }
  testing::TargetScope scope_{GetParam()};
};

// Slot counts and dims 0..2N+1 for vectors of up to N = 16 lanes (dim from
// 1), every ring phase of small rings, fp32 and bf16, misalignments.
TEST_P(AttentionTargets, DecodeMatchesReference) {
  Rand r(11);
  for (int32_t slots = 0; slots <= 33; ++slots) {
    for (int dim = 1; dim <= 33; dim += 4) {
      AttentionCase c;
      c.rows = 1 + slots % 2;
      c.kv_heads = 1 + dim % 2;
      c.group = 1 << (slots % 3);
      c.dim = dim + slots % 4;
      c.slots = slots;
      c.bf16 = (slots + dim) % 2 == 1;
      c.first_slot = slots == 0 ? 0 : static_cast<int32_t>(r.Int(0, slots - 1));
      c.misalign = static_cast<int>(r.Int(0, 3));
      c.window = r.Int(0, 2) == 0 ? static_cast<int32_t>(r.Int(1, 12)) : kNoWindow;
      ASSERT_TRUE(MatchesReference(c, static_cast<uint32_t>(slots * 100 + dim)));
    }
  }
}

// Slot counts crossing the kernel's blocks of 8 or 16 KiB of keys.
TEST_P(AttentionTargets, LongDecodeMatchesReference) {
  Rand r(12);
  const int32_t kSlots[] = {64, 129, 600, 2100};
  const int kDims[] = {16, 17, 64, 128};
  for (int32_t slots : kSlots) {
    for (int dim : kDims) {
      for (int bf16 = 0; bf16 < 2; ++bf16) {
        AttentionCase c;
        c.kv_heads = 2;
        c.group = 1 << r.Int(0, 2);
        c.dim = dim;
        c.slots = slots;
        c.bf16 = bf16 == 1;
        c.first_slot = static_cast<int32_t>(r.Int(0, slots - 1));
        c.misalign = static_cast<int>(r.Int(0, 3));
        ASSERT_TRUE(MatchesReference(c, static_cast<uint32_t>(slots + dim + bf16)));
      }
    }
  }
}

// Forwards of several queries, some more than a tile of 32, with and
// without a window, with pad queries.
TEST_P(AttentionTargets, WindowMatchesReference) {
  Rand r(13);
  const int32_t kQueries[] = {2, 3, 5, 8, 17, 32, 33, 70};
  const int32_t kSlots[] = {1, 7, 40, 100, 300};
  for (int32_t queries : kQueries) {
    for (int32_t slots : kSlots) {
      AttentionCase c;
      c.rows = 1 + static_cast<int>(r.Int(0, 1));
      c.kv_heads = 1 + static_cast<int>(r.Int(0, 1));
      c.group = 1 << r.Int(0, 2);
      c.dim = static_cast<int>(r.Int(1, 40));
      c.slots = slots;
      c.queries = queries;
      c.window = r.Int(0, 1) == 0 ? kNoWindow : static_cast<int32_t>(r.Int(1, slots + 4));
      c.bf16 = r.Int(0, 1) == 1;
      c.first_slot = static_cast<int32_t>(r.Int(0, slots - 1));
      c.misalign = static_cast<int>(r.Int(0, 3));
      c.pad_every = static_cast<int>(r.Int(0, 4));
      ASSERT_TRUE(MatchesReference(c, static_cast<uint32_t>(queries * 1000 + slots)));
    }
  }
}

// Whether each query of c's forward (Attend over all of them) got the bits
// it gets alone (Attend over that query only); adds to *compared the
// queries compared.
::testing::AssertionResult QueriesEqualTheirDecodes(const AttentionCase& c, Rand* r,
                                                    int* compared) {
  AttentionInputs in;
  FillCache(c, r, &in);
  FillMask(c, r, &in);
  const int q_heads = c.kv_heads * c.group;
  const size_t per_query = static_cast<size_t>(q_heads) * c.dim;
  std::vector<float> out(static_cast<size_t>(c.rows) * c.queries * per_query);
  Attend(in.q.data(), q_heads, in.kv, in.mask, out.data());
  for (int row = 0; row < c.rows; ++row) {
    // One row's cache as its own view, one query at a time.
    KvView kv = in.kv;
    kv.rows = 1;
    const size_t skip = static_cast<size_t>(row) * kv.row_stride;
    kv.k += skip;
    kv.v += skip;
    if (c.bf16) {
      kv.k_bf16 += skip;
      kv.v_bf16 += skip;
    }
    kv.slot_pos += static_cast<size_t>(row) * kv.slot_stride;
    for (int32_t qi = 0; qi < c.queries; ++qi) {
      const size_t rq = static_cast<size_t>(row) * c.queries + qi;
      Mask one = in.mask;
      one.rows = 1;
      one.queries = 1;
      one.slot_pos = kv.slot_pos;
      one.query_pos = {in.mask.query_pos[rq]};
      one.lo = {in.mask.lo[rq]};
      one.hi = {in.mask.hi[rq]};
      std::vector<float> alone(per_query);
      Attend(in.q.data() + rq * per_query, q_heads, kv, one, alone.data());
      const float* windowed = out.data() + rq * per_query;
      for (size_t i = 0; i < per_query; ++i) {
        if (std::memcmp(&alone[i], &windowed[i], sizeof(float)) == 0) continue;
        return ::testing::AssertionFailure()
               << "target " << AttentionTargetName() << ", " << c.Describe() << ": row " << row
               << " query " << qi << " lane " << i << ": window " << windowed[i] << ", decode "
               << alone[i];
      }
      ++*compared;
    }
  }
  return ::testing::AssertionSuccess();
}

// Each query of a window forward gets the bits its decode alone gets: a
// slot's score and weight do not depend on the block it falls in. A
// window's blocks hold twice a decode's slots, so a query whose admitted
// slots end inside a block has them grouped differently into the kernel's
// 4 x 4, 4 x 3, 4 x 2 and 4 x 1 score blocks in the two calls (with group
// 4), and every reduction must follow the same tree in all of them. Dims
// that are whole vectors on every target (the lane sums without a scalar
// tail) and one with a tail.
TEST_P(AttentionTargets, WindowQueriesEqualTheirDecodesBitForBit) {
  Rand r(17);
  int compared = 0;
  for (int dim : {16, 32, 64, 128, 36}) {
    for (int group : {1, 4}) {
      for (int32_t window : {kNoWindow, 45}) {
        for (int bf16 = 0; bf16 < 2; ++bf16) {
          AttentionCase c;
          c.rows = 2;
          c.kv_heads = 2;
          c.group = group;
          c.dim = dim;
          c.slots = 300;
          c.queries = 40;
          c.window = window;
          c.bf16 = bf16 == 1;
          c.first_slot = static_cast<int32_t>(r.Int(0, c.slots - 1));
          ASSERT_TRUE(QueriesEqualTheirDecodes(c, &r, &compared));
        }
      }
    }
  }
  EXPECT_EQ(compared, 5 * 2 * 2 * 2 * 2 * 40);
}

// The same for decodes long enough that, on targets with 512-bit vectors,
// a lone query's keys are scored in four segments side by side
// (ScoresInSegments): groups of 4 and 8 query heads, each query against a
// forward of three (scored block by block). With every slot held, the
// queries admit about `slots` slots: from 256 on, 4100-4120 of them make
// segments of a multiple of 1024 rows (which the kernel shortens by 16),
// and the others segments of other lengths; with holes, from 150 to 2100.
TEST_P(AttentionTargets, LongDecodesEqualTheirForwardsBitForBit) {
  Rand r(19);
  int compared = 0;
  for (int32_t slots : {258, 301, 1100, 2100, 4120}) {
    for (int group : {4, 8}) {
      for (int bf16 = 0; bf16 < 2; ++bf16) {
        AttentionCase c;
        c.full = slots != 2100;
        c.kv_heads = 1;
        c.group = group;
        c.dim = bf16 == 1 ? 32 : 16;
        c.slots = slots;
        c.queries = 3;
        c.bf16 = bf16 == 1;
        c.first_slot = static_cast<int32_t>(r.Int(0, c.slots - 1));
        ASSERT_TRUE(QueriesEqualTheirDecodes(c, &r, &compared));
      }
    }
  }
  EXPECT_EQ(compared, 5 * 2 * 2 * 3);
}

// Every query head its own: q_heads = 1, 2, 4 x kv_heads for kv_heads 1..4
// and 8 (as many models have), decode and window, fp32 and bf16, dims with
// and without a vector tail.
TEST_P(AttentionTargets, GroupedQueryHeadsMatchReference) {
  const int kDims[] = {3, 16, 40, 64};
  for (int group : {1, 2, 4}) {
    for (int kv_heads : {1, 2, 3, 4, 8}) {
      for (int dim : kDims) {
        for (int32_t queries : {1, 6}) {
          for (int bf16 = 0; bf16 < 2; ++bf16) {
            AttentionCase c;
            c.kv_heads = kv_heads;
            c.group = group;
            c.dim = dim;
            c.slots = 50;
            c.queries = queries;
            c.window = queries == 1 ? kNoWindow : 20;
            c.bf16 = bf16 == 1;
            c.first_slot = 13;
            c.misalign = bf16;
            const uint32_t seed = static_cast<uint32_t>(group * 100 + kv_heads * 10 + dim);
            ASSERT_TRUE(MatchesReference(c, seed));
          }
        }
      }
    }
  }
}

// Flash-decoding: with AttendOptions{pool, chunk}, the output does not
// depend on the pool's thread count (none, 1, 2, 3, 4), stays within the
// tolerance of the reference, and equals Attend's bits when no query
// admits more than `chunk` slots or chunk is 0. Random shapes: decodes
// (and windows whose last tile holds one query) over up to 600 slots with
// chunks of 64..192, so most split queries have several chunks.
TEST_P(AttentionTargets, ChunkedDecodeIsBitIdenticalOnAnyThreadCount) {
  Rand r(14);
  ThreadPool pool1(1), pool2(2), pool3(3), pool4(4);
  ThreadPool* const pools[] = {&pool1, &pool2, &pool3, &pool4};
  int split = 0;  // queries with more than one chunk
  for (int trial = 0; trial < 30; ++trial) {
    AttentionCase c;
    c.rows = static_cast<int>(r.Int(1, 3));
    c.kv_heads = static_cast<int>(r.Int(1, 3));
    c.group = static_cast<int>(r.Int(1, 5));
    c.dim = static_cast<int>(r.Int(0, 3) == 0 ? r.Int(1, 40) : 16 * r.Int(1, 4));
    c.slots = static_cast<int32_t>(r.Int(0, 600));
    c.queries = r.Int(0, 3) == 0 ? 33 : 1;  // 33: a tile of 32, then one alone
    c.window = r.Int(0, 3) == 0 ? static_cast<int32_t>(r.Int(1, 400)) : kNoWindow;
    c.bf16 = r.Int(0, 1) == 1;
    c.first_slot = c.slots == 0 ? 0 : static_cast<int32_t>(r.Int(0, c.slots - 1));
    c.misalign = static_cast<int>(r.Int(0, 3));
    const int32_t chunk = kAttendChunkMultiple * static_cast<int32_t>(r.Int(1, 3));
    const uint32_t seed = static_cast<uint32_t>(trial);
    Rand data(seed);
    AttentionInputs in;
    FillCache(c, &data, &in);
    FillMask(c, &data, &in);
    const std::string what = c.Describe() + " chunk=" + std::to_string(chunk);
    const int q_heads = c.kv_heads * c.group;
    const float* q = in.q.data() + c.misalign;
    const size_t n = static_cast<size_t>(c.rows) * c.queries * q_heads * c.dim;
    int32_t most = 0;  // the most slots a query admits
    for (int row = 0; row < c.rows; ++row) {
      for (int32_t qi = 0; qi < c.queries; ++qi) {
        int32_t admitted = 0;
        for (int32_t s = 0; s < c.slots; ++s) admitted += in.mask.Admits(row, qi, s) ? 1 : 0;
        most = std::max(most, admitted);
        if (qi == c.queries - 1 && qi % 32 == 0 && admitted > chunk) ++split;
      }
    }

    AttendOptions options;
    options.chunk = chunk;
    std::vector<float> alone(n, 1.0f), plain(n, 2.0f), expected(n, 3.0f);
    AttendWith(q, q_heads, in.kv, in.mask, alone.data(), options);
    Attend(q, q_heads, in.kv, in.mask, plain.data());
    AttendReference(q, q_heads, in.kv, in.mask, expected.data());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_LE(std::fabs(alone[i] - expected[i]), kAttentionTolerance * (1 + std::fabs(expected[i])))
          << "target " << AttentionTargetName() << " " << what << " lane " << i;
    }
    if (most <= chunk) {
      ASSERT_EQ(0, std::memcmp(alone.data(), plain.data(), n * sizeof(float))) << what;
    }
    for (ThreadPool* pool : pools) {
      options.pool = pool;
      std::vector<float> threaded(n, 4.0f);
      AttendWith(q, q_heads, in.kv, in.mask, threaded.data(), options);
      ASSERT_EQ(0, std::memcmp(alone.data(), threaded.data(), n * sizeof(float)))
          << "target " << AttentionTargetName() << " " << what << " on " << pool->threads()
          << " threads";
      // chunk 0: Attend's one-pass arithmetic, the tiles and heads as tasks.
      AttendOptions whole;
      whole.pool = pool;
      AttendWith(q, q_heads, in.kv, in.mask, threaded.data(), whole);
      ASSERT_EQ(0, std::memcmp(plain.data(), threaded.data(), n * sizeof(float)))
          << "target " << AttentionTargetName() << " " << what << " chunk 0 on "
          << pool->threads() << " threads";
    }
  }
  // The cases must exercise the split: most of them have long decodes.
  EXPECT_GE(split, 10);
}

// A decode of one query over 4 chunks of kAttendChunkMultiple slots, one
// head of dim 4, where slot t's score (q.k / sqrt(dim)) is score(t): with
// flash-decoding (chunk kAttendChunkMultiple) on no pool and on 2 threads,
// the output is finite and within the tolerance of the reference.
template <class Score>
void ExpectChunkedDecodeNearReference(const Score& score, const std::string& what) {
  constexpr int32_t kSlots = 4 * kAttendChunkMultiple;
  constexpr int kDim = 4;
  std::vector<float> k(kSlots * kDim, 0.0f), v(kSlots * kDim), q = {32.0f, 0.0f, 0.0f, 0.0f};
  std::vector<int32_t> pos(kSlots);
  for (int32_t t = 0; t < kSlots; ++t) {
    k[t * kDim] = static_cast<float>(score(t)) / 16.0f;  // q.k / sqrt(dim) = score(t)
    for (int i = 0; i < kDim; ++i) v[t * kDim + i] = static_cast<float>((t * (i + 3)) % 11) - 5.0f;
    pos[t] = t;
  }
  const KvView kv = KvView::Dense(k.data(), v.data(), pos.data(), 1, 1, kDim, kSlots, 0);
  Mask mask;
  mask.window = kNoWindow;
  mask.rows = mask.queries = 1;
  mask.slot_pos = pos.data();
  mask.slot_stride = mask.slots = kSlots;
  mask.query_pos = {kSlots};
  mask.lo = {0};
  mask.hi = {kSlots};
  std::vector<float> expected(kDim, -1.0f);
  AttendReference(q.data(), 1, kv, mask, expected.data());
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    AttendOptions options;
    options.chunk = kAttendChunkMultiple;
    options.pool = p;
    std::vector<float> out(kDim, 7.0f);
    AttendWith(q.data(), 1, kv, mask, out.data(), options);
    for (int i = 0; i < kDim; ++i) {
      EXPECT_TRUE(std::isfinite(out[i]))
          << "target " << AttentionTargetName() << " " << what << " lane " << i;
      EXPECT_LE(std::fabs(out[i] - expected[i]), kAttentionTolerance * (1 + std::fabs(expected[i])))
          << "target " << AttentionTargetName() << " " << what << " lane " << i << ": expected "
          << expected[i] << ", actual " << out[i];
    }
  }
}

// Flash-decoding merges the chunks' partials scaled by exp(chunk max -
// overall max), the overall max taken over every chunk: a decode whose
// scores rise across 4 chunks (score of slot t = t, so the last chunk's
// maximum exceeds the first two chunks' by 128, past exp's float range)
// stays finite and within the tolerance of the reference, on any pool.
TEST_P(AttentionTargets, ChunkedDecodeWithScoresRisingAcrossChunks) {
  ExpectChunkedDecodeNearReference([](int32_t t) { return t; }, "rising scores");
}

// The same with the largest scores in any one of the 4 chunks (200 above
// the others', past exp's float range), whichever chunk holds them.
TEST_P(AttentionTargets, ChunkedDecodeWithTheLargestScoresInAnyOneChunk) {
  for (int32_t peak = 0; peak < 4; ++peak) {
    ExpectChunkedDecodeNearReference(
        [peak](int32_t t) { return (t / kAttendChunkMultiple == peak ? 200 : 0) + t % 61; },
        "largest scores in chunk " + std::to_string(peak));
  }
}

// Flash-decoding's arithmetic, stated exactly (kernels/attention.h): a
// split query's output is the merge, in chunk order, of one partial per
// chunk of `chunk` admitted slots in logical order (its largest score, the
// sum of exp(score - that), the values weighted by those), and every
// weighted sum adds its slots in logical order. With every key zero, every
// score is 0, every weight exp(0) = 1 and every chunk's e_c = exp(0 - 0) =
// 1, so with n admitted slots the output is exactly, per lane,
//   chunked (chunk < n):  ((acc_0 + acc_1) + ... + acc_last) / n, where
//                         acc_c = ((v_a + v_a+1) + ...) over chunk c's slots
//   one pass (chunk >= n, or 0, or Attend):  (((v_0 + v_1) + v_2) + ...) / n
// both computed here with float additions. The values are small integers,
// and 2^24 in some lanes, past which a float addition rounds (to a multiple
// of 2), so the two differ: lane 0 holds 2^24 at the first admitted slot
// and 1 at every other, which one pass leaves at 2^24 (2^24 + 1 rounds to
// even) while the merge adds each later chunk's exact count. A ring
// (first_slot 37 of 300) with empty slots (NaN, never read) among the held
// ones, so chunks count admitted slots in logical order; fp32 and bf16
// (every value here is a bf16); two query heads; no pool and 2 threads.
TEST_P(AttentionTargets, ChunkedDecodeIsTheInOrderMergeOfInOrderChunkSums) {
  constexpr int kDim = 20;
  constexpr int kQueryHeads = 2;
  constexpr int32_t kSlots = 300, kFirstSlot = 37;
  constexpr int32_t kChunk = kAttendChunkMultiple;
  constexpr float kBig = 16777216.0f;  // 2^24
  Rand r(15);
  std::vector<float> k(kSlots * kDim, 0.0f), v(kSlots * kDim, NAN);
  std::vector<int32_t> pos(kSlots, -1);
  std::vector<int32_t> admitted;  // physical slots, in logical order
  for (int32_t t = 0; t < kSlots; ++t) {
    const int32_t s = (kFirstSlot + t) % kSlots;
    if (r.Int(0, 9) == 0) {  // empty
      std::fill(k.begin() + s * kDim, k.begin() + (s + 1) * kDim, NAN);
      continue;
    }
    pos[s] = t;
    admitted.push_back(s);
  }
  const size_t n = admitted.size();
  ASSERT_GT(n, static_cast<size_t>(3 * kChunk));  // at least 4 chunks
  for (size_t j = 0; j < n; ++j) {
    float* value = &v[admitted[j] * kDim];
    for (int i = 0; i < kDim; ++i) value[i] = static_cast<float>(r.Int(0, 16)) - 8.0f;
    value[0] = j == 0 ? kBig : 1.0f;
  }
  for (int i = 1; i < kDim; i += 2) v[admitted[r.Int(0, n - 1)] * kDim + i] = kBig;

  std::vector<float> one_pass, chunked;  // [head][dim]
  for (int h = 0; h < kQueryHeads; ++h) {
    for (int i = 0; i < kDim; ++i) {
      float all = 0.0f, merged = 0.0f, acc = 0.0f;
      for (size_t j = 0; j < n; ++j) {
        const float x = v[admitted[j] * kDim + i];
        all += x;
        acc += x;
        if ((j + 1) % kChunk == 0 || j + 1 == n) {
          merged += acc;
          acc = 0.0f;
        }
      }
      one_pass.push_back(all / static_cast<float>(n));
      chunked.push_back(merged / static_cast<float>(n));
    }
  }
  // The input separates the two arithmetics (lane 0, above).
  ASSERT_NE(one_pass[0], chunked[0]);

  std::vector<uint16_t> k16(k.size()), v16(v.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k16[i] = FloatToBf16(k[i]);
    v16[i] = FloatToBf16(v[i]);
  }
  std::vector<float> q(kQueryHeads * kDim);
  r.Fill(&q, -2, 2);
  Mask mask;
  mask.window = kNoWindow;
  mask.rows = mask.queries = 1;
  mask.slot_pos = pos.data();
  mask.slot_stride = mask.slots = kSlots;
  mask.first_slot = kFirstSlot;
  mask.query_pos = {kSlots};
  mask.lo = {0};
  mask.hi = {kSlots};
  ThreadPool pool(2);
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    KvView kv = KvView::Dense(k.data(), v.data(), pos.data(), 1, 1, kDim, kSlots, kFirstSlot);
    if (bf16 == 1) {
      kv.k_bf16 = k16.data();
      kv.v_bf16 = v16.data();
    }
    // The first lane whose bits differ from `want`, as a failure.
    const auto same_bits = [&](const std::vector<float>& want, const std::vector<float>& got,
                               const std::string& what) -> ::testing::AssertionResult {
      for (size_t i = 0; i < want.size(); ++i) {
        if (std::memcmp(&want[i], &got[i], sizeof(float)) == 0) continue;
        return ::testing::AssertionFailure()
               << "target " << AttentionTargetName() << (bf16 == 1 ? " bf16 " : " fp32 ") << what
               << ", " << n << " admitted slots: head " << i / kDim << " lane " << i % kDim
               << ": expected " << want[i] << ", actual " << got[i];
      }
      return ::testing::AssertionSuccess();
    };
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      const std::string on = p == nullptr ? " on the calling thread" : " on 2 threads";
      AttendOptions options;
      options.pool = p;
      options.chunk = kChunk;
      std::vector<float> out(chunked.size(), 7.0f);
      AttendWith(q.data(), kQueryHeads, kv, mask, out.data(), options);
      EXPECT_TRUE(same_bits(chunked, out, "chunk " + std::to_string(kChunk) + on));
      // One chunk holds every admitted slot: the one-pass arithmetic.
      options.chunk = static_cast<int32_t>((n + kChunk - 1) / kChunk * kChunk);
      AttendWith(q.data(), kQueryHeads, kv, mask, out.data(), options);
      EXPECT_TRUE(same_bits(one_pass, out, "chunk " + std::to_string(options.chunk) + on));
    }
    std::vector<float> out(one_pass.size(), 7.0f);
    Attend(q.data(), kQueryHeads, kv, mask, out.data());
    EXPECT_TRUE(same_bits(one_pass, out, "Attend"));
  }
}

// A decode (one row, one query) over `pos.size()` slots of random keys and
// values: the slots' positions are `pos`, the query admits [lo, hi].
struct Decode {
  static constexpr int kKvHeads = 2;
  static constexpr int kGroup = 2;
  static constexpr int kDim = 8;
  static constexpr int kQueryHeads = kKvHeads * kGroup;

  std::vector<int32_t> pos;
  std::vector<float> k, v;  // [kv_heads][slots][dim]

  KvView View() const {
    return KvView::Dense(k.data(), v.data(), pos.data(), 1, kKvHeads, kDim,
                         static_cast<int32_t>(pos.size()), 0);
  }
  Mask MaskOf(int32_t lo, int32_t hi) const {
    Mask m;
    m.window = kNoWindow;
    m.rows = 1;
    m.queries = 1;
    m.slot_pos = pos.data();
    m.slot_stride = pos.size();
    m.slots = static_cast<int32_t>(pos.size());
    m.first_slot = 0;
    m.query_pos = {hi};
    m.lo = {lo};
    m.hi = {hi};
    return m;
  }
  // Appends a slot at position p whose keys and values are those of slot s
  // of `from` (or fresh ones when from is null).
  void Add(int32_t p, const Decode* from, int32_t s, Rand* r) {
    const size_t slots = pos.size();
    std::vector<float> nk, nv;
    for (int h = 0; h < kKvHeads; ++h) {
      for (size_t t = 0; t <= slots; ++t) {
        for (int i = 0; i < kDim; ++i) {
          float kk, vv;
          if (t < slots) {
            kk = k[(h * slots + t) * kDim + i];
            vv = v[(h * slots + t) * kDim + i];
          } else if (from) {
            const size_t fs = from->pos.size();
            kk = from->k[(h * fs + static_cast<size_t>(s)) * kDim + i];
            vv = from->v[(h * fs + static_cast<size_t>(s)) * kDim + i];
          } else {
            kk = r->Uniform(-2.0f, 2.0f);
            vv = r->Uniform(-3.0f, 3.0f);
          }
          nk.push_back(kk);
          nv.push_back(vv);
        }
      }
    }
    k.swap(nk);
    v.swap(nv);
    pos.push_back(p);
  }
};

// AttendWith(chunk) over a Decode's shape; outputs start at 9 so that an
// output left unwritten shows.
std::vector<float> AttendChunked(const std::vector<float>& q, const KvView& kv, const Mask& mask,
                                 int32_t chunk) {
  AttendOptions options;
  options.chunk = chunk;
  std::vector<float> out(Decode::kQueryHeads * Decode::kDim, 9.0f);
  AttendWith(q.data(), Decode::kQueryHeads, kv, mask, out.data(), options);
  return out;
}

// Flash-decoding cuts a query's admitted slots into chunks of `chunk`
// admitted slots, wherever they sit: a decode of 2 * chunk + 1 admitted
// slots (the last chunk one slot) gives the same bits when
//  - the slots are alone ("compact"),
//  - slots the query does not admit (positions above its range and below
//    it) are interleaved among them ("sparse"),
//  - the range is tight (lo and hi are the first and last admitted
//    positions) or loose (no slot sits on lo or hi),
// and stays within the tolerance of the reference. On every target.
TEST_P(AttentionTargets, ChunksCountAdmittedSlotsOnly) {
  constexpr int32_t kChunk = kAttendChunkMultiple;
  constexpr int32_t kAdmitted = 2 * kChunk + 1;
  Rand r(20);
  std::vector<float> q(Decode::kQueryHeads * Decode::kDim);
  r.Fill(&q, -1.5f, 1.5f);
  Decode compact, sparse;
  for (int32_t t = 0; t < kAdmitted; ++t) compact.Add(100 + t, nullptr, 0, &r);
  int32_t above = 0, below = 0;
  for (int32_t t = 0; t < kAdmitted; ++t) {
    if (t % 3 == 1) {
      sparse.Add(1000 + t, nullptr, 0, &r);  // above the range
      ++above;
    }
    if (t % 5 == 2) {
      sparse.Add(t % 40, nullptr, 0, &r);  // below it
      ++below;
    }
    sparse.Add(100 + t, &compact, t, &r);
  }
  ASSERT_GT(above, kChunk / 2);
  ASSERT_GT(below, kChunk / 4);
  const int32_t lo = 100, hi = 100 + kAdmitted - 1;

  const Mask tight = compact.MaskOf(lo, hi);
  std::vector<float> expected(q.size(), -1.0f);
  AttendReference(q.data(), Decode::kQueryHeads, compact.View(), tight, expected.data());
  const std::vector<float> want = AttendChunked(q, compact.View(), tight, kChunk);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_LE(std::fabs(want[i] - expected[i]), kAttentionTolerance * (1 + std::fabs(expected[i])))
        << "lane " << i;
  }
  struct Case {
    const char* what;
    const Decode* decode;
    int32_t lo, hi;
  };
  const Case cases[] = {
      {"compact, loose range", &compact, lo - 50, hi + 50},
      {"sparse, tight range", &sparse, lo, hi},
      {"sparse, loose range", &sparse, lo - 50, hi + 50},
  };
  for (const Case& c : cases) {
    const Mask mask = c.decode->MaskOf(c.lo, c.hi);
    const std::vector<float> got = AttendChunked(q, c.decode->View(), mask, kChunk);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << c.what;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << c.what << " lane " << i;
    }
  }
}

// Attend's precondition, enforced in every build: query heads a positive
// multiple of the KV heads, else it aborts naming both counts.
TEST(AttentionDeathTest, QueryHeadsNotAMultipleOfTheKvHeadsAbort) {
  AttentionCase c;
  c.kv_heads = 2;
  c.group = 2;
  c.slots = 4;
  Rand r(7);
  AttentionInputs in;
  FillCache(c, &r, &in);
  FillMask(c, &r, &in);
  std::vector<float> out(256, 0.0f);
  for (int q_heads : {3, 1, 0, -2}) {
    EXPECT_DEATH(Attend(in.q.data(), q_heads, in.kv, in.mask, out.data()),
                 "kvspec::Attend: " + std::to_string(q_heads) +
                     " query heads over 2 KV heads \\(need a multiple\\)");
  }
  KvView none = in.kv;
  none.kv_heads = 0;
  EXPECT_DEATH(Attend(in.q.data(), 2, none, in.mask, out.data()),
               "kvspec::Attend: 2 query heads over 0 KV heads");
  Attend(in.q.data(), 4, in.kv, in.mask, out.data());  // a multiple: runs
}

// AttendWith's chunk must be 0 or a positive multiple of
// kAttendChunkMultiple, in every build: anything else aborts naming it.
TEST(AttentionDeathTest, AChunkNotANonNegativeMultipleAborts) {
  Rand r(21);
  Decode d;
  for (int32_t t = 0; t < 8; ++t) d.Add(t, nullptr, 0, &r);
  std::vector<float> q(Decode::kQueryHeads * Decode::kDim, 0.5f);
  const Mask mask = d.MaskOf(0, 7);
  for (int32_t chunk : {-kAttendChunkMultiple, -1, 1, kAttendChunkMultiple - 1,
                        kAttendChunkMultiple + 1, 3 * kAttendChunkMultiple / 2}) {
    EXPECT_DEATH((void)AttendChunked(q, d.View(), mask, chunk),
                 "kvspec::Attend: chunk " + std::to_string(chunk) +
                     " is not a non-negative multiple of " +
                     std::to_string(kAttendChunkMultiple))
        << chunk;
  }
  // 0 and multiples run, with Attend's bits (8 slots: no query is split)
  std::vector<float> plain(q.size(), 3.0f);
  Attend(q.data(), Decode::kQueryHeads, d.View(), mask, plain.data());
  for (int32_t chunk : {0, kAttendChunkMultiple, 2 * kAttendChunkMultiple}) {
    const std::vector<float> out = AttendChunked(q, d.View(), mask, chunk);
    EXPECT_EQ(0, std::memcmp(out.data(), plain.data(), plain.size() * sizeof(float))) << chunk;
  }
}

KVSPEC_FOR_EACH_TARGET(AttentionTargets);

// Grouped-query attention with 8 or more query heads per KV head (the
// kernel serves a group 4 heads at a time, then one at a time): every query
// head's output matches the scalar reference, on 1 and 2 KV heads, dims
// below, at and above a vector, for a decode and a window of 3 queries.
TEST(AttentionGroups, EightOrMoreQueryHeadsPerKvHeadMatchTheReference) {
  for (const int group : {8, 9, 12}) {
    for (const int kv_heads : {1, 2}) {
      for (const int dim : {3, 8, 17}) {
        for (const int32_t queries : {1, 3}) {
          const int32_t slots = 10;
          const int q_heads = kv_heads * group;
          std::vector<float> k(static_cast<size_t>(kv_heads) * slots * dim);
          std::vector<float> v(k.size());
          for (size_t i = 0; i < k.size(); ++i) {
            k[i] = std::sin(0.37f * static_cast<float>(i));
            v[i] = std::cos(0.23f * static_cast<float>(i));
          }
          std::vector<int32_t> pos(static_cast<size_t>(slots));
          for (int32_t s = 0; s < slots; ++s) pos[s] = s;
          const KvView view = KvView::Dense(k.data(), v.data(), pos.data(), 1, kv_heads, dim,
                                            slots, 0);
          Mask mask;
          mask.rows = 1;
          mask.queries = queries;
          mask.slot_pos = pos.data();
          mask.slot_stride = static_cast<size_t>(slots);
          mask.slots = slots;
          for (int32_t t = 0; t < queries; ++t) {
            const int32_t p = slots - queries + t;
            mask.query_pos.push_back(p);
            mask.lo.push_back(0);
            mask.hi.push_back(p);
          }
          std::vector<float> q(static_cast<size_t>(queries) * q_heads * dim);
          for (size_t i = 0; i < q.size(); ++i) {
            q[i] = std::sin(1.3f * static_cast<float>(i) + 0.5f);
          }
          std::vector<float> got(q.size(), 777.0f), want(q.size(), -777.0f);
          Attend(q.data(), q_heads, view, mask, got.data());
          AttendReference(q.data(), q_heads, view, mask, want.data());
          for (size_t i = 0; i < q.size(); ++i) {
            ASSERT_LE(std::fabs(got[i] - want[i]), kAttentionTolerance * (1 + std::fabs(want[i])))
                << "group " << group << ", " << kv_heads << " KV heads, dim " << dim << ", "
                << queries << " queries: query " << i / dim / q_heads << " head "
                << i / dim % q_heads << " lane " << i % dim << ": " << got[i] << " vs "
                << want[i];
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvspec

// Kernel behaviour the rest of the suite never produced (issue 20's
// coverage gaps): AttendWith's chunk precondition aborts; flash-decoding
// counts chunks in admitted slots only (slots outside the query's range,
// above or below it, and a range tight on its first and last slots change
// nothing); ThreadPool::Run runs every task once (none for 0 tasks) and
// its workers take part.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kvspec/kernels/attention.h"
#include "kvspec/kernels/kv_view.h"
#include "kvspec/kernels/mask.h"
#include "kvspec/kernels/test_random.h"
#include "kvspec/kernels/thread_pool.h"
#include "kvspec/testing/target_params.h"

namespace kvspec {
namespace {

using kernel_test::Rand;

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
class AttentionChunkTargets : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    // The kernel under test is the target's, not the best one's.
    ASSERT_STREQ(hwy::TargetName(GetParam()), AttentionTargetName());
  }
  testing::TargetScope scope_{GetParam()};
};

TEST_P(AttentionChunkTargets, ChunksCountAdmittedSlotsOnly) {
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

KVSPEC_FOR_EACH_TARGET(AttentionChunkTargets);

// AttendWith's chunk must be 0 or a positive multiple of
// kAttendChunkMultiple, in every build: anything else aborts naming it.
TEST(AttentionChunkEdgesDeathTest, AChunkNotANonNegativeMultipleAborts) {
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

// Run(tasks, task) calls task(i) exactly once for each i in [0, tasks):
// never for 0 tasks, once for 1, and on a pool of any size.
TEST(ThreadPoolEdges, EveryTaskRunsExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (size_t tasks : {size_t{0}, size_t{1}, size_t{2}, size_t{7}}) {
      std::vector<std::atomic<int>> calls(tasks + 1);
      for (auto& c : calls) c.store(0);
      pool.Run(tasks, [&](size_t i) { calls[i].fetch_add(1); });
      for (size_t i = 0; i < tasks; ++i) {
        EXPECT_EQ(calls[i].load(), 1) << threads << " threads, " << tasks << " tasks, task " << i;
      }
      EXPECT_EQ(calls[tasks].load(), 0) << threads << " threads, " << tasks << " tasks";
    }
  }
}

// The workers take part: on a pool of 2 threads, 2 tasks that each wait
// for the other to start run at the same time, on two threads.
TEST(ThreadPoolEdges, WorkersRunTasksAlongsideTheCaller) {
  ThreadPool pool(2);
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  bool timed_out = false;
  std::set<std::thread::id> ran_on;
  pool.Run(2, [&](size_t) {
    std::unique_lock<std::mutex> lock(mu);
    ++started;
    ran_on.insert(std::this_thread::get_id());
    cv.notify_all();
    if (!cv.wait_for(lock, std::chrono::seconds(20), [&] { return started == 2; })) {
      timed_out = true;  // the other task did not start while this one ran
    }
  });
  EXPECT_FALSE(timed_out);
  EXPECT_EQ(started, 2);
  EXPECT_EQ(ran_on.size(), 2u);
}

}  // namespace
}  // namespace kvspec

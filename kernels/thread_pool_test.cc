// ThreadPool (kernels/thread_pool.h): every task of a Run runs exactly once
// and has finished when Run returns, whatever the thread count, the task
// count (fewer tasks than threads, counts that do not divide evenly) and
// the gap between Runs (workers still spinning, or asleep on the condition
// variable, or between the two); no task runs for 0 tasks, and the workers
// run tasks alongside the caller.
#include "kvspec/kernels/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace kvspec {
namespace {

// Runs `tasks` tasks on `pool` and expects each index to have run once.
void ExpectEachTaskOnce(ThreadPool& pool, size_t tasks) {
  std::vector<std::atomic<int>> runs(tasks);
  for (auto& r : runs) r.store(0);
  pool.Run(tasks, [&](size_t i) {
    ASSERT_LT(i, tasks);
    runs[i].fetch_add(1, std::memory_order_relaxed);
  });
  for (size_t i = 0; i < tasks; ++i) {
    ASSERT_EQ(runs[i].load(), 1) << "task " << i << " of " << tasks << " on "
                                 << pool.threads() << " threads";
  }
}

TEST(ThreadPool, ThreadCountIsClamped) {
  EXPECT_EQ(ThreadPool(-3).threads(), 1);
  EXPECT_EQ(ThreadPool(0).threads(), 1);
  EXPECT_EQ(ThreadPool(1).threads(), 1);
  EXPECT_EQ(ThreadPool(3).threads(), 3);
  EXPECT_EQ(ThreadPool(ThreadPool::kMaxThreads + 1).threads(), ThreadPool::kMaxThreads);
}

TEST(ThreadPool, EveryTaskRunsOnceBackToBack) {
  for (int threads = 1; threads <= 5; ++threads) {
    ThreadPool pool(threads);
    for (size_t tasks = 0; tasks <= 41; ++tasks) ExpectEachTaskOnce(pool, tasks);
  }
}

TEST(ThreadPool, EveryTaskRunsOnceAfterTheWorkersSleep) {
  ThreadPool pool(3);
  for (size_t tasks : {1, 2, 3, 7, 16}) {
    // Longer than the spin: the workers wait on the condition variable.
    std::this_thread::sleep_for(std::chrono::microseconds(20 * ThreadPool::kSpinMicros));
    ExpectEachTaskOnce(pool, tasks);
  }
}

TEST(ThreadPool, EveryTaskRunsOnceAroundTheSpinDeadline) {
  // Gaps around kSpinMicros race a worker's switch from spinning to sleeping
  // against the next Run.
  ThreadPool pool(2);
  const int gaps[] = {0, ThreadPool::kSpinMicros / 2, ThreadPool::kSpinMicros,
                      ThreadPool::kSpinMicros * 3 / 2, ThreadPool::kSpinMicros * 2};
  for (int round = 0; round < 200; ++round) {
    std::this_thread::sleep_for(std::chrono::microseconds(gaps[round % 5]));
    ExpectEachTaskOnce(pool, static_cast<size_t>(1 + round % 9));
  }
}

TEST(ThreadPool, RunReturnsAfterEveryTaskFinished) {
  ThreadPool pool(4);
  std::vector<int> out(64, 0);
  pool.Run(out.size(), [&](size_t i) {
    std::this_thread::sleep_for(std::chrono::microseconds(i % 4 == 0 ? 300 : 10));
    out[i] = static_cast<int>(i) + 1;  // a plain write: read after Run returns
  });
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], static_cast<int>(i) + 1);
}

TEST(ThreadPool, OneThreadRunsTheTasksInOrderOnTheCaller) {
  ThreadPool pool(1);
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<size_t> order;
  pool.Run(10, [&](size_t i) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    order.push_back(i);
  });
  ASSERT_EQ(order.size(), 10u);
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], i);
}

TEST(ThreadPool, DestroysWhileWorkersSpinOrSleep) {
  for (int i = 0; i < 20; ++i) {
    auto pool = std::make_unique<ThreadPool>(3);
    if (i % 2) ExpectEachTaskOnce(*pool, 5);  // workers spinning at destruction
    if (i % 4 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // asleep
    pool.reset();
  }
  SUCCEED();
}

// Run(tasks, task) calls task(i) exactly once for each i in [0, tasks):
// never for 0 tasks, once for 1, and on a pool of any size.
TEST(ThreadPool, EveryTaskRunsExactlyOnce) {
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
TEST(ThreadPool, WorkersRunTasksAlongsideTheCaller) {
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

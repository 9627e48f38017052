// A small fixed pool of threads for the kernels' multi-core paths
// (Attend's flash-decoding, GatedDeltaStep's head split).
//
// The caller owns the pool; the library keeps none of its own (no global
// state). ThreadPool(n) starts n - 1 worker threads: the thread that calls
// Run is the n-th. Run(tasks, task) calls task(i) once for every i in
// [0, tasks), spread over the threads in whatever order they claim them,
// and returns when all have returned. The kernels make every task write its
// own outputs and merge partial results afterwards in a fixed order, so
// their results never depend on the thread count or on which thread ran a
// task.
//
// One Run at a time per pool (concurrent callers are serialised); a task
// must not throw nor call Run on the same pool.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvspec {

class ThreadPool {
 public:
  inline static constexpr int kMaxThreads = 256;

  // 1 <= threads <= kMaxThreads (clamped).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads that run tasks, the caller included.
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void Run(size_t tasks, const std::function<void(size_t)>& task);

 private:
  void Work();
  void Drain();  // claims and runs tasks of the current Run until none is left

  std::mutex run_mu_;  // one Run at a time
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(size_t)>* task_ = nullptr;
  size_t tasks_ = 0;
  std::atomic<size_t> next_{0};
  uint64_t generation_ = 0;
  int busy_ = 0;  // workers still in the current Run
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// Runs task(i) for i in [0, tasks): on the pool when there is one, else in
// order on the calling thread (without wrapping task in a std::function).
template <class Task>
void RunTasks(ThreadPool* pool, size_t tasks, const Task& task) {
  if (pool != nullptr && pool->threads() > 1 && tasks > 1) {
    pool->Run(tasks, task);
    return;
  }
  for (size_t i = 0; i < tasks; ++i) task(i);
}

}  // namespace kvspec

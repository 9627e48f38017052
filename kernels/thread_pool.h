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
//
// Order: the tasks are cut into one contiguous block per thread (the
// caller's first); each thread runs its own block in order, then helps
// with the others'. So with tasks of equal cost the same thread runs the
// same tasks in every Run, and a hot working set (a head's recurrent
// state) stays in that core's cache instead of moving between cores.
//
// Waiting: between Runs a worker spins for up to kSpinMicros before it
// sleeps on a condition variable, and so does the caller waiting for the
// workers to finish. Waking a sleeping thread costs tens of microseconds on
// a VM (the idle vCPU must be woken), as much as a whole gated delta step;
// back-to-back Runs (one per row of a batch, one per layer) find the
// workers still spinning. An idle pool costs at most kSpinMicros of CPU per
// worker after each Run.
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
  inline static constexpr int kSpinMicros = 50;

  // 1 <= threads <= kMaxThreads (clamped).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads that run tasks, the caller included.
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void Run(size_t tasks, const std::function<void(size_t)>& task);

 private:
  void Work(size_t self);
  // Claims and runs tasks of the current Run until none is left: those of
  // thread `self`'s block first, then the other blocks'.
  void Drain(size_t self);

  std::mutex run_mu_;  // one Run at a time
  std::mutex mu_;  // guards the sleeps on wake_ and done_
  std::condition_variable wake_;
  std::condition_variable done_;
  // Written by Run before it publishes a new generation_ (release), read
  // by the workers after they see it (acquire).
  const std::function<void(size_t)>* task_ = nullptr;
  struct alignas(64) Block {
    std::atomic<size_t> next{0};  // the next task to claim
    size_t end = 0;
  };
  std::vector<Block> blocks_;  // one per thread, the caller's first
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> busy_{0};  // workers still in the current Run
  std::atomic<bool> stop_{false};
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

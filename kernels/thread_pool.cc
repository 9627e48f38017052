#include "kernels/thread_pool.h"

#include <algorithm>

namespace kvspec {

ThreadPool::ThreadPool(int threads) {
  const int n = std::clamp(threads, 1, kMaxThreads);
  workers_.reserve(static_cast<size_t>(n - 1));
  for (int i = 1; i < n; ++i) workers_.emplace_back([this] { Work(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Drain() {
  for (;;) {
    const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= tasks_) return;
    (*task_)(i);
  }
}

void ThreadPool::Run(size_t tasks, const std::function<void(size_t)>& task) {
  if (tasks == 0) return;
  std::lock_guard<std::mutex> run_lock(run_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    task_ = &task;
    tasks_ = tasks;
    next_.store(0, std::memory_order_relaxed);
    busy_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  Drain();
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return busy_ == 0; });
  task_ = nullptr;
}

void ThreadPool::Work() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    Drain();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--busy_ == 0) done_.notify_one();
    }
  }
}

}  // namespace kvspec

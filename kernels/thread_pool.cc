#include "kvspec/kernels/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace kvspec {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done() or until kSpinMicros have passed; true when done().
template <class Done>
bool SpinUntil(const Done& done) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::microseconds(ThreadPool::kSpinMicros);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      CpuRelax();
    }
    if (Clock::now() >= deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  const int n = std::clamp(threads, 1, kMaxThreads);
  blocks_ = std::vector<Block>(static_cast<size_t>(n));
  workers_.reserve(static_cast<size_t>(n - 1));
  for (int i = 1; i < n; ++i) {
    workers_.emplace_back([this, i] { Work(static_cast<size_t>(i)); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Drain(size_t self) {
  const size_t n = blocks_.size();
  for (size_t k = 0; k < n; ++k) {
    Block& block = blocks_[self + k < n ? self + k : self + k - n];
    for (;;) {
      const size_t i = block.next.fetch_add(1, std::memory_order_relaxed);
      if (i >= block.end) break;
      (*task_)(i);
    }
  }
}

void ThreadPool::Run(size_t tasks, const std::function<void(size_t)>& task) {
  if (tasks == 0) return;
  std::lock_guard<std::mutex> run_lock(run_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    task_ = &task;
    const size_t n = blocks_.size();
    for (size_t t = 0; t < n; ++t) {  // block t: [tasks * t / n, tasks * (t + 1) / n)
      blocks_[t].next.store(tasks / n * t + tasks % n * t / n, std::memory_order_relaxed);
      blocks_[t].end = tasks / n * (t + 1) + tasks % n * (t + 1) / n;
    }
    busy_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  Drain(0);
  const auto finished = [this] { return busy_.load(std::memory_order_acquire) == 0; };
  if (!SpinUntil(finished)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, finished);
  }
  task_ = nullptr;
}

void ThreadPool::Work(size_t self) {
  uint64_t seen = 0;
  for (;;) {
    const auto woken = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!SpinUntil(woken)) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, woken);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    Drain(self);
    if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

}  // namespace kvspec

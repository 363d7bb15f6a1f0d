// kvevict tools — thread_pool.hpp: a std::thread pool that satisfies kvevict's
// Executor concept (core/executor.hpp), for the engine, the tools, the benchmark
// and the tests. The library itself never creates a thread; an engine plugs in its
// own pool the same way (`cache.set_executor(pool)`).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kvevict/core/executor.hpp"

namespace kvtools {

/// A fixed pool of `workers − 1` threads plus the calling thread.
/// `parallel_for(n, f)` publishes the job, runs tasks on the caller too, and
/// returns when all `n` have run. Tasks are claimed one at a time from a counter
/// tagged with the job's generation, so a worker that wakes late can never run a
/// task of a later job. Idle workers spin briefly (20000 pause instructions, about
/// 20 µs to 1 ms by CPU: decode steps come in bursts, one per layer), then sleep on
/// a condition variable. No allocation
/// per call (the job is a function pointer and a context). `parallel_for` must
/// be called by one thread at a time; `f` must not throw.
class ThreadPool {
 public:
  /// Starts `workers − 1` threads. Throws `std::invalid_argument` if `workers == 0`; if a thread cannot start
  /// (`std::system_error`, e.g. the system's thread limit), stops and joins the ones started, then rethrows.
  explicit ThreadPool(std::size_t workers) : workers_(workers) {
    if (workers == 0) throw std::invalid_argument("kvtools::ThreadPool: workers must be >= 1 (got 0)");
    threads_.reserve(workers - 1);
    try {
      for (std::size_t i = 1; i < workers; ++i) threads_.emplace_back([this] { worker_loop(); });
    } catch (...) {
      stop();
      throw;
    }
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  /// Stops and joins the threads.
  ~ThreadPool() { stop(); }

  /// Threads that run tasks, the caller included.
  std::size_t workers() const noexcept { return workers_; }

  /// `f(task)` for every task in [0, n_tasks), spread over the pool and the
  /// calling thread; returns when every call has returned.
  template <class F>
  void parallel_for(std::size_t n_tasks, F&& f) {
    using Fn = std::remove_reference_t<F>;
    if (n_tasks == 0) return;
    if (workers_ == 1 || n_tasks == 1) {
      for (std::size_t t = 0; t < n_tasks; ++t) f(t);
      return;
    }
    std::uint64_t gen = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = [](void* c, std::size_t t) { (*static_cast<Fn*>(c))(t); };
      ctx_ = const_cast<void*>(static_cast<const void*>(&f));
      n_ = n_tasks;
      completed_.store(0, std::memory_order_relaxed);
      gen = generation_.load(std::memory_order_relaxed) + 1;
      next_.store(gen << 32, std::memory_order_relaxed);  // high bits: the job; low bits: the next task
      generation_.store(gen, std::memory_order_release);
    }
    wake_.notify_all();
    run_tasks(gen, fn_, ctx_, n_tasks);
    while (completed_.load(std::memory_order_acquire) != n_tasks) std::this_thread::yield();
  }

 private:
  /// Tells every started thread to end and joins it.
  void stop() noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // Claims and runs tasks of job `gen` until none is left.
  void run_tasks(std::uint64_t gen, kvevict::detail::TaskFn fn, void* ctx, std::size_t n) {
    std::uint64_t v = next_.load(std::memory_order_relaxed);
    for (;;) {
      if ((v >> 32) != (gen & 0xffffffffu) || (v & 0xffffffffu) >= n) return;
      if (!next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_relaxed)) continue;
      fn(ctx, static_cast<std::size_t>(v & 0xffffffffu));
      completed_.fetch_add(1, std::memory_order_acq_rel);
      v = next_.load(std::memory_order_relaxed);
    }
  }
  void worker_loop() {
    std::uint64_t seen = 0;
    for (;;) {
      for (int spin = 0; spin < 20000 && generation_.load(std::memory_order_acquire) == seen; ++spin) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
      kvevict::detail::TaskFn fn = nullptr;
      void* ctx = nullptr;
      std::size_t n = 0;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
        if (stop_) return;
        seen = generation_.load(std::memory_order_relaxed);
        fn = fn_, ctx = ctx_, n = n_;
      }
      run_tasks(seen, fn, ctx, n);
    }
  }

  std::size_t workers_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  kvevict::detail::TaskFn fn_ = nullptr;  // the job, guarded by mutex_
  void* ctx_ = nullptr;
  std::size_t n_ = 0;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<std::uint64_t> next_{0};
  std::atomic<std::size_t> completed_{0};
};

static_assert(kvevict::is_executor<ThreadPool>::value, "kvtools::ThreadPool must satisfy kvevict's Executor");

}  // namespace kvtools

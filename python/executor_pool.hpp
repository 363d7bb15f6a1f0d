// python/executor_pool.hpp — kvevict.ThreadPool: worker threads that caches score on (Cache.set_executor), shared by
// every cache of a model and safe to call from several Python threads.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <mutex>
#include <utility>

#include "thread_pool.hpp"  // tools/thread_pool.hpp: kvtools::ThreadPool

namespace kvpy {

/// kvtools::ThreadPool (`workers − 1` threads plus the caller) behind a mutex: kvevict's Executor concept lets one
/// thread call `parallel_for` at a time, while Python threads may run several caches that share this pool (each
/// with the GIL released). A caller waits for the one before it; the tasks never call back into the pool.
class PyThreadPool {
 public:
  /// Throws std::invalid_argument for workers == 0 (kvtools::ThreadPool's message).
  explicit PyThreadPool(std::size_t workers) : pool_(workers) {}
  std::size_t workers() const noexcept { return pool_.workers(); }
  template <class F>
  void parallel_for(std::size_t n_tasks, F&& f) {
    std::lock_guard<std::mutex> lock(mutex_);
    pool_.parallel_for(n_tasks, std::forward<F>(f));
  }

 private:
  kvtools::ThreadPool pool_;
  std::mutex mutex_;
};

}  // namespace kvpy

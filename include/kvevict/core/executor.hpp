// core/executor.hpp — where the parallel work of a prefill or a decode step runs:
// the Executor concept, the serial default and a non-owning type-erased reference.
// SPDX-License-Identifier: Apache-2.0
//
// ---- Executor (the caller's threads) -------------------------------
//   std::size_t workers() const;                  how many tasks may run at once (>= 1);
//                                                 the cache splits its work for this many
//   void parallel_for(std::size_t n_tasks, F&& f); calls f(task) exactly once for every
//                                                 task in [0, n_tasks), in any order, on any
//                                                 threads, concurrently or not, and returns
//                                                 when every call has returned
// `f` is callable as `f(std::size_t)` and never throws (the cache catches inside its
// tasks); it may be copied or referenced. `parallel_for` itself must not throw either
// (the cache calls it where its state is half updated; `ExecutorRef::parallel_for` is
// `noexcept`, so an executor that throws ends the program instead of leaving a cache
// corrupt). It is called by one thread at a time per executor (a cache never nests
// calls). The library creates no thread: a pool adapter lives in the tools
// (tools/thread_pool.hpp).
//
// Determinism: the cache's results do not depend on the executor, on `workers()` or
// on the order the tasks run in — each task writes its own outputs, and every
// reduction that crosses tasks runs afterwards in one fixed order on the caller.
#pragma once

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <utility>

namespace kvevict {

/// The default executor: runs the tasks one after another on the calling
/// thread, in ascending order. `workers() == 1`. No allocation, no thread.
struct SerialExecutor {
  /// 1: the cache does not split a KV head's work.
  std::size_t workers() const noexcept { return 1; }
  /// `f(0), f(1), ..., f(n_tasks − 1)` on the calling thread. O(n_tasks) calls.
  template <class F>
  void parallel_for(std::size_t n_tasks, F&& f) const {
    for (std::size_t t = 0; t < n_tasks; ++t) f(t);
  }
};

namespace detail {
/// A task as the type-erased executor sees it: a function pointer and its context.
using TaskFn = void (*)(void* ctx, std::size_t task);
template <class E>
using workers_t = decltype(std::declval<const E&>().workers());
template <class E>
using parallel_for_t =
    decltype(std::declval<E&>().parallel_for(std::size_t{}, std::declval<void (*&)(std::size_t)>()));
template <class E, class = void>
struct has_workers : std::false_type {};
template <class E>
struct has_workers<E, std::void_t<workers_t<E>>> : std::is_convertible<workers_t<E>, std::size_t> {};
template <class E, class = void>
struct has_parallel_for : std::false_type {};
template <class E>
struct has_parallel_for<E, std::void_t<parallel_for_t<E>>> : std::true_type {};
}  // namespace detail

/// Whether `E` satisfies the Executor concept (see the top of this header).
template <class E>
struct is_executor : std::bool_constant<detail::has_workers<E>::value && detail::has_parallel_for<E>::value> {};

/// A non-owning, type-erased reference to an executor (two pointers and a
/// worker count; no allocation, trivially copyable), as the runtime
/// `CacheInterface` and `PagedCache` take it. The referenced executor must
/// outlive every call made through the reference. A default-constructed
/// `ExecutorRef` is serial (`workers() == 1`, tasks in order on the caller).
class ExecutorRef {
 public:
  /// Serial (as `SerialExecutor`).
  ExecutorRef() noexcept = default;
  /// Refers to `executor`; `workers()` is read once, now. A non-executor fails
  /// to compile with a message naming the missing member.
  template <class E, std::enable_if_t<!std::is_same<std::decay_t<E>, ExecutorRef>::value, int> = 0>
  ExecutorRef(E& executor)  // NOLINT(google-explicit-constructor): a reference, converts implicitly
      : ctx_(const_cast<void*>(static_cast<const void*>(&executor))),
        run_(&run<E>),
        workers_(static_cast<std::size_t>(executor.workers())) {
    static_assert(detail::has_workers<E>::value,
                  "kvevict: an Executor must provide `std::size_t workers() const`");
    static_assert(detail::has_parallel_for<E>::value,
                  "kvevict: an Executor must provide `void parallel_for(std::size_t n_tasks, F&& f)`");
  }

  /// The referenced executor's worker count (>= 1; 0 is read as 1).
  std::size_t workers() const noexcept { return workers_ == 0 ? 1 : workers_; }
  /// Whether this is the serial default (no executor referenced).
  bool serial() const noexcept { return run_ == nullptr; }

  /// `f(task)` for every task in [0, n_tasks) through the referenced executor
  /// (serially, in order, when none); returns when all have returned. `f` must
  /// not throw; neither may the executor (`noexcept`: `std::terminate` if it
  /// does). No allocation (`f` is passed by address).
  template <class F>
  void parallel_for(std::size_t n_tasks, F&& f) const noexcept {
    using Fn = std::remove_reference_t<F>;
    if (run_ == nullptr || n_tasks <= 1) {
      for (std::size_t t = 0; t < n_tasks; ++t) f(t);
      return;
    }
    run_(ctx_, n_tasks, [](void* c, std::size_t t) { (*static_cast<Fn*>(c))(t); },
         const_cast<void*>(static_cast<const void*>(&f)));
  }

 private:
  template <class E>
  static void run(void* ctx, std::size_t n_tasks, detail::TaskFn fn, void* fn_ctx) {
    static_cast<E*>(ctx)->parallel_for(n_tasks, [fn, fn_ctx](std::size_t t) { fn(fn_ctx, t); });
  }

  void* ctx_ = nullptr;
  void (*run_)(void*, std::size_t, detail::TaskFn, void*) = nullptr;
  std::size_t workers_ = 1;
};

namespace detail {
/// `f(i)` for every item in [0, n_items) on `executor`: `min(workers, n_items)`
/// tasks, task `t` takes the contiguous items `[t·n/T, (t+1)·n/T)` in order
/// (e.g. one cache step's per-KV-head work). `f` must not throw. No allocation.
template <class F>
void for_each_head(ExecutorRef executor, std::size_t n_items, F&& f) {
  const std::size_t tasks = std::min(executor.workers(), n_items);
  executor.parallel_for(tasks, [&](std::size_t t) noexcept {
    for (std::size_t i = t * n_items / tasks; i < (t + 1) * n_items / tasks; ++i) f(i);
  });
}
}  // namespace detail

static_assert(is_executor<SerialExecutor>::value, "kvevict: SerialExecutor must satisfy the Executor concept");
static_assert(is_executor<ExecutorRef>::value, "kvevict: ExecutorRef must satisfy the Executor concept");

}  // namespace kvevict

// python/cache_calls.hpp — what PyCache (cache.cpp) and PyPagedCache (paged.cpp) share: the checks of the
// arguments of prefill / decode_step / attention_logits, and the locked calls and copies around the library.
// SPDX-License-Identifier: Apache-2.0
//
// Each cache passes its own mutex (PyCache: the cache's; PyPagedCache: its pool's) and its own length;
// the locking follows locking.hpp (GilFreeLock with the GIL held, std::lock_guard once it is released).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "conversions.hpp"
#include "locking.hpp"
#include "options.hpp"

namespace kvpy {

/// The `logits` and `gumbel` arguments of prefill / decode_step: each None or a float32 array of `shape`
/// (`what` names the shape in errors). The arrays keep the data alive; the pointers say what was given
/// (py::array{} is an empty array, not a null handle).
struct ScoreArgs {
  py::array logits, gumbel;
  const float* lp = nullptr;  ///< null when logits is None
  const float* gp = nullptr;  ///< null when gumbel is None
};

/// Checks `logits`, then `gumbel` against the policy (PolicySetup::check_gumbel), then its array,
/// raising the first error as the bindings do.
ScoreArgs checked_scores(py::handle logits, py::handle gumbel, const PolicySetup& setup,
                         const std::vector<py::ssize_t>& shape, const char* what);

/// The arguments of attention_logits for a sequence of `n` slots: q `[n_q_heads, head_dim]`, bias (None or
/// `[n_q_heads, n]`), out (None: a new array, else a writable `[n_q_heads, n]`) and scale (None:
/// 1 / sqrt(head_dim); else finite).
struct AttentionArgs {
  py::array q, bias, out;
  const float* qp = nullptr;
  const float* bp = nullptr;  ///< null when bias is None
  float* op = nullptr;
  float scale = 1.0f;
};

/// Checks them in that order (q, bias, out, scale), raising the first error as the bindings do.
AttentionArgs checked_attention(py::handle q, py::handle scale, py::handle bias, py::handle out,
                                std::size_t n_q_heads, std::size_t n, std::size_t head_dim);

/// `cache.prefill(lp, P, gp)` without the GIL and under `mutex`; the library's std::invalid_argument is
/// raised as ValueError once the GIL is back and the lock released (its SnapKV message in the Python
/// argument's terms: PolicySetup::name_snap_window).
template <class Cache>
void locked_prefill(Cache& cache, std::mutex& mutex, const ScoreArgs& a, std::size_t P, const PolicySetup& setup) {
  bool failed = false;
  std::string message;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mutex);
    try {
      cache.prefill(a.lp, P, a.gp);
    } catch (const std::invalid_argument& e) {  // re-raised below, with the GIL and without the lock
      failed = true;
      message = e.what();
    }
  }
  if (failed) throw py::value_error(setup.name_snap_window(message));
}

/// `cache.decode_step(lp, n, gp)` without the GIL and under `mutex` (n is checked again by the library,
/// under the lock: a sequence that grew in between is refused).
template <class Cache>
void locked_decode_step(Cache& cache, std::mutex& mutex, const ScoreArgs& a, std::size_t n) {
  py::gil_scoped_release nogil;
  std::lock_guard<std::mutex> lock(mutex);
  cache.decode_step(a.lp, n, a.gp);
}

/// A copy of the `length()` values at `data()` (an accessor of the library: its "KV head out of range"
/// becomes IndexError), both read under `mutex`; the caller builds the Python result after the lock.
template <class T, class Data, class Length>
std::vector<T> locked_copy(std::mutex& mutex, Data data, Length length) {
  std::vector<T> copy;
  {
    GilFreeLock lock(mutex);
    const T* p = guarded(data);
    copy.assign(p, p + length());
  }
  return copy;
}

/// `cache.retained_positions(j)` (IndexError for j too large), read under `mutex`.
template <class Cache>
std::vector<std::int64_t> locked_retained_positions(Cache& cache, std::mutex& mutex, std::size_t j) {
  GilFreeLock lock(mutex);
  return guarded([&] { return cache.retained_positions(j); });
}

/// `cache.reset(seed)` under `mutex` (seed None: the latest seed), then remembers the seed in `setup`.
template <class Cache>
void locked_reset(Cache& cache, std::mutex& mutex, PolicySetup& setup, py::handle seed) {
  const std::uint64_t s = seed.is_none() ? setup.seed : to_u64(seed, "seed");
  GilFreeLock lock(mutex);
  cache.reset(s);
  setup.seed = s;
}

}  // namespace kvpy

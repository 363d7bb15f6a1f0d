// python/locking.hpp — how the bindings take the mutexes of PyCache and PyPagePool (one per cache, one per pool
// shared by its sequences) together with the GIL.
// SPDX-License-Identifier: Apache-2.0
//
// The rule, kept by every binding file:
//  1. Nothing that creates a Python object or can run Python code happens while one of these mutexes is held:
//     the locked block copies what it needs into C++ values (std::vector, std::size_t), and the Python result
//     (list, array) is built after the unlock. Allocating a Python object can start a garbage collection,
//     which runs __del__ methods and destructors of other objects: a PagedCache of the same pool, whose
//     destructor takes the pool's mutex on this thread (a non-recursive std::mutex: deadlock), or Python code
//     that calls this cache again, or that lets another thread take the GIL and wait on the mutex.
//  2. A thread that holds the GIL waits for a mutex without it (`GilFreeLock`): the holder may be a thread that
//     released the GIL (prefill, decode_step, attention_logits) and must reacquire it once done; and a long
//     prefill of one sequence does not stall every Python thread that touches another sequence of the pool.
//  Blocks that already released the GIL (py::gil_scoped_release) lock with a plain std::lock_guard.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <mutex>
#include <string>

namespace kvpy {

namespace py = pybind11;

/// Locks `m` for its lifetime from a thread that holds the GIL: takes it at once when it is free, else
/// releases the GIL while it waits and takes the GIL back after (the GIL is held again when the constructor
/// returns). The holder must follow rule 1 above. Cost: one try_lock when uncontended.
class GilFreeLock {
 public:
  explicit GilFreeLock(std::mutex& m) : lock_(m, std::try_to_lock) {
    if (!lock_.owns_lock()) {
      py::gil_scoped_release nogil;
      lock_.lock();
    }
  }
  GilFreeLock(const GilFreeLock&) = delete;
  GilFreeLock& operator=(const GilFreeLock&) = delete;

 private:
  std::unique_lock<std::mutex> lock_;
};

/// The ValueError text of attention_logits when the sequence's length was `before` when the arguments were
/// checked (and `out` sized) but `now` when the kernel's locked block began: another thread, or Python code
/// run by converting an argument, appended or evicted in between. Nothing is written then.
inline std::string length_changed(std::size_t before, std::size_t now) {
  return "kvevict.attention_logits: the sequence changed length during the call (n = " + std::to_string(before) +
         " when q, bias and out were checked, " + std::to_string(now) +
         " now); nothing was written to out; call it again with arguments of the new length";
}

}  // namespace kvpy

// tests/support/allocation_counter.cpp — malloc-backed replacement of the global
// operator new that counts its calls (see allocation_counter.hpp).
#include "allocation_counter.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

// GCC 12 flags free() of memory from this very operator new as "mismatched";
// here the pair is intentional (malloc-backed replacement of operator new).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

long kvtest::allocation_count() { return g_allocations.load(std::memory_order_relaxed); }

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

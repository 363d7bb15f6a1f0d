// tests/support/allocation_counter.hpp — counts calls of the global operator new.
// Link allocation_counter.cpp into a test executable to replace operator new
// there (and only there); then allocation_count() grows by one per call.
#pragma once

namespace kvtest {

/// Calls of the replaced global `operator new(std::size_t)` so far in this process.
long allocation_count();

}  // namespace kvtest

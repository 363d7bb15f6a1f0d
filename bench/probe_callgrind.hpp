// bench/probe_callgrind.hpp — callgrind's client requests for the probes (step_probe.cpp, prompt_probe.cpp), or
// no-ops where valgrind's header is missing: under bench/instructions.sh (--instr-atstart=no --collect-atstart=no)
// only what a probe brackets with CALLGRIND_TOGGLE_COLLECT is counted.
#pragma once

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#endif
#endif
#if !defined(CALLGRIND_TOGGLE_COLLECT)
#define CALLGRIND_TOGGLE_COLLECT
#define CALLGRIND_START_INSTRUMENTATION
#endif

// kvevict fuzzing — trace_json: kvevict-replay's JSON trace reader.
// SPDX-License-Identifier: Apache-2.0
//
// Input bytes are a JSON document. `read_trace_json` then `validate` must either succeed or throw
// `replay::InputError` (the CLI's exit 2); anything else escaping, a sanitizer report, or an
// allocation larger than the document justifies (libFuzzer's -malloc_limit_mb / -rss_limit_mb)
// is a finding. A trace that validates must survive write_trace_json -> read_trace_json with
// every causal entry bit-identical.
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>

#include "fuzz_util.hpp"
#include "trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  replay::Trace trace;
  try {
    trace = replay::read_trace_json(in, "fuzz.json");
    if (!trace.prompt_len) trace.prompt_len = 1;  // as --prompt-len would
    replay::validate(trace);
  } catch (const replay::InputError&) {
    return 0;
  }
  std::ostringstream out;
  replay::write_trace_json(out, trace);
  std::istringstream back_in(out.str());
  const replay::Trace back = replay::read_trace_json(back_in, "round-trip");
  KVFUZZ_CHECK(back.n_q_heads == trace.n_q_heads && back.n_tokens == trace.n_tokens &&
                   back.prompt_len == trace.prompt_len && back.g() == trace.g() &&
                   back.has_gumbel() == trace.has_gumbel(),
               "round trip changed the shape or the fields");
  for (std::size_t h = 0; h < trace.n_q_heads; ++h)
    for (std::size_t t = 0; t < trace.n_tokens; ++t)
      for (std::size_t j = 0; j <= t; ++j) {
        const std::size_t i = trace.index(h, t, j);
        KVFUZZ_CHECK(std::memcmp(&back.logits[i], &trace.logits[i], 4) == 0, "round trip changed logits[", h, "][",
                     t, "][", j, "]");
        if (trace.has_gumbel())
          KVFUZZ_CHECK(std::memcmp(&back.gumbel[i], &trace.gumbel[i], 4) == 0, "round trip changed gumbel");
      }
  return 0;
}

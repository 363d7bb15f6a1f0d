// kvevict fuzzing — replay_run: the whole kvevict-replay run on a parsed trace with fuzzed options.
// SPDX-License-Identifier: Apache-2.0
//
// Input: the options are taken from the end of the bytes (FuzzedDataProvider's integers), the rest
// is a JSON trace. The trace is parsed with read_trace_json, command-line style overrides of P and
// g are applied, and `replay::replay` runs with the fuzzed Options (policy names including unknown
// ones, budgets and windows as counts and ratios including 0, huge, NaN, sinks, τ values including
// 0, tiny, NaN and inf, horizons, every noise mode, shared heads, head-adaptive budgets with floors in
// and out of [0, 1]: the heads then hold different lengths). It must either throw
// `replay::InputError`, `std::invalid_argument` or `std::length_error` (all exit 2 in the CLI) or
// write exactly N - P + 1 JSON lines.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "fuzz_util.hpp"
#include "replay.hpp"
#include "trace.hpp"

namespace {

std::size_t pick_count(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: return std::numeric_limits<std::size_t>::max();
    case 1: return (std::size_t{1} << 53) + 1;
    case 2: return std::size_t{1} << 40;
    default: return in.ConsumeIntegralInRange<std::size_t>(0, 12);
  }
}

double pick_double(FuzzedDataProvider& in) {
  static const double odd[] = {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(),
                               std::numeric_limits<double>::infinity(), 1e-300, 1e300, 1.0, 1.0000001};
  if (in.ConsumeBool()) return in.PickValueInArray(odd);
  return in.ConsumeIntegralInRange<int>(0, 96) / 64.0;
}

float pick_tau(FuzzedDataProvider& in) {
  static const float taus[] = {1.0f, 2.0f, 0.5f, 0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                               std::numeric_limits<float>::infinity(), 1e-40f, 1e-38f, 1e-30f, 1e30f,
                               std::numeric_limits<float>::max(), 1e-45f};
  return in.PickValueInArray(taus);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  replay::Options o;
  static const char* const policies[] = {"keyformer", "h2o", "streaming", "window", "tova", "streamingllm", "full", ""};
  o.policy = in.PickValueInArray(policies);
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: break;
    case 1: o.budget = pick_count(in); break;
    case 2: o.budget_ratio = pick_double(in); break;
    default: o.budget = pick_count(in); o.budget_ratio = pick_double(in); break;
  }
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: break;
    case 1: o.recent = pick_count(in); break;
    case 2: o.recent_ratio = pick_double(in); break;
    default: o.recent = pick_count(in); o.recent_ratio = pick_double(in); break;
  }
  o.sinks = pick_count(in);
  o.tau_init = pick_tau(in);
  o.tau_end = pick_tau(in);
  if (in.ConsumeBool()) o.gen_steps = pick_count(in);
  static const replay::Noise noises[] = {replay::Noise::automatic, replay::Noise::none, replay::Noise::gumbel,
                                         replay::Noise::trace};
  o.noise = in.PickValueInArray(noises);
  o.seed = in.ConsumeIntegral<std::uint64_t>();
  o.shared_heads = in.ConsumeBool();
  if (in.ConsumeBool()) {
    static const float floors[] = {0.0f, 0.2f, 0.5f, 1.0f, -0.5f, 1.5f, std::numeric_limits<float>::quiet_NaN()};
    o.head_budgets = kvevict::HeadBudgets::adaptive(in.PickValueInArray(floors));
  }
  const int prompt_override = in.ConsumeIntegralInRange<int>(0, 3);
  const std::size_t prompt_len = pick_count(in);
  const int g_override = in.ConsumeIntegralInRange<int>(0, 3);
  const std::size_t g = pick_count(in);

  std::istringstream text(in.ConsumeRemainingBytesAsString());
  replay::Trace trace;
  try {
    trace = replay::read_trace_json(text, "fuzz.json");
  } catch (const replay::InputError&) {
    return 0;
  }
  if (prompt_override == 0) trace.prompt_len = prompt_len;
  if (g_override == 0) trace.q_heads_per_kv = g;

  std::ostringstream out;
  try {
    replay::replay(trace, o, out);
  } catch (const replay::InputError&) {
    return 0;
  } catch (const std::invalid_argument&) {
    return 0;
  } catch (const std::length_error&) {
    return 0;
  }
  const std::string lines = out.str();
  const auto count = static_cast<std::size_t>(std::count(lines.begin(), lines.end(), '\n'));
  KVFUZZ_CHECK(count == trace.n_tokens - trace.P() + 1, "replay wrote ", count, " lines for N = ", trace.n_tokens,
               ", P = ", trace.P());
  return 0;
}

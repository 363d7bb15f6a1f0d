// python/replay_binding.cpp — kvevict.replay: one layer's attention-logit trace replayed by the library behind
// kvevict-replay (replay::replay), its JSON Lines records returned as dicts.
// SPDX-License-Identifier: Apache-2.0
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <array>
#include <sstream>
#include <string>
#include <utility>

#include "bindings.hpp"
#include "cli/amount.hpp"
#include "conversions.hpp"
#include "docstrings.hpp"
#include "options.hpp"
#include "replay.hpp"
#include "trace.hpp"

namespace kvpy {

namespace {

using kvcli::Amount;
using kvcli::AmountKind;

py::object default_keyformer() { return py::str("keyformer"); }
py::object default_one() { return py::int_(1); }
py::object default_four() { return py::int_(4); }

/// replay's keyword-only options after logits and prompt_len (doc::kReplay explains each). None = not given:
/// the Keyformer-only options are refused for another policy when given.
const std::array<OptionSpec, 13> kReplayOptions{{{"policy", default_keyformer},
                                                 {"q_heads_per_kv", default_one},
                                                 {"budget", default_budget},
                                                 {"recent"},
                                                 {"sinks", default_four},
                                                 {"tau_init"},
                                                 {"tau_end"},
                                                 {"gen_steps"},
                                                 {"noise"},
                                                 {"gumbel"},
                                                 {"seed"},
                                                 {"shared_heads", default_false},
                                                 {"head_budgets"}}};

/// The replay's message names its command-line flags (--budget-ratio, ...): name the Python arguments.
std::string python_names(std::string m) {
  const std::pair<const char*, const char*> names[] = {
      {"--budget-ratio", "budget"}, {"--budget", "budget"},     {"--recent-ratio", "recent"},
      {"--recent", "recent"},       {"--prompt-len", "prompt_len"}, {"--q-heads-per-kv", "q_heads_per_kv"},
      {"--tau-init", "tau_init"},   {"--tau-end", "tau_end"},   {"--gen-steps", "gen_steps"},
      {"--policy", "policy"},       {"--noise", "noise"},       {"--sinks", "sinks"},
      {"--seed", "seed"},           {"prompt_len", "prompt_len"}, {"q_heads_per_kv", "q_heads_per_kv"}};
  for (const auto& [flag, arg] : names)
    if (m.rfind(flag, 0) == 0) return std::string(arg) + m.substr(std::string(flag).size());
  return m;
}

replay::Trace trace_of(py::handle logits, py::handle prompt_len, const Options& o) {
  replay::Trace trace;
  // The shape is read first so that the message can state the expected [H_q, N, N].
  const py::array probe = py::isinstance<py::array>(logits)
                              ? py::reinterpret_borrow<py::array>(logits)
                              : py::array(py::module_::import("numpy").attr("asarray")(logits));
  const py::ssize_t H = probe.ndim() == 3 ? probe.shape(0) : 0, N = probe.ndim() == 3 ? probe.shape(1) : 0;
  const py::array la = checked_array(logits, "logits", Elem::float32, {H, N, N}, "[H_q, N, N]");
  if (H == 0 || N == 0) throw py::value_error("logits must have H_q >= 1 and N >= 1, got shape " + array_shape(la));
  trace.n_q_heads = static_cast<std::size_t>(H);
  trace.n_tokens = static_cast<std::size_t>(N);
  if (const py::object g = o.get("gumbel")) {
    const py::array ga = checked_array(g, "gumbel", Elem::float32, {H, N, N}, "[H_q, N, N] (the shape of logits)");
    trace.gumbel.assign(static_cast<const float*>(ga.data()), static_cast<const float*>(ga.data()) + ga.size());
  }
  trace.logits.assign(static_cast<const float*>(la.data()), static_cast<const float*>(la.data()) + la.size());
  trace.prompt_len = to_size(prompt_len, "prompt_len");
  trace.q_heads_per_kv = to_size(o.get("q_heads_per_kv"), "q_heads_per_kv");
  return trace;
}

py::list run_replay(py::handle logits, py::handle prompt_len, const Options& o) {
  const replay::Trace trace = trace_of(logits, prompt_len, o);

  // Every option is set here (the Python defaults), independent of replay::Options' defaults.
  replay::Options r;
  r.policy = o.has("policy") ? to_text(o.get("policy"), "policy") : std::string("keyformer");
  Amount budget;
  (void)kvcli::parse_amount_text(kvcli::defaults::kBudget, AmountKind::budget, budget);
  if (o.has("budget")) budget = to_amount(o.get("budget"), "budget", AmountKind::budget);
  r.budget.reset();
  r.budget_ratio.reset();
  if (budget.is_ratio)
    r.budget_ratio = budget.ratio;
  else
    r.budget = budget.tokens;
  Amount recent;  // the tools' default: 30% for keyformer, h2o and snapkv, 0 for the others
  const bool has_recent = r.policy == "keyformer" || r.policy == "h2o" || r.policy == "snapkv";
  (void)kvcli::parse_amount_text(has_recent ? kvcli::defaults::kRecent : "0", AmountKind::recent, recent);
  if (o.has("recent")) recent = to_amount(o.get("recent"), "recent", AmountKind::recent);
  r.recent.reset();
  r.recent_ratio.reset();
  if (recent.is_ratio)
    r.recent_ratio = recent.ratio;
  else
    r.recent = recent.tokens;
  r.sinks = o.has("sinks") ? to_size(o.get("sinks"), "sinks") : 4;
  r.tau_init = o.has("tau_init") ? static_cast<float>(to_double(o.get("tau_init"), "tau_init")) : 1.0f;
  r.tau_end = o.has("tau_end") ? static_cast<float>(to_double(o.get("tau_end"), "tau_end")) : 2.0f;
  r.gen_steps.reset();
  if (o.has("gen_steps")) r.gen_steps = to_size(o.get("gen_steps"), "gen_steps");
  const std::string noise = o.has("noise") ? to_text(o.get("noise"), "noise") : std::string("auto");
  r.seed = o.has("seed") ? to_u64(o.get("seed"), "seed") : kvcli::defaults::kSeed;
  if (r.policy != "keyformer")  // an option the policy does not use is an error, as in kvevict-replay
    for (const char* key : {"tau_init", "tau_end", "gen_steps", "noise", "gumbel", "seed"})
      if (o.has(key))
        throw py::value_error(std::string(key) + " is used only by policy 'keyformer' (got policy '" + r.policy +
                              "')");
  r.shared_heads = o.has("shared_heads") && to_bool(o.get("shared_heads"), "shared_heads");
  if (o.has("head_budgets")) r.head_budgets = to_head_budgets(o.get("head_budgets"));

  std::string lines;
  try {
    r.noise = replay::parse_noise(noise);
    std::ostringstream out;
    {
      py::gil_scoped_release nogil;
      replay::replay(trace, r, out);
    }
    lines = out.str();
  } catch (const replay::InputError& e) {
    throw py::value_error(python_names(e.what()));
  }
  const py::object loads = py::module_::import("json").attr("loads");
  py::list records;
  std::size_t start = 0;
  while (start < lines.size()) {
    const std::size_t end = lines.find('\n', start);
    records.append(loads(py::str(lines.substr(start, end - start))));
    start = end + 1;
  }
  return records;
}

}  // namespace

void bind_replay(py::module_& m) {
  const auto f = taking_options<py::object, py::object>(
      kReplayOptions,
      [](py::object logits, py::object prompt_len, Options o) { return run_replay(logits, prompt_len, o); });
  with_args(kReplayOptions, [&](auto... args) {
    m.def("replay", f, py::arg("logits"), py::arg("prompt_len"), py::kw_only(), args..., doc::kReplay);
  });
}

}  // namespace kvpy

// python/options.cpp — option lookup by name and the policy options of Cache and PagedCache (options.hpp).
// SPDX-License-Identifier: Apache-2.0
#include "options.hpp"

#include <cstring>
#include <sstream>
#include <stdexcept>

#include "cli/amount.hpp"
#include "conversions.hpp"

namespace kvpy {

py::object Options::get(const char* name) const {
  for (std::size_t i = 0; i < count_; ++i)
    if (std::strcmp(specs_[i].name, name) == 0) {
      if (!values_[i].is_none()) return values_[i];
      return specs_[i].make_default ? specs_[i].make_default() : py::object();  // None: the default
    }
  throw std::logic_error(std::string("kvevict bindings: no option '") + name + "' in this table");
}

py::arg_v arg_of(const OptionSpec& spec) {
  return spec.make_default ? py::arg_v(spec.name, spec.make_default()) : py::arg_v(spec.name, py::none());
}

py::object default_budget() { return py::str(kvcli::defaults::kBudget); }
py::object default_false() { return py::bool_(false); }

void PolicySetup::check_gumbel(py::handle gumbel) const {
  if (!gumbel.is_none() && !noisy)
    throw py::value_error("gumbel: injected noise is used only by policy 'keyformer' with noise=True (got policy '" +
                          name + "'" + (policy == kvevict::Policy::keyformer ? " with noise=False)" : ")"));
}

std::string PolicySetup::name_snap_window(const std::string& message) const {
  if (message.find("SnapKV observation window L") == std::string::npos) return message;
  return "snap_window = " + std::to_string(params.snap_window) + ": " + message +
         "; pass snap_window <= k (its default is min(32, k) for an int budget, 32 for a fraction, which is "
         "resolved only at prefill)";
}

std::string PolicySetup::unresolved_budget() const {
  std::ostringstream os;
  if (config.budget.is_ratio())
    os << "unresolved (" << config.budget.ratio_value() * 100.0 << "% of the prompt)";
  else
    os << "unresolved (" << config.budget.token_count() << " tokens at prefill)";
  return os.str();
}

PolicySetup policy_of(const std::string& policy, const Options& o) {
  PolicySetup s;
  try {
    s.policy = kvevict::parse_policy(policy);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(std::string("policy: ") + e.what());
  }
  s.name = kvevict::policy_name(s.policy);
  auto only_for = [&](const char* key, bool allowed, const char* who) {
    if (!allowed && o.has(key))
      throw py::value_error(std::string(key) + " is used only by policy " + who + " (got policy '" + s.name + "')");
  };
  only_for("sinks", s.policy == kvevict::Policy::streaming_llm, "'streaming'");
  // Keyformer's schedule and noise: keyformer, or snapkv with snap_decode='keyformer' (SnapKVKeyformer).
  const bool keyformer_decode = s.policy == kvevict::Policy::keyformer ||
                                (s.policy == kvevict::Policy::snapkv && o.has("snap_decode") &&
                                 py::isinstance<py::str>(o.get("snap_decode")) &&
                                 o.get("snap_decode").cast<std::string>() == "keyformer");
  for (const char* key : {"tau_init", "tau_end", "horizon", "noise", "seed"})
    only_for(key, keyformer_decode,
             s.policy == kvevict::Policy::snapkv ? "'keyformer' (or 'snapkv' with snap_decode='keyformer')"
                                                 : "'keyformer'");
  for (const char* key : {"snap_window", "snap_kernel", "snap_pooling", "snap_decode"})
    only_for(key, s.policy == kvevict::Policy::snapkv, "'snapkv'");
  only_for("mean_attention", s.policy == kvevict::Policy::h2o || s.policy == kvevict::Policy::keyformer,
           "'h2o' or 'keyformer'");
  return s;
}

void configure(PolicySetup& s, const Options& o, bool has_shared_heads) {
  kvevict::CacheConfig& config = s.config;
  kvevict::PolicyParams& params = s.params;
  if (!o.has("n_q_heads")) throw py::value_error("n_q_heads is required (query heads of the layer)");
  config.n_q_heads = to_size(o.get("n_q_heads"), "n_q_heads");
  // The tools' defaults (cli/amount.hpp): budget 50%, recent 30% for the policies with a recent window,
  // seed 42, snap_window min(32, k).
  config.budget = o.has("budget") ? to_budget(o.get("budget")) : kvevict::Budget::ratio(0.5);
  const bool has_recent = kvevict::takes_recent_window(s.policy);
  config.recent = o.has("recent") ? to_recent(o.get("recent"))
                                  : has_recent ? kvevict::RecentWindow::ratio(0.3) : kvevict::RecentWindow::none();
  config.seed = kvcli::defaults::kSeed;
  config.shared_heads = true;  // a paged cache: one selection for every KV head (required)
  if (has_shared_heads)
    config.shared_heads = o.has("shared_heads") && to_bool(o.get("shared_heads"), "shared_heads");
  if (o.has("seed")) config.seed = to_u64(o.get("seed"), "seed");
  if (o.has("sinks")) params.sinks = to_size(o.get("sinks"), "sinks");
  if (o.has("tau_init")) params.tau_init = static_cast<float>(to_double(o.get("tau_init"), "tau_init"));
  if (o.has("tau_end")) params.tau_end = static_cast<float>(to_double(o.get("tau_end"), "tau_end"));
  if (o.has("noise")) params.gumbel_noise = to_bool(o.get("noise"), "noise");
  if (o.has("mean_attention")) params.mean_attention = to_bool(o.get("mean_attention"), "mean_attention");
  if (o.has("snap_window"))
    params.snap_window = to_size(o.get("snap_window"), "snap_window");
  else if (!config.budget.is_ratio())  // a fraction resolves at prefill: L stays 32 there
    params.snap_window = kvcli::default_snap_window(config.budget.token_count());
  if (o.has("snap_kernel")) params.snap_kernel = to_size(o.get("snap_kernel"), "snap_kernel");
  try {
    if (o.has("snap_pooling"))
      params.snap_pooling = kvevict::parse_pooling(to_text(o.get("snap_pooling"), "snap_pooling"));
    if (o.has("snap_decode"))
      params.snap_decode = kvevict::parse_snap_decode(to_text(o.get("snap_decode"), "snap_decode"));
  } catch (const std::invalid_argument& e) {
    throw py::value_error(e.what());
  }
  if (s.policy == kvevict::Policy::keyformer || params.snap_decode == kvevict::SnapDecode::keyformer) {
    if (!o.has("horizon"))
      throw py::value_error(s.policy == kvevict::Policy::keyformer
                                ? "horizon (T, the number of tokens to generate) is required for policy 'keyformer'"
                                : "horizon (T, the number of tokens to generate) is required for policy 'snapkv' "
                                  "with snap_decode='keyformer'");
    params.horizon = to_size(o.get("horizon"), "horizon");
  }
  s.noisy = (s.policy == kvevict::Policy::keyformer || params.snap_decode == kvevict::SnapDecode::keyformer) &&
            params.gumbel_noise;
  s.seed = config.seed;
}

}  // namespace kvpy

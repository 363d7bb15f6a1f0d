// kvevict tools — cli/resolve.cpp: the shared flags resolved for a prompt (k, w, sinks, L) and the policy settings.
// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <cmath>

#include "cli/detail.hpp"
#include "cli/kvevict_cli.hpp"

namespace kvcli {
namespace {

constexpr double kMaxTokens = 9007199254740992.0;  // 2^53: counts beyond cannot be represented exactly

using detail::is_eviction_policy;
using detail::typed;

}  // namespace

std::string Resolved::describe() const {
  return "k=" + std::to_string(k) + " w=" + std::to_string(w) + " sinks=" + std::to_string(sinks) +
         (snap_window != 0 ? " L=" + std::to_string(snap_window) : std::string());
}

Resolved resolve(const EvictionFlags& f, std::size_t prompt_len, const std::string& policy_override) {
  const std::string& policy = policy_override.empty() ? f.policy : policy_override;
  Resolved r;
  if (!is_eviction_policy(policy)) return r;
  const double P = static_cast<double>(prompt_len);
  if (f.budget.is_ratio) {
    const double k = std::floor(f.budget.ratio * P);
    if (k > kMaxTokens)
      throw UsageError(f.budget_flag, typed(f.budget_flag, f.budget) + " of a " + std::to_string(prompt_len) +
                                          "-token prompt is above 2^53 tokens; give a smaller value");
    r.k = std::max<std::size_t>(1, static_cast<std::size_t>(k));
  } else {
    r.k = f.budget.tokens;
  }
  const std::string budget_desc =
      f.budget_given ? typed(f.budget_flag, f.budget) +
                           (f.budget.is_ratio ? " of a " + std::to_string(prompt_len) + "-token prompt" : std::string())
                     : "the default --budget 50% of a " + std::to_string(prompt_len) + "-token prompt";
  if (policy == "streaming") {
    r.sinks = f.sinks;
    if (!f.budget_given) r.k = std::max(r.k, f.sinks + 1);  // documented floor of the default budget
    if (r.sinks > r.k)
      throw UsageError("--sinks", "S = " + std::to_string(r.sinks) + " exceeds the budget k = " + std::to_string(r.k) +
                                      " (" + budget_desc + "); lower --sinks or raise " + f.budget_flag);
    r.w = r.k - r.sinks;
    return r;
  }
  if (policy == "window") {
    r.w = r.k;
    return r;
  }
  if (policy == "tova" && !f.recent) return r;  // w = 0: the paper's TOVA keeps no recent window
  // keyformer, h2o, snapkv, knorm, keydiff; tova with --recent (no floor: its score does not accumulate)
  const Amount recent = f.recent ? *f.recent : parse_amount(defaults::kRecent, "--recent", AmountKind::recent);
  if (recent.is_ratio) {
    r.w = static_cast<std::size_t>(std::floor(recent.ratio * static_cast<double>(r.k)));
    if (recent.ratio > 0.0 && r.k >= 2 && policy != "tova") r.w = std::max<std::size_t>(r.w, 1);
  } else {
    r.w = recent.tokens;
  }
  if (r.w > r.k)
    throw UsageError(f.recent_flag, "w = " + std::to_string(r.w) + " exceeds the budget k = " + std::to_string(r.k) +
                                        " (" + budget_desc + "); lower " + f.recent_flag + " or raise " + f.budget_flag);
  if (policy == "snapkv") {
    r.snap_window = f.snap_window_given ? f.snap_window : default_snap_window(r.k);
    if (r.snap_window > r.k)
      throw UsageError("--snap-window", "L = " + std::to_string(r.snap_window) + " exceeds the budget k = " +
                                            std::to_string(r.k) + " (" + budget_desc + "); lower --snap-window or "
                                            "raise " + f.budget_flag);
  }
  return r;
}

kvevict::PolicyParams policy_params(const EvictionFlags& f, const Resolved& r) {
  kvevict::PolicyParams p;
  p.tau_init = f.tau_init;
  p.tau_end = f.tau_end;
  p.sinks = r.sinks;
  if (r.snap_window != 0) p.snap_window = r.snap_window;
  p.snap_kernel = f.snap_kernel;
  p.snap_pooling = f.snap_pooling;
  p.snap_decode = f.snap_decode;
  p.mean_attention = f.mean_attention;
  return p;
}

kvevict::RecentWindow recent_for(const EvictionFlags& f, const Resolved& r, const std::string& policy) {
  if (!is_eviction_policy(policy) || !kvevict::accepts_recent_window(kvevict::parse_policy(policy)))
    return kvevict::RecentWindow::tokens(0);
  if (policy == "tova" && !f.recent) return kvevict::RecentWindow::tokens(0);
  const bool per_layer = f.layer_budgets.kind != kvevict::LayerBudgets::Kind::uniform;
  if (per_layer && (!f.recent || f.recent->is_ratio))
    return kvevict::RecentWindow::ratio(f.recent ? f.recent->ratio : 0.3);
  return kvevict::RecentWindow::tokens(r.w);
}

kvevict::LayerBudgets layer_budgets_for(const EvictionFlags& f, const Resolved& r, const std::string& policy) {
  kvevict::LayerBudgets s = f.layer_budgets;
  if (s.kind == kvevict::LayerBudgets::Kind::pyramid && policy == "snapkv") s.reserved = r.snap_window;
  return s;
}

Resolved resolve(const EvictionFlags& flags, std::size_t prompt_len) { return resolve(flags, prompt_len, ""); }

}  // namespace kvcli

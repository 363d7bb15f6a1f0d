// kvevict tools — replay/replay.cpp: the replay driver (the library does the work).
// SPDX-License-Identifier: Apache-2.0
#include "replay.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <kvevict/kvevict.hpp>
#include <memory>
#include <numeric>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace replay {
namespace {

std::string text(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

/// Everything `make_cache` needs, resolved and checked against the trace.
struct Plan {
  kvevict::Policy policy = kvevict::Policy::keyformer;
  kvevict::CacheConfig config;
  kvevict::PolicyParams params;
  bool trace_noise = false;  ///< inject the trace's gumbel array
};

Plan make_plan(const Trace& trace, const Options& o) {
  Plan plan;
  try {
    plan.policy = kvevict::parse_policy(o.policy);
  } catch (const std::invalid_argument&) {
    throw InputError("--policy",
                     "unknown policy '" + o.policy + "' (expected keyformer, h2o, streaming, window, tova or snapkv)");
  }
  if (plan.policy == kvevict::Policy::knorm || plan.policy == kvevict::Policy::keydiff)
    throw InputError("--policy", o.policy + " scores each token from its key, which a trace of logits does not hold "
                                 "(expected keyformer, h2o, streaming, window, tova or snapkv)");
  const std::size_t P = trace.P(), N = trace.n_tokens;

  // Budget k (library: Budget::resolve at prefill).
  if (o.budget && o.budget_ratio) throw InputError("--budget", "give --budget or --budget-ratio, not both");
  const char* budget_field = o.budget ? "--budget" : "--budget-ratio";
  if (o.budget && *o.budget < 1) throw InputError("--budget", "must be >= 1 (got 0)");
  if (o.budget_ratio && !(std::isfinite(*o.budget_ratio) && *o.budget_ratio > 0.0))
    throw InputError("--budget-ratio", "must be finite and > 0 (got " + text(*o.budget_ratio) + ")");
  if (o.budget && *o.budget > kvevict::Budget::kMaxTokens)
    throw InputError("--budget", "k = " + std::to_string(*o.budget) + " exceeds 2^53");
  plan.config.budget =
      o.budget ? kvevict::Budget::tokens(*o.budget) : kvevict::Budget::ratio(o.budget_ratio.value_or(0.5));
  std::size_t k = 0;  // a ratio resolves to max(1, floor(r * P))
  try {
    k = plan.config.budget.resolve(P);
  } catch (const std::invalid_argument&) {
    throw InputError(budget_field, "r = " + text(plan.config.budget.ratio_value()) + " of prompt_len P = " +
                                       std::to_string(P) + " resolves to more than 2^53 tokens");
  }

  // Recent window w (library: RecentWindow::resolve(k)).
  if (o.recent && o.recent_ratio) throw InputError("--recent", "give --recent or --recent-ratio, not both");
  const char* recent_field = o.recent_ratio ? "--recent-ratio" : "--recent";
  if (o.recent_ratio && !(*o.recent_ratio >= 0.0 && *o.recent_ratio <= 1.0))
    throw InputError("--recent-ratio", "must be in [0, 1] (got " + text(*o.recent_ratio) + ")");
  plan.config.recent = o.recent_ratio ? kvevict::RecentWindow::ratio(*o.recent_ratio)
                                      : kvevict::RecentWindow::tokens(o.recent.value_or(0));
  std::size_t w = plan.config.recent.resolve(k);
  if (kvevict::takes_recent_window(plan.policy) && o.recent_ratio &&
      *o.recent_ratio > 0.0 && k >= 2 && w == 0)
    w = 1;  // the library's floor for accumulated scores (RecentWindow)
  if ((plan.policy == kvevict::Policy::streaming_llm || plan.policy == kvevict::Policy::window) && w != 0)
    throw InputError(recent_field, "streaming and window keep the most recent k - sinks tokens; their recent "
                                   "window is not set separately (it must be 0)");
  if (w > k)
    throw InputError(recent_field, "w = " + std::to_string(w) + " exceeds the budget k = " + std::to_string(k));
  if (plan.policy == kvevict::Policy::streaming_llm && o.sinks > k)
    throw InputError("--sinks", "S = " + std::to_string(o.sinks) + " exceeds the budget k = " + std::to_string(k));

  // Temperature schedule (Keyformer): LinearTemperature(tau_init, tau_end, T).
  if (!(std::isfinite(o.tau_init) && o.tau_init > 0.0f))
    throw InputError("--tau-init", "must be finite and > 0 (got " + text(o.tau_init) + ")");
  if (!(std::isfinite(o.tau_end) && o.tau_end > 0.0f))
    throw InputError("--tau-end", "must be finite and > 0 (got " + text(o.tau_end) + ")");
  if (o.gen_steps && *o.gen_steps < 1) throw InputError("--gen-steps", "must be >= 1 (got 0)");
  plan.params.tau_init = o.tau_init;
  plan.params.tau_end = o.tau_end;
  plan.params.horizon = o.gen_steps.value_or(std::max<std::size_t>(N - P, 1));
  plan.params.sinks = o.sinks;

  // SnapKV: observation window L <= k (default min(32, k)), odd pooling kernel.
  if (o.snap_window && *o.snap_window < 1) throw InputError("--snap-window", "must be >= 1 (got 0)");
  if (o.snap_kernel % 2 == 0)
    throw InputError("--snap-kernel", "must be odd (got " + std::to_string(o.snap_kernel) + ")");
  plan.params.snap_window = o.snap_window.value_or(std::min<std::size_t>(32, k));
  plan.params.snap_kernel = o.snap_kernel;
  plan.params.snap_pooling = o.snap_pooling;
  plan.params.snap_decode = o.snap_decode;
  if (o.mean_attention && plan.policy != kvevict::Policy::h2o && plan.policy != kvevict::Policy::keyformer)
    throw InputError("--mean-attention", std::string("only --policy h2o or keyformer accumulates a score over every "
                                                     "query (the policy is ") + kvevict::policy_name(plan.policy) +
                                             "); drop --mean-attention");
  plan.params.mean_attention = o.mean_attention;
  if (plan.policy == kvevict::Policy::snapkv && plan.params.snap_window > k)
    throw InputError("--snap-window", "L = " + std::to_string(plan.params.snap_window) + " exceeds the budget k = " +
                                          std::to_string(k));

  // Noise.
  Noise noise = o.noise;
  if (noise == Noise::automatic) noise = trace.has_gumbel() ? Noise::trace : Noise::gumbel;
  if (noise == Noise::trace && !trace.has_gumbel())
    throw InputError("--noise", "'trace' needs a gumbel array (JSON field \"gumbel\" or --gumbel FILE.npy)");
  plan.params.gumbel_noise = noise != Noise::none;
  plan.trace_noise = noise == Noise::trace;

  plan.config.n_q_heads = trace.n_q_heads;
  plan.config.shared_heads = o.shared_heads;
  plan.config.head_budgets = o.head_budgets;
  plan.config.seed = o.seed;
  return plan;
}

/// Formats one JSON line per call from the cache's state, slots mapped to ascending positions.
class LineWriter {
 public:
  LineWriter(std::ostream& out, std::size_t n_kv_heads, std::size_t capacity)
      : out_(out), n_kv_(n_kv_heads), order_(capacity) {}

  void write(std::size_t t, const kvevict::CacheInterface& cache) {
    line_ = "{\"t\":";
    append(line_, static_cast<std::uint64_t>(t));
    line_ += ",\"tau\":";
    append(line_, cache.temperature());
    line_ += ",\"kept\":[";
    scores_ = "],\"scores\":[";
    for (std::size_t h = 0; h < n_kv_; ++h) {
      const std::size_t n = cache.length(h);
      const std::int64_t* pos = cache.positions(h);
      const float* score = cache.scores(h);
      std::iota(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(n), std::size_t{0});
      std::sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(n),
                [pos](std::size_t a, std::size_t b) { return pos[a] < pos[b]; });
      line_ += h ? ",[" : "[";
      scores_ += h ? ",[" : "[";
      for (std::size_t i = 0; i < n; ++i) {
        if (i) {
          line_ += ',';
          scores_ += ',';
        }
        append(line_, pos[order_[i]]);
        append(scores_, score[order_[i]]);
      }
      line_ += ']';
      scores_ += ']';
    }
    line_ += scores_;
    line_ += "]}\n";
    out_.write(line_.data(), static_cast<std::streamsize>(line_.size()));
  }

 private:
  template <class Number>
  static void append(std::string& s, Number x) {  // integers exactly; floats in their shortest round-trip form
    char buf[32];
    s.append(buf, std::to_chars(buf, buf + sizeof buf, x).ptr);
  }

  std::ostream& out_;
  std::size_t n_kv_;
  std::vector<std::size_t> order_;
  std::string line_, scores_;
};

}  // namespace

Noise parse_noise(const std::string& name) {
  if (name == "auto") return Noise::automatic;
  if (name == "none") return Noise::none;
  if (name == "gumbel") return Noise::gumbel;
  if (name == "trace") return Noise::trace;
  throw InputError("--noise", "unknown value '" + name + "' (expected auto, none, gumbel or trace)");
}

void replay(const Trace& trace, const Options& options, std::ostream& out) {
  validate(trace);
  const Plan plan = make_plan(trace, options);
  const std::size_t H = trace.n_q_heads, N = trace.n_tokens, P = trace.P(), g = trace.g();
  const std::size_t n_kv = H / g;

  // One layer with head_dim 1: only positions and scores matter to selection.
  kvevict::KVBuffer<float> store(n_kv, N, 1);
  kvevict::KVView<float> kv = store.view();
  const std::unique_ptr<kvevict::CacheInterface> cache = kvevict::make_cache(plan.policy, plan.config, kv, plan.params);
  const std::vector<float> zero_row(n_kv, 0.0f);
  LineWriter writer(out, n_kv, N);

  // Prefill: positions 0..P-1, logits (and noise) rows 0..P-1 as [q_head][P][P].
  for (std::size_t pos = 0; pos < P; ++pos) kv.append(static_cast<std::int64_t>(pos), zero_row.data(), zero_row.data());
  {
    std::vector<float> x(H * P * P, 0.0f), z(plan.trace_noise ? H * P * P : 0, 0.0f);
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t r = 0; r < P; ++r) {
        std::copy_n(trace.logits.data() + trace.index(h, r, 0), r + 1, x.data() + (h * P + r) * P);
        if (plan.trace_noise)
          std::copy_n(trace.gumbel.data() + trace.index(h, r, 0), r + 1, z.data() + (h * P + r) * P);
      }
    cache->prefill(x.data(), P, plan.trace_noise ? z.data() : nullptr);
  }
  writer.write(P - 1, *cache);

  // Decode: position t joins; query head h reads row t at the positions of KV head h / g, by slot.
  std::vector<float> x(H * N, 0.0f), z(plan.trace_noise ? H * N : 0, 0.0f);
  for (std::size_t t = P; t < N; ++t) {
    kv.append(static_cast<std::int64_t>(t), zero_row.data(), zero_row.data());
    std::size_t n = 0;  // the row stride: the longest KV head (all equal unless head-adaptive)
    for (std::size_t j = 0; j < n_kv; ++j) n = std::max(n, kv.length(j));
    for (std::size_t h = 0; h < H; ++h) {
      const std::int64_t* pos = cache->positions(h / g);
      const std::size_t len = kv.length(h / g);
      const float* row = trace.logits.data() + trace.index(h, t, 0);
      for (std::size_t s = 0; s < len; ++s) x[h * n + s] = row[pos[s]];
      if (!plan.trace_noise) continue;
      const float* noise = trace.gumbel.data() + trace.index(h, t, 0);
      for (std::size_t s = 0; s < len; ++s) z[h * n + s] = noise[pos[s]];
    }
    cache->decode_step(x.data(), n, plan.trace_noise ? z.data() : nullptr);
    writer.write(t, *cache);
  }
}

}  // namespace replay

// kvevict tools — llama2/eviction.cpp: choosing each block's kvevict policy by name.
// SPDX-License-Identifier: Apache-2.0
#include "llama2/eviction.hpp"

#include <stdexcept>
#include <string>

namespace llama2 {

KvLayout parse_kv_layout(const std::string& name) {
  if (name == "contiguous") return KvLayout::contiguous;
  if (name == "paged") return KvLayout::paged;
  throw std::invalid_argument("llama2::parse_kv_layout: unknown KV layout '" + name +
                              "' (expected contiguous or paged)");
}

const char* kv_layout_name(KvLayout layout) { return layout == KvLayout::paged ? "paged" : "contiguous"; }

namespace {
/// The library configuration of `settings` for a layer of `n_q_heads` query heads (its seed is set per
/// layer by `layer_seed`). Throws `std::invalid_argument` naming `who` for `n_q_heads == 0`.
kvevict::CacheConfig cache_config(const EvictionSettings& settings, std::size_t n_q_heads, bool shared_heads,
                                  const char* who) {
  if (n_q_heads == 0) throw std::invalid_argument(std::string(who) + ": n_q_heads must be >= 1");
  kvevict::CacheConfig config;
  config.n_q_heads = n_q_heads;
  config.budget = settings.budget;
  config.recent = settings.recent;
  config.shared_heads = shared_heads;
  config.head_budgets = settings.head_budgets;
  return config;
}
/// Per-layer budgets for the factories: empty for uniform (every layer keeps `settings.budget`).
std::vector<std::size_t> factory_budgets(const EvictionSettings& settings, std::size_t n_layers, const char* who) {
  if (settings.layer_budgets.kind == kvevict::LayerBudgets::Kind::uniform) return {};
  if (n_layers == 0)
    throw std::invalid_argument(std::string(who) + ": layer_budgets = " +
                                kvevict::layer_budgets_name(settings.layer_budgets) +
                                " needs the number of layers (n_layers >= 1)");
  return layer_budget_tokens(settings, n_layers);
}
/// Layer `layer`'s generator seed: distinct per layer, derived from the run's seed.
std::uint64_t layer_seed(std::uint64_t seed, std::size_t layer) {
  return seed + 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(layer);
}
}  // namespace

std::vector<std::size_t> layer_budget_tokens(const EvictionSettings& settings, std::size_t n_layers) {
  if (settings.budget.is_ratio() && settings.layer_budgets.kind != kvevict::LayerBudgets::Kind::uniform)
    throw std::invalid_argument(std::string("llama2::layer_budget_tokens: layer_budgets = ") +
                                kvevict::layer_budgets_name(settings.layer_budgets) +
                                " needs a token budget (Budget::tokens), not a ratio of the prompt");
  if (settings.budget.is_ratio()) return std::vector<std::size_t>(n_layers, 0);  // uniform ratio: resolved per prompt
  return kvevict::layer_budgets(settings.layer_budgets, n_layers, settings.budget.token_count(), settings.prompt_len);
}

CacheFactory make_cache_factory(const EvictionSettings& settings, std::size_t n_q_heads, std::size_t n_layers) {
  kvevict::CacheConfig config =
      cache_config(settings, n_q_heads, settings.shared_heads, "llama2::make_cache_factory");
  if (settings.bounded_prefill && settings.prefill_chunk == 0)
    throw std::invalid_argument("llama2::make_cache_factory: bounded_prefill needs prefill_chunk >= 1");
  if (settings.policy == "full") {
    if (settings.bounded_prefill)
      throw std::invalid_argument("llama2::make_cache_factory: bounded_prefill needs an evicting policy, not \"full\"");
    return {};
  }
  config.max_prefill_chunk = settings.prefill_chunk;
  config.bounded_prefill = settings.bounded_prefill;
  const kvevict::Policy policy = kvevict::parse_policy(settings.policy);
  if (policy == kvevict::Policy::snapkv && settings.prefill_chunk != 0)
    throw std::invalid_argument("llama2::make_cache_factory: snapkv scores the prompt with its last L queries and "
                                "needs a one-shot prefill (prefill_chunk = 0, got " +
                                std::to_string(settings.prefill_chunk) + ")");
  const kvevict::PolicyParams params = settings.params;
  const std::uint64_t seed = settings.seed;
  const std::vector<std::size_t> budgets = factory_budgets(settings, n_layers, "llama2::make_cache_factory");
  return [policy, config, params, seed, budgets](std::size_t layer, const kvevict::KVView<float>& view) mutable {
    config.seed = layer_seed(seed, layer);
    if (!budgets.empty()) config.budget = kvevict::Budget::tokens(budgets.at(layer));
    return kvevict::make_cache(policy, config, view, params);
  };
}

}  // namespace llama2

namespace llama2 {

PagedCacheFactory make_paged_cache_factory(const EvictionSettings& settings, std::size_t n_q_heads,
                                           std::size_t n_layers) {
  // A page slot holds the token for every KV head: one selection for the layer.
  kvevict::CacheConfig config = cache_config(settings, n_q_heads, true, "llama2::make_paged_cache_factory");
  if (settings.policy == "full") return {};
  const kvevict::Policy policy = kvevict::parse_policy(settings.policy);
  kvevict::PagedEvictionConfig paged;
  paged.unit = settings.evict_unit;
  paged.start_pages = settings.start_pages;
  paged.page_score = settings.page_score;
  const kvevict::PolicyParams params = settings.params;
  const std::uint64_t seed = settings.seed;
  const std::vector<std::size_t> budgets = factory_budgets(settings, n_layers, "llama2::make_paged_cache_factory");
  return [policy, config, paged, params, seed, budgets](std::size_t layer, const kvevict::PagedKVView<float>& view,
                                                        kvevict::PagePool& pool) mutable {
    config.seed = layer_seed(seed, layer);
    if (!budgets.empty()) config.budget = kvevict::Budget::tokens(budgets.at(layer));
    return kvevict::make_paged_cache(policy, config, paged, view, pool, params);
  };
}

std::unique_ptr<Engine> make_engine(const Model& model, const EvictionSettings& settings) {
  const std::size_t n_q = model.config().n_heads;
  if (settings.expected_attention) {
    if (settings.policy != "tova")
      throw std::invalid_argument("llama2::make_engine: expected_attention needs policy \"tova\" (a score that "
                                  "reads the last row and replaces itself each step), got \"" + settings.policy + "\"");
    if (settings.kv_layout != KvLayout::contiguous)
      throw std::invalid_argument("llama2::make_engine: expected_attention needs kv_layout = contiguous");
    if (settings.prefill_chunk != 0)
      throw std::invalid_argument("llama2::make_engine: expected_attention needs a one-shot prefill (prefill_chunk = "
                                  "0, got " + std::to_string(settings.prefill_chunk) + ")");
  }
  if (settings.kv_layout == KvLayout::paged) {
    if (settings.head_budgets.is_adaptive())
      throw std::invalid_argument("llama2::make_engine: head_budgets = adaptive needs kv_layout = contiguous (a page "
                                  "slot holds every KV head's token: the paged layout selects once per block)");
    if (settings.prefill_chunk != 0 || settings.bounded_prefill)
      throw std::invalid_argument("llama2::make_engine: prefill_chunk = " + std::to_string(settings.prefill_chunk) +
                                  " needs kv_layout = contiguous (PagedCache has no chunked prefill)");
    if (settings.page_size == 0) throw std::invalid_argument("llama2::make_engine: page_size must be >= 1 (got 0)");
    PagedKVOptions options;
    options.page_size = settings.page_size;
    options.layout = settings.page_layout;
    return std::make_unique<Engine>(model, options, make_paged_cache_factory(settings, n_q, model.config().n_layers),
                                    settings.context);
  }
  if (settings.kv_layout != KvLayout::contiguous)
    throw std::invalid_argument("llama2::make_engine: unknown kv_layout " +
                                std::to_string(static_cast<int>(settings.kv_layout)));
  if (settings.evict_unit != kvevict::EvictUnit::token)
    throw std::invalid_argument("llama2::make_engine: evict_unit = page needs kv_layout = paged");
  if (settings.start_pages != 0)
    throw std::invalid_argument("llama2::make_engine: start_pages = " + std::to_string(settings.start_pages) +
                                " needs kv_layout = paged and evict_unit = page");
  if (settings.page_score != kvevict::PageScore::sum)
    throw std::invalid_argument("llama2::make_engine: page_score = mean needs kv_layout = paged and evict_unit = page");
  auto engine = std::make_unique<Engine>(model, make_cache_factory(settings, n_q, model.config().n_layers),
                                         settings.prefill_chunk, settings.context);
  if (settings.expected_attention) engine->set_expected_attention(settings.expected_attention);
  return engine;
}

}  // namespace llama2

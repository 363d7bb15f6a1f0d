// kvevict tools — llama2/eviction.hpp: choosing each block's kvevict policy by name.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvevict/budget.hpp"
#include "kvevict/head_budgets.hpp"
#include "kvevict/layer_budgets.hpp"
#include "kvevict/paged_presets.hpp"
#include "kvevict/presets.hpp"
#include "llama2/engine.hpp"

namespace llama2 {

/// Where an `Engine` keeps K and V.
enum class KvLayout {
  contiguous,  ///< one `[kv_head][slot][head_dim]` buffer per block
  paged        ///< pages from a per-block `kvevict::PagePool`, addressed by a page table
};
/// Parses "contiguous" or "paged"; throws `std::invalid_argument` naming the value otherwise.
KvLayout parse_kv_layout(const std::string& name);
/// "contiguous" or "paged".
const char* kv_layout_name(KvLayout layout);

/// What `make_cache_factory` builds for every block of an `Engine`.
struct EvictionSettings {
  /// "full" (no eviction), or a `kvevict::parse_policy` name: "keyformer",
  /// "h2o", "streaming", "window", "tova", "snapkv".
  std::string policy = "full";
  /// Budget `k` per KV head: tokens, or a fraction of the prompt length.
  kvevict::Budget budget = kvevict::Budget::ratio(0.5);
  /// How the model's total budget `n_layers · k` is split over the layers (`kvevict::layer_budgets`):
  /// uniform (default), PyramidKV or weights. A non-uniform schedule needs a token budget and the
  /// number of layers (`make_engine`, or `make_cache_factory`'s `n_layers`); layer `l` then gets
  /// `Budget::tokens(layer_budgets(...)[l])`, and a `recent` ratio resolves against that layer's `k`.
  kvevict::LayerBudgets layer_budgets;
  /// The prompt length, if known (0 = unknown): PyramidKV's short-prompt rule (no layer above it).
  std::size_t prompt_len = 0;
  /// Recent window `w`: tokens, or a fraction of `k` (TOVA: none by default; it accepts one).
  kvevict::RecentWindow recent = kvevict::RecentWindow::ratio(0.3);
  /// `true`: every KV head of a block keeps the same tokens (contiguous layout).
  /// The paged layout always selects once per block (a page slot holds every KV
  /// head's row), whatever this says; its token unit then equals the
  /// contiguous layout with `shared_heads = true`, bit for bit.
  bool shared_heads = false;
  /// How a block's budget is shared among its KV heads (`kvevict::CacheConfig::head_budgets`): uniform
  /// (default) or AdaKV's adaptive split (contiguous layout, per-head selection; the engine's attention reads
  /// each KV head over its own length).
  kvevict::HeadBudgets head_budgets;
  /// Set: every block's TOVA cache ranks by Expected Attention (`Engine::set_expected_attention`; Devoto et al.
  /// 2025, kvpress's ExpectedAttentionPress) instead of the step's logits. Needs policy "tova", the contiguous
  /// layout and a one-shot prefill (`make_engine` throws otherwise); works with `head_budgets` adaptive
  /// (kvpress's AdaKV(ExpectedAttention)).
  std::optional<kvevict::ExpectedAttentionOptions> expected_attention;
  /// Contiguous buffers (default) or pages.
  KvLayout kv_layout = KvLayout::contiguous;
  /// Paged layout: tokens per page (>= 1) and the page layout (NHD or HND).
  std::size_t page_size = 16;
  kvevict::PageLayout page_layout = kvevict::PageLayout::NHD;
  /// Paged layout: evict tokens (default) or whole pages. `page` with the
  /// contiguous layout is rejected.
  kvevict::EvictUnit evict_unit = kvevict::EvictUnit::token;
  /// Page unit: pages at the start never evicted, and sum / mean page score
  /// (see `kvevict::PagedEvictionConfig`); other values with the token unit are rejected.
  std::size_t start_pages = 0;
  kvevict::PageScore page_score = kvevict::PageScore::sum;
  /// τ schedule, horizon T, Gumbel noise on/off, StreamingLLM sinks.
  kvevict::PolicyParams params;
  /// Chunked prefill: chunk size `C` (0 = one-shot), given to every cache as
  /// `CacheConfig::max_prefill_chunk`; pass the same value to `Engine`.
  std::size_t prefill_chunk = 0;
  /// Bounded prefill (needs `prefill_chunk >= 1` and a token budget): every
  /// cache evicts to `k` after each chunk (`CacheConfig::bounded_prefill`).
  bool bounded_prefill = false;
  /// Noise seed; block `l` uses `seed + l * 0x9E3779B97F4A7C15` (wrapping) so
  /// blocks draw independent noise and each run is reproducible.
  std::uint64_t seed = 0;
  /// `Engine`'s `context`: the most positions the engine holds (0 = the model's `seq_len`).
  std::size_t context = 0;
};

/// The budget of each of `n_layers` blocks under `settings` (`kvevict::layer_budgets` of
/// `settings.layer_budgets` over the token budget `k`, with `settings.prompt_len`). Throws
/// `std::invalid_argument` for a non-uniform schedule with a ratio budget, and what
/// `kvevict::layer_budgets` throws (messages name "llama2::layer_budget_tokens" or the library).
std::vector<std::size_t> layer_budget_tokens(const EvictionSettings& settings, std::size_t n_layers);

/// A `CacheFactory` for `Engine` that gives every block the policy in
/// `settings` (an empty factory for "full"), with `CacheConfig::n_q_heads =
/// n_q_heads` and block `l`'s budget from `layer_budget_tokens(settings, n_layers)` (uniform:
/// `settings.budget` as given; `n_layers = 0`, unknown, allows only uniform budgets).
/// Throws `std::invalid_argument` for an unknown policy name or
/// `n_q_heads == 0`, or `bounded_prefill` without `prefill_chunk` or with
/// "full", snapkv with `prefill_chunk != 0`, a non-uniform schedule without `n_layers` or with a ratio
/// budget; the factory itself throws
/// what `kvevict::make_cache` throws (e.g. keyformer with `params.horizon == 0`, a token recent window
/// above a layer's budget, snapkv with `snap_window` above it).
CacheFactory make_cache_factory(const EvictionSettings& settings, std::size_t n_q_heads, std::size_t n_layers = 0);

/// The paged counterpart of `make_cache_factory` (an empty factory for
/// "full"): every block gets `kvevict::make_paged_cache` with the same
/// `CacheConfig` (`shared_heads = true`), per-block seed and parameters, and
/// `PagedEvictionConfig{evict_unit, start_pages, page_score}`. Throws
/// `std::invalid_argument` as `make_cache_factory` does.
PagedCacheFactory make_paged_cache_factory(const EvictionSettings& settings, std::size_t n_q_heads,
                                           std::size_t n_layers = 0);

/// An engine as `settings` describe it: contiguous (`make_cache_factory`) or
/// paged (`PagedKVOptions{page_size, page_layout}`, `make_paged_cache_factory`).
/// Throws `std::invalid_argument` for paged options with the contiguous layout
/// (`evict_unit = page`, `start_pages != 0`, `page_score = mean`), `page_size == 0`,
/// a `context` above the model's `seq_len`, `expected_attention` with a policy other than "tova", the paged
/// layout or a chunked prefill, and whatever the factories and `Engine::set_expected_attention` throw.
std::unique_ptr<Engine> make_engine(const Model& model, const EvictionSettings& settings);

}  // namespace llama2

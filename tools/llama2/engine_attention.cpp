// kvevict tools — llama2/engine_attention.cpp: one layer's attention in the forward pass: RoPE, q·K over the
// kvevict view (per KV head when the heads hold different lengths), softmax · V, and the per-head hot path that
// scores each KV head right after its q·K.
// SPDX-License-Identifier: Apache-2.0
#include "llama2/engine.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <stdexcept>
#include <string>

#include "kvevict/attention/attention_logits.hpp"
#include "llama2/engine_kernels.hpp"

namespace llama2 {
using namespace kernels;  // NOLINT: the engine's own kernels and maps (engine_kernels.hpp)

// Rotates each head's interleaved pairs (2i, 2i+1) of v by pos * theta^(-2i/head_dim).
void Engine::rope(float* v, std::size_t n_heads, std::size_t pos) const {
  const std::size_t hd = config_.head_dim(), half = hd / 2;
  const float* cs = rope_cos_.data() + pos * half;
  const float* sn = rope_sin_.data() + pos * half;
  for (std::size_t h = 0; h < n_heads; ++h) {
    float* head = v + h * hd;
    for (std::size_t i = 0; i < half; ++i) {
      const float v0 = head[2 * i], v1 = head[2 * i + 1];
      head[2 * i] = v0 * cs[i] - v1 * sn[i];
      head[2 * i + 1] = v0 * sn[i] + v1 * cs[i];
    }
  }
}

// All query heads against the live slots [0, n) of the view (n = every KV head's length):
// logits[h][s] = q_h·k_s / sqrt(head_dim) (kvevict::attention_logits), out_h = sum_s softmax(logits[h])_s v_s.
void Engine::attend(const kvevict::KVView<const float>& view, const float* q, float* logits, float* out) {
  const Config& c = config_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim()));
  if (ragged(view)) {  // head-adaptive budgets: head j over its own lengths[j] slots, rows of stride max_j
    const std::size_t n = row_stride(view), group = c.n_heads / c.n_kv_heads, hd = c.head_dim();
    for (std::size_t h = 0; h < c.n_heads; ++h)  // kvevict::attention_logits's rows: the same floats
      kvevict::detail::head_logits(view, h / group, q + h * hd, logits + h * n, scale, nullptr);
  } else {
    kvevict::attention_logits(view, q, c.n_heads, logits, scale);
  }
  auto head = [&](std::size_t h) { attend_values(view, h, logits, out); };  // heads may run in parallel
  if (pool_)
    pool_->parallel_for(c.n_heads, head);
  else
    for (std::size_t h = 0; h < c.n_heads; ++h) head(h);
}

bool Engine::ragged(const kvevict::KVView<const float>& view) noexcept {
  for (std::size_t j = 1; j < view.n_kv_heads; ++j)
    if (view.lengths[j] != view.lengths[0]) return true;
  return false;
}

std::size_t Engine::row_stride(const kvevict::KVView<const float>& view) noexcept {
  std::size_t n = 0;
  for (std::size_t j = 0; j < view.n_kv_heads; ++j) n = std::max(n, view.lengths[j]);
  return n;
}

void Engine::attend_values(const kvevict::KVView<const float>& view, std::size_t h, const float* logits,
                           float* out) noexcept {
  const Config& c = config_;
  const std::size_t hd = c.head_dim(), group = c.n_heads / c.n_kv_heads, n = view.length(h / group);
  const std::size_t stride = row_stride(view);  // n, unless the KV heads hold different lengths
  float* probs = att_probs_.data() + h * c.seq_len;  // each head its own probs row
  const SlotRows values(view.v_row(h / group, 0), static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(hd),
                        Eigen::OuterStride<>(static_cast<Eigen::Index>(view.slot_stride)));
  std::copy(logits + h * stride, logits + h * stride + n, probs);
  softmax(probs, n);
  VectorMap(out + h * hd, static_cast<Eigen::Index>(hd)).noalias() =
      values.transpose() * ConstVectorMap(probs, static_cast<Eigen::Index>(n));
}

void Engine::attend_hot(const kvevict::KVView<const float>& view, const float* q, float* logits, float* out,
                        kvevict::CacheInterface& cache) {
  const Config& c = config_;
  // n: the logits' row stride, every KV head's length (or the longest, with head-adaptive budgets)
  const std::size_t hd = c.head_dim(), group = c.n_heads / c.n_kv_heads, n = row_stride(view);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  cache.begin_decode_step(n);  // throws before anything changed (the step then resets the engine)
  for (std::size_t j = 0; j < c.n_kv_heads; ++j) {
    group_done_[j].store(0, std::memory_order_relaxed);
    head_errors_[j] = nullptr;
  }
  auto head = [&](std::size_t h) noexcept {
    const std::size_t j = h / group;
    // kvevict::attention_logits's row of query head h: the same floats as attend()
    kvevict::detail::head_logits(view, j, q + h * hd, logits + h * n, scale, nullptr);
    // The group's last row in scores the KV head while the rows are hot; the view is unchanged until
    // end_decode_step, so the other heads' V products below may run meanwhile.
    if (group_done_[j].fetch_add(1, std::memory_order_acq_rel) + 1 == group) {
      try {
        cache.score_decode_head(j, logits + j * group * n);
      } catch (...) {
        head_errors_[j] = std::current_exception();
      }
    }
    attend_values(view, h, logits, out);
  };
  if (pool_)
    pool_->parallel_for(c.n_heads, head);
  else
    for (std::size_t h = 0; h < c.n_heads; ++h) head(h);
  for (std::size_t j = 0; j < c.n_kv_heads; ++j)
    if (head_errors_[j]) std::rethrow_exception(head_errors_[j]);  // the lowest KV head's error
  cache.end_decode_step();
}

void Engine::step_attention(std::size_t l) {
  const Config& c = config_;
  const std::size_t rot = hooks_ ? hooks_->rotary_position(*this, l, position_) : position_;
  // The result indexes the RoPE tables ([context][head_dim / 2]): checked before anything changes.
  if (rot >= c.seq_len)
    throw std::invalid_argument("llama2::Engine: EngineHooks::rotary_position returned " + std::to_string(rot) +
                                " for block " + std::to_string(l) + ", position " + std::to_string(position_) +
                                "; it must be < context() = " + std::to_string(c.seq_len));
  if (ea_options_) q_pre_ = q_;  // Expected Attention's statistics are of the queries before RoPE
  rope(q_.data(), c.n_heads, rot);
  rope(k_.data(), c.n_kv_heads, rot);
  const kvevict::KVView<float>& view = store_->append(l, position_, k_.data(), v_.data(), false);
  kvevict::CacheInterface* cache = store_->cache(l);
  if (ea_options_) {  // the model attends as always; the cache ranks by the expected attention
    attend(view, q_.data(), att_logits_.data(), xb2_.data());
    ea_stats_[l].add(q_pre_.data(), 1);
    const std::size_t n = row_stride(view);
    expected_rows(l, position_ + 1, n);
    cache->decode_step(ea_rows_.data(), n);
    return;
  }
  if (cache && !hooks_ && cache->has_per_head_step()) {  // each KV head scored while its logits are hot
    attend_hot(view, q_.data(), att_logits_.data(), xb2_.data(), *cache);
    return;
  }
  attend(view, q_.data(), att_logits_.data(), xb2_.data());
  if (hooks_) {
    if (ragged(view))
      throw std::invalid_argument("llama2::Engine: the engine's hooks read every KV head at one length, but block " +
                                  std::to_string(l) + "'s KV heads hold different lengths (head-adaptive budgets)");
    hooks_->decode_attention(*this, l, att_logits_.data(), view.length(0));
  }
  if (cache) {
    cache->decode_step(att_logits_.data(), row_stride(view));
    if (hooks_) hooks_->after_cache(*this, l, *cache, false);
  }
}

}  // namespace llama2

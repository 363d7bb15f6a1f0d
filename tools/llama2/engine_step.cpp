// kvevict tools — llama2/engine_step.cpp: the batch driver: decode steps (one engine, or a batch sharing each
// weight read) and the prefill of a prompt (whole or in chunks, one engine or a lead with followers).
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

const float* Engine::step(int token) {
  check_token(token, "step");
  if (position_ >= config_.seq_len)
    throw std::length_error("llama2::Engine::step: the context is full (position " + std::to_string(position_) +
                            " = context)");
  Engine* self = this;
  step_engines(&self, &token, 1);
  return logits_.data();
}

void Engine::step_batch(const std::vector<Engine*>& engines, const std::vector<int>& tokens) {
  if (engines.size() != tokens.size())
    throw std::invalid_argument("llama2::Engine::step_batch: " + std::to_string(engines.size()) + " engines but " +
                                std::to_string(tokens.size()) + " tokens");
  for (std::size_t i = 0; i < engines.size(); ++i) {
    Engine* e = engines[i];
    if (e == nullptr)
      throw std::invalid_argument("llama2::Engine::step_batch: engines[" + std::to_string(i) + "] is null");
    if (&e->model_ != &engines[0]->model_)
      throw std::invalid_argument("llama2::Engine::step_batch: engines[" + std::to_string(i) +
                                  "] runs another Model object than engines[0]");
    for (std::size_t j = 0; j < i; ++j)
      if (engines[j] == e)
        throw std::invalid_argument("llama2::Engine::step_batch: engines[" + std::to_string(i) +
                                    "] is engines[" + std::to_string(j) + "] again");
    e->check_token(tokens[i], "step_batch");
    if (e->position_ >= e->config_.seq_len)
      throw std::length_error("llama2::Engine::step_batch: engines[" + std::to_string(i) +
                              "]'s context is full (position " + std::to_string(e->position_) + " = context)");
  }
  if (!engines.empty()) step_engines(engines.data(), tokens.data(), engines.size());
}

void Engine::step_engines(Engine* const* es, const int* tokens, std::size_t n) {
  const Engine& e0 = *es[0];
  const Config& c = e0.config_;  // every engine's, but seq_len (not read here)
  const Model& model = e0.model_;
  const auto dim = static_cast<Eigen::Index>(c.dim);

  for (std::size_t i = 0; i < n; ++i)
    es[i]->x_ = ConstVectorMap(model.token_embedding() + static_cast<std::size_t>(tokens[i]) * c.dim, dim);
  // An engine whose hook or cache throws is reset and leaves the batch; the others complete the step
  // (their bits do not depend on the batch), then the first exception (in block, then engine order)
  // propagates. Only that path allocates (the survivors' list, the reset).
  std::vector<Engine*> survivors;
  std::exception_ptr error;
  for (std::size_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = model.layer(l);
    // Attention: q, k, v; RoPE; k and v join the cache once, at this position.
    for (std::size_t i = 0; i < n; ++i) rmsnorm(es[i]->xb_.data(), es[i]->x_.data(), w.rms_att, c.dim, c.rms_eps);
    gemv_engines(es, n, &Engine::q_, w.wq, c.dim, c.dim, &Engine::xb_, false);
    gemv_engines(es, n, &Engine::k_, w.wk, c.kv_dim(), c.dim, &Engine::xb_, false);
    gemv_engines(es, n, &Engine::v_, w.wv, c.kv_dim(), c.dim, &Engine::xb_, false);
    bool failed = false;
    for (std::size_t i = 0; i < n; ++i) {
      Engine& e = *es[i];
      try {
        e.step_attention(l);
      } catch (...) {
        if (!error) error = std::current_exception();
        e.step_failed_ = failed = true;
      }
    }
    if (failed) {
      std::vector<Engine*> next;
      for (std::size_t i = 0; i < n; ++i) {
        if (!es[i]->step_failed_) {
          next.push_back(es[i]);
          continue;
        }
        es[i]->step_failed_ = false;
        es[i]->reset();
      }
      survivors.swap(next);
      es = survivors.data();
      n = survivors.size();
      if (n == 0) std::rethrow_exception(error);
    }
    gemv_engines(es, n, &Engine::x_, w.wo, c.dim, c.dim, &Engine::xb2_, true);

    // Feed-forward: x += w2 (silu(w1 xb) * w3 xb).
    for (std::size_t i = 0; i < n; ++i) rmsnorm(es[i]->xb_.data(), es[i]->x_.data(), w.rms_ffn, c.dim, c.rms_eps);
    gemv_engines(es, n, &Engine::h1_, w.w1, c.hidden_dim, c.dim, &Engine::xb_, false);
    gemv_engines(es, n, &Engine::h3_, w.w3, c.hidden_dim, c.dim, &Engine::xb_, false);
    for (std::size_t i = 0; i < n; ++i) swiglu(es[i]->h1_.data(), es[i]->h3_.data(), c.hidden_dim);
    gemv_engines(es, n, &Engine::x_, w.w2, c.dim, c.hidden_dim, &Engine::h1_, true);
  }
  for (std::size_t i = 0; i < n; ++i)
    rmsnorm(es[i]->xb_.data(), es[i]->x_.data(), model.rms_final(), c.dim, c.rms_eps);
  gemv_engines(es, n, &Engine::logits_, model.classifier(), c.vocab_size, c.dim, &Engine::xb_, false);
  for (std::size_t i = 0; i < n; ++i) ++es[i]->position_;
  if (error) std::rethrow_exception(error);
}

void Engine::check_prompt(const std::vector<int>& tokens, const char* where) const {
  if (position_ != 0)
    throw std::logic_error(std::string("llama2::Engine::") + where + ": the sequence has already started (position " +
                           std::to_string(position_) + "); call reset() first");
  if (tokens.empty() || tokens.size() > config_.seq_len)
    throw std::invalid_argument(std::string("llama2::Engine::") + where + ": prompt length must be in [1, context = " +
                                std::to_string(config_.seq_len) + "] (got " + std::to_string(tokens.size()) + ")");
  for (int t : tokens) check_token(t, where);
}

const RowMatrix& Engine::prefill(const std::vector<int>& tokens) {
  check_prompt(tokens, "prefill");
  try {
    return run_prefill(tokens, {});
  } catch (...) {
    reset();  // a cache may have thrown half-way through the blocks
    throw;
  }
}

const RowMatrix& Engine::prefill_batch(Engine& lead, const std::vector<Engine*>& followers,
                                       const std::vector<int>& tokens) {
  lead.check_prompt(tokens, "prefill_batch");
  if (lead.prefill_chunk_ != 0)
    throw std::invalid_argument("llama2::Engine::prefill_batch: the lead prefills in chunks of " +
                                std::to_string(lead.prefill_chunk_) + " (only a one-shot prefill can be shared)");
  for (std::size_t i = 0; i < followers.size(); ++i) {
    const Engine* f = followers[i];
    const std::string name = "llama2::Engine::prefill_batch: followers[" + std::to_string(i) + "]";
    if (f == nullptr) throw std::invalid_argument(name + " is null");
    if (f == &lead) throw std::invalid_argument(name + " is the lead");
    for (std::size_t j = 0; j < i; ++j)
      if (followers[j] == f) throw std::invalid_argument(name + " is followers[" + std::to_string(j) + "] again");
    if (&f->model_ != &lead.model_) throw std::invalid_argument(name + " runs another Model object than the lead");
    if (f->prefill_chunk_ != 0)
      throw std::invalid_argument(name + " prefills in chunks of " + std::to_string(f->prefill_chunk_) +
                                  " (only a one-shot prefill can be shared)");
    if (f->position_ != 0)
      throw std::invalid_argument(name + " is at position " + std::to_string(f->position_) + ", not 0");
    if (tokens.size() > f->config_.seq_len)
      throw std::invalid_argument(name + "'s context " + std::to_string(f->config_.seq_len) +
                                  " is shorter than the prompt (" + std::to_string(tokens.size()) + " tokens)");
  }
  try {
    const RowMatrix& out = lead.run_prefill(tokens, followers);
    for (Engine* f : followers) f->prefill_logits_ = out;
    return out;
  } catch (...) {
    lead.reset();
    for (Engine* f : followers) f->reset();
    throw;
  }
}

const RowMatrix& Engine::run_prefill(const std::vector<int>& tokens, const std::vector<Engine*>& followers) {
  const Config& c = config_;
  const std::size_t P = tokens.size();
  const auto rows = static_cast<Eigen::Index>(P), dim = static_cast<Eigen::Index>(c.dim),
             kv_dim = static_cast<Eigen::Index>(c.kv_dim()), hidden = static_cast<Eigen::Index>(c.hidden_dim);

  // Block by block over the whole prompt: X is the residual stream, row t = position t.
  RowMatrix X(rows, dim), XB(rows, dim), XB2(rows, dim), Q(rows, dim), K(rows, kv_dim), V(rows, kv_dim),
      H1(rows, hidden), H3(rows, hidden);
  for (std::size_t t = 0; t < P; ++t)
    X.row(static_cast<Eigen::Index>(t)) =
        ConstVectorMap(model_.token_embedding() + static_cast<std::size_t>(tokens[t]) * c.dim, dim).transpose();
  // One-shot: [q_head][P][P]. Chunked: [q_head][C][n] for the current chunk (n = held + C <= P).
  const std::size_t C = prefill_chunk_ == 0 ? P : std::min(prefill_chunk_, P);
  prompt_attention_logits_.assign(c.n_heads * C * P, 0.0f);

  for (std::size_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = model_.layer(l);
    for (Eigen::Index t = 0; t < rows; ++t) rmsnorm(XB.row(t).data(), X.row(t).data(), w.rms_att, c.dim, c.rms_eps);
    gemm_t(Q, XB, w.wq, c.dim, false);
    gemm_t(K, XB, w.wk, c.kv_dim(), false);
    gemm_t(V, XB, w.wv, c.kv_dim(), false);
    // Causal attention: query t runs right after token t joins the view, so it sees the slots
    // [0, held + i] (one-shot: held = 0, i = t, positions 0..t). Its logits become row i of the
    // chunk's [q_head][C][n] matrix (one-shot: row t of [q_head][P][P]). Paged engines prefill in
    // one shot (PagedCache has no chunked prefill: the paged constructor leaves prefill_chunk_ 0).
    kvevict::CacheInterface* cache = store_->cache(l);
    // Expected Attention (this engine or a follower): the queries before RoPE, and the logits' last rows as
    // computed (each engine with it gets its own last row, then the computed one is put back).
    bool any_ea = ea_options_.has_value();
    for (const Engine* f : followers) any_ea = any_ea || f->ea_options_.has_value();
    RowMatrix q_pre;
    std::vector<float> last_rows;
    if (any_ea) q_pre = Q;
    for (std::size_t c0 = 0; c0 < P; c0 += C) {
      const std::size_t len = std::min(C, P - c0);
      std::size_t held = 0, n = len;
      for (std::size_t i = 0; i < len; ++i) {
        const std::size_t t = c0 + i;
        const auto r = static_cast<Eigen::Index>(t);
        rope(Q.row(r).data(), c.n_heads, t);
        rope(K.row(r).data(), c.n_kv_heads, t);
        // Paged: the block's sequence is empty before t = 0 and nothing is evicted before the
        // whole prompt is in, so the gather scratch only needs the new slot (t > 0).
        const kvevict::KVView<float>& view = store_->append(l, t, K.row(r).data(), V.row(r).data(), t > 0);
        if (i == 0) held = view.length(0) - 1, n = held + len;
        attend(view, Q.row(r).data(), att_logits_.data(), XB2.row(r).data());
        for (std::size_t h = 0; h < c.n_heads; ++h)
          std::copy_n(att_logits_.data() + h * (held + i + 1), held + i + 1,
                      prompt_attention_logits_.data() + (h * len + i) * n);
      }
      if (cache && prefill_chunk_ != 0) cache->prefill_chunk(prompt_attention_logits_.data(), len, n);
    }
    gemm_t(X, XB2, w.wo, c.dim, true);
    // One-shot prefill with Expected Attention: engine e's statistics from the prompt's queries past its sinks,
    // and its rows in place of every query head's last logits row ([q_head][P][P], row P - 1).
    auto expected_last_rows = [&](Engine& e) {
      if (last_rows.empty()) {
        last_rows.resize(c.n_heads * P);
        for (std::size_t h = 0; h < c.n_heads; ++h)
          std::copy_n(prompt_attention_logits_.data() + (h * P + P - 1) * P, P, last_rows.data() + h * P);
      }
      const std::size_t first = P > e.ea_options_->n_sink ? e.ea_options_->n_sink : 0;
      e.ea_stats_[l].clear();
      e.ea_stats_[l].add(q_pre.row(static_cast<Eigen::Index>(first)).data(), P - first);
      e.expected_rows(l, P, P);
      for (std::size_t h = 0; h < c.n_heads; ++h)
        std::copy_n(e.ea_rows_.data() + h * P, P, prompt_attention_logits_.data() + (h * P + P - 1) * P);
    };
    auto computed_last_rows = [&] {
      if (last_rows.empty()) return;
      for (std::size_t h = 0; h < c.n_heads; ++h)
        std::copy_n(last_rows.data() + h * P, P, prompt_attention_logits_.data() + (h * P + P - 1) * P);
    };
    if (cache) {
      if (prefill_chunk_ == 0) {
        if (ea_options_) expected_last_rows(*this);
        cache->prefill(prompt_attention_logits_.data(), P);
        computed_last_rows();
      } else {
        cache->finish_prefill();
      }
      if (hooks_) hooks_->after_cache(*this, l, *cache, true);
    }
    // prefill_batch: each follower's block gets the rows and logits its own one-shot prefill would make
    // (the same rotated K/V, appended in order; the same [q_head][P][P] logits).
    for (Engine* f : followers) {
      for (std::size_t t = 0; t < P; ++t) {
        const auto r = static_cast<Eigen::Index>(t);
        f->store_->append(l, t, K.row(r).data(), V.row(r).data(), t > 0);
      }
      if (kvevict::CacheInterface* fc = f->store_->cache(l)) {
        if (f->ea_options_) expected_last_rows(*f);
        fc->prefill(prompt_attention_logits_.data(), P);
        computed_last_rows();
        if (f->hooks_) f->hooks_->after_cache(*f, l, *fc, true);
      }
    }

    for (Eigen::Index t = 0; t < rows; ++t) rmsnorm(XB.row(t).data(), X.row(t).data(), w.rms_ffn, c.dim, c.rms_eps);
    gemm_t(H1, XB, w.w1, c.hidden_dim, false);
    gemm_t(H3, XB, w.w3, c.hidden_dim, false);
    for (Eigen::Index t = 0; t < rows; ++t) swiglu(H1.row(t).data(), H3.row(t).data(), c.hidden_dim);
    gemm_t(X, H1, w.w2, c.dim, true);
  }
  // The classifier for every position, or (PrefillLogits::last) for the last one only: a [P][vocab]
  // product is most of a long prompt's time on a large vocabulary (SmolLM2: 49152).
  const Eigen::Index first = prefill_logits_mode_ == PrefillLogits::all ? 0 : rows - 1;
  RowMatrix final_rows(rows - first, dim);
  for (Eigen::Index t = first; t < rows; ++t)
    rmsnorm(final_rows.row(t - first).data(), X.row(t).data(), model_.rms_final(), c.dim, c.rms_eps);
  prefill_logits_.resize(rows - first, static_cast<Eigen::Index>(c.vocab_size));
  gemm_t(prefill_logits_, final_rows, model_.classifier(), c.vocab_size, false);
  position_ = P;
  for (Engine* f : followers) f->position_ = P;
  return prefill_logits_;
}

}  // namespace llama2

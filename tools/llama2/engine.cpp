// kvevict tools — llama2/engine.cpp: the engine's life cycle (construction, reset, hooks, threads, views) and its
// weight products; the forward pass is engine_attention.cpp (one layer's attention) and engine_step.cpp (decode steps
// and prefill, one engine or a batch).
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

void Engine::gemv_engines(Engine* const* engines, std::size_t n, Eigen::VectorXf Engine::*y, const float* w,
                          std::size_t out, std::size_t in, Eigen::VectorXf Engine::*x, bool accumulate) {
  const std::size_t tasks = (out + kRowsPerTask - 1) / kRowsPerTask;
  // Task-major: one task's rows of `w` serve every engine in turn while they are in cache. Each engine's
  // product is the same Eigen expression on the same operands as with one engine, so the same floats.
  auto task = [&](std::size_t t) {
    const std::size_t r0 = t * kRowsPerTask, rows_n = std::min(kRowsPerTask, out - r0);
    const ConstMatrixMap rows(w + r0 * in, static_cast<Eigen::Index>(rows_n), static_cast<Eigen::Index>(in));
    for (std::size_t e = 0; e < n; ++e) {
      VectorMap dst((engines[e]->*y).data() + r0, static_cast<Eigen::Index>(rows_n));
      const ConstVectorMap src((engines[e]->*x).data(), static_cast<Eigen::Index>(in));
      if (accumulate)
        dst.noalias() += rows * src;
      else
        dst.noalias() = rows * src;
    }
  };
  if (kvtools::ThreadPool* pool = engines[0]->pool_)
    pool->parallel_for(tasks, task);
  else
    for (std::size_t t = 0; t < tasks; ++t) task(t);
}

void Engine::gemm_t(RowMatrix& y, const RowMatrix& x, const float* w, std::size_t out, bool accumulate) {
  const std::size_t in = static_cast<std::size_t>(x.cols()), tasks = (out + kRowsPerTask - 1) / kRowsPerTask;
  auto task = [&](std::size_t t) {
    const std::size_t c0 = t * kRowsPerTask, n = std::min(kRowsPerTask, out - c0);
    auto dst = y.middleCols(static_cast<Eigen::Index>(c0), static_cast<Eigen::Index>(n));
    const ConstMatrixMap rows(w + c0 * in, static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(in));
    if (accumulate)
      dst.noalias() += x * rows.transpose();
    else
      dst.noalias() = x * rows.transpose();
  };
  if (pool_)
    pool_->parallel_for(tasks, task);
  else
    for (std::size_t t = 0; t < tasks; ++t) task(t);
}

namespace {

Config with_context(const Config& model_config, std::size_t context) {
  if (context > model_config.seq_len)
    throw std::invalid_argument("llama2::Engine: context must be at most the model's seq_len = " +
                                std::to_string(model_config.seq_len) + " (got " + std::to_string(context) + ")");
  Config c = model_config;
  if (context != 0) c.seq_len = context;
  return c;
}

}  // namespace

Engine::Engine(const Model& model, CacheFactory make_cache, std::size_t prefill_chunk, std::size_t context)
    : model_(model),
      config_(with_context(model.config(), context)),
      store_(std::make_unique<ContiguousKVStore>(config_, std::move(make_cache))),
      prefill_chunk_(prefill_chunk) {
  init();
}

Engine::Engine(const Model& model, const PagedKVOptions& paged, PagedCacheFactory make_cache, std::size_t context)
    : model_(model),
      config_(with_context(model.config(), context)),
      store_(std::make_unique<PagedKVStore>(config_, paged, std::move(make_cache))) {
  init();
}

void Engine::init() {
  const Config& c = config_;
  const std::size_t hd = c.head_dim(), half = hd / 2;
  rope_cos_.resize(c.seq_len * half);
  rope_sin_.resize(c.seq_len * half);
  for (std::size_t pos = 0; pos < c.seq_len; ++pos)
    for (std::size_t i = 0; i < half; ++i) {
      const float freq = 1.0f / std::pow(c.rope_theta, static_cast<float>(2 * i) / static_cast<float>(hd));
      const float angle = static_cast<float>(pos) * freq;
      rope_cos_[pos * half + i] = std::cos(angle);
      rope_sin_[pos * half + i] = std::sin(angle);
    }
  x_.resize(c.dim);
  xb_.resize(c.dim);
  xb2_.resize(c.dim);
  q_.resize(c.dim);
  k_.resize(c.kv_dim());
  v_.resize(c.kv_dim());
  h1_.resize(c.hidden_dim);
  h3_.resize(c.hidden_dim);
  logits_.resize(c.vocab_size);
  att_logits_.resize(c.n_heads * c.seq_len);
  att_probs_.resize(c.n_heads * c.seq_len);
  group_done_ = std::make_unique<std::atomic<std::size_t>[]>(c.n_kv_heads);
  head_errors_.assign(c.n_kv_heads, nullptr);
  reset();
}

void Engine::reset() {
  position_ = 0;
  for (kvevict::QueryStatistics& st : ea_stats_) st.clear();
  store_->reset();
  apply_executor();
}

void Engine::set_hooks(std::unique_ptr<EngineHooks> hooks) {
  if (hooks && ea_options_)
    throw std::invalid_argument("llama2::Engine::set_hooks: the engine ranks by Expected Attention "
                                "(set_expected_attention), which the hooks' logits and positions would bypass");
  hooks_ = std::move(hooks);
}

void Engine::set_expected_attention(std::optional<kvevict::ExpectedAttentionOptions> options) {
  const char* who = "llama2::Engine::set_expected_attention";
  if (position_ != 0)
    throw std::logic_error(std::string(who) + ": the sequence has already started (position " +
                           std::to_string(position_) + "); call reset() first");
  if (!options) {
    ea_options_.reset();
    ea_stats_.clear();
    return;
  }
  const Config& c = config_;
  if (store_->paged()) throw std::invalid_argument(std::string(who) + ": the engine is paged (contiguous layout only)");
  if (prefill_chunk_ != 0)
    throw std::invalid_argument(std::string(who) + ": the engine prefills in chunks of " +
                                std::to_string(prefill_chunk_) + " (Expected Attention needs a one-shot prefill)");
  if (hooks_) throw std::invalid_argument(std::string(who) + ": hooks are installed (their logits would be bypassed)");
  for (std::size_t l = 0; l < c.n_layers; ++l)
    if (store_->cache(l) == nullptr)
      throw std::invalid_argument(std::string(who) + ": block " + std::to_string(l) +
                                  " has no eviction cache (a full cache has nothing to rank)");
  if (options->n_future_positions == 0)
    throw std::invalid_argument(std::string(who) + ": n_future_positions must be >= 1 (got 0)");
  if (!std::isfinite(options->epsilon) || options->epsilon < 0.0f)
    throw std::invalid_argument(std::string(who) + ": epsilon must be finite and >= 0 (got " +
                                std::to_string(options->epsilon) + ")");
  std::vector<kvevict::QueryStatistics> stats(c.n_layers, kvevict::QueryStatistics(c.n_heads, c.head_dim()));
  ea_rows_.assign(c.n_heads * c.seq_len, 0.0f);
  q_pre_.resize(static_cast<Eigen::Index>(c.dim));
  ea_stats_ = std::move(stats);
  ea_options_ = options;
}

void Engine::expected_rows(std::size_t l, std::size_t next_position, std::size_t row_stride) {
  const kvevict::RopeSpec rope{kvevict::RopeStyle::interleaved, static_cast<double>(config_.rope_theta)};
  kvevict::expected_attention_logits(ea_stats_[l], *store_->view(l), rope, static_cast<std::int64_t>(next_position),
                                     *ea_options_, ea_rows_.data(), row_stride, ea_ws_);
}

void Engine::set_threads(std::size_t threads) {
  if (threads == 0 || threads > 1024)
    throw std::invalid_argument("llama2::Engine::set_threads: threads must be in [1, 1024] (got " +
                                std::to_string(threads) + ")");
  if (threads == this->threads() && (pool_ == nullptr || pool_ == own_pool_.get())) return;
  auto pool = threads > 1 ? std::make_unique<kvtools::ThreadPool>(threads) : nullptr;
  set_pool(pool.get());
  own_pool_ = std::move(pool);
}

void Engine::set_pool(kvtools::ThreadPool* pool) {
  pool_ = pool;
  store_->set_executor(kvevict::ExecutorRef());
  apply_executor();
}

void Engine::apply_executor() {
  if (pool_) store_->set_executor(*pool_);
}

const kvevict::KVView<float>& Engine::view(std::size_t layer) const {
  const kvevict::KVView<float>* v = store_->view(layer);
  if (v == nullptr) throw std::logic_error("llama2::Engine::view: the engine is paged; use paged_view()");
  return *v;
}

const kvevict::PagedKVView<float>& Engine::paged_view(std::size_t layer) const {
  const kvevict::PagedKVView<float>* v = store_->paged_view(layer);
  if (v == nullptr) throw std::logic_error("llama2::Engine::paged_view: the engine's KV layout is contiguous");
  return *v;
}

const kvevict::PagePool& Engine::page_pool(std::size_t layer) const {
  const kvevict::PagePool* pool = store_->page_pool(layer);
  if (pool == nullptr) throw std::logic_error("llama2::Engine::page_pool: the engine's KV layout is contiguous");
  return *pool;
}

std::size_t Engine::kv_bytes_full() const {
  const Config& c = config_;
  return position_ * c.n_layers * 2 * c.kv_dim() * sizeof(float);
}

void Engine::check_token(int token, const char* where) const {
  if (token < 0 || static_cast<std::size_t>(token) >= config_.vocab_size)
    throw std::invalid_argument(std::string("llama2::Engine::") + where + ": token id " + std::to_string(token) +
                                " is outside the vocabulary [0, " + std::to_string(config_.vocab_size) + ")");
}

}  // namespace llama2

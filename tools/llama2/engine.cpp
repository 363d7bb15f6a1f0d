// kvevict tools — llama2/engine.cpp: the forward pass (llama2.c's run.c, with Eigen and kvevict).
// SPDX-License-Identifier: Apache-2.0
#include "llama2/engine.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <stdexcept>
#include <string>

#include "kvevict/attention/attention_logits.hpp"

namespace llama2 {
namespace {

using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using ConstVectorMap = Eigen::Map<const Eigen::VectorXf>;
using VectorMap = Eigen::Map<Eigen::VectorXf>;
// `n` K or V rows of one KV head: row s = slot s, `slot_stride` floats apart.
using SlotRows = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;

// out = weight * x / sqrt(mean(x^2) + eps), in llama2.c's order of operations.
void rmsnorm(float* out, const float* x, const float* weight, std::size_t size, float eps) {
  float ss = 0.0f;
  for (std::size_t j = 0; j < size; ++j) ss += x[j] * x[j];
  ss /= static_cast<float>(size);
  ss += eps;
  ss = 1.0f / std::sqrt(ss);
  for (std::size_t j = 0; j < size; ++j) out[j] = weight[j] * (ss * x[j]);
}

// h1 = silu(h1) * h3, elementwise (SwiGLU).
void swiglu(float* h1, const float* h3, std::size_t size) {
  for (std::size_t i = 0; i < size; ++i) {
    float val = h1[i];
    val *= 1.0f / (1.0f + std::exp(-val));
    h1[i] = val * h3[i];
  }
}

// In-place softmax of x[0..n).
void softmax(float* x, std::size_t n) {
  const float max_val = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_val);
    sum += x[i];
  }
  for (std::size_t i = 0; i < n; ++i) x[i] /= sum;
}

// Output features per task of the weight products below. Fixed, so that the floats a product gives do not
// depend on how many workers run the tasks (Eigen's blocking depends on the operand sizes only).
constexpr std::size_t kRowsPerTask = 64;

}  // namespace

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

// kvevict — bench/quality/oracle.hpp: the oracle bound of the quality report.
// SPDX-License-Identifier: Apache-2.0
//
// Reference only: the oracle knows the future, so it is no policy an engine could run, and it is
// not a `kvevict::parse_policy` name. At each decode step, per layer and KV head, it evicts the
// retained token outside the recent window whose attention weight summed over the rest of the
// window's decode steps (and over the GQA group's query heads), taken from the full-cache run of
// the same window, is smallest; at the prefill cut it keeps the recent window plus the tokens with
// the largest such sums over every decode step. Its row in kvevict-quality shows how much any
// score-based policy could gain on this model: a lower bound on what eviction must cost, not a
// guarantee (keeping the tokens the *full* cache attends to is not exactly what minimises the loss
// of the evicted run, whose attention shifts once tokens are gone).
//
// Built from the library's own machinery: `OracleCache` is a
// `kvevict::Cache<CurrentAttentionScore, ConstantTemperature, RecentTopKSelection>` (TOVA's score
// rule: each step's scores replace the last ones; H2O's and Keyformer's selection: recent window +
// top scores, ties keep the older token) whose logits are supplied: log F, where F is the future
// attention sum of each slot's token. The softmax over slots of log F is F / ΣF (per query head;
// the KV head's score sums its group), a per-row rescaling that keeps F's order (up to float
// rounding of near-equal sums: a relative difference below ~1e-7 may be read as a tie).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvevict/cache.hpp"
#include "kvevict/kv/kv_view.hpp"
#include "kvevict/score/score_policies.hpp"
#include "kvevict/selection/recent_topk_selection.hpp"
#include "kvevict/temperature/temperature_schedules.hpp"

namespace kvquality {

/// The full-cache run's attention of one window, as future sums: for block `layer`, KV head `j`,
/// step index `i` in `[0, T]` and position `p` in `[0, positions)`,
///   future(layer, j, i)[p] = Σ_{t = i}^{T−1} Σ_{q in group j} softmax(logits[layer][q][t])[p]
/// (0 for `i = T`). Filled step by step from `llama2::Engine`'s decode attention hook, then
/// `finish()`. Storage: `layers · kv_heads · (T + 1) · positions` doubles (stories260K, one
/// 512-token window: 5 · 4 · 256 · 512 · 8 B = 21 MB).
class FutureAttention {
 public:
  /// Empties the table and shapes it. Throws `std::invalid_argument` if any extent is 0.
  /// O(size) (zero fill); allocates when the shape grows.
  void reset(std::size_t layers, std::size_t kv_heads, std::size_t group, std::size_t steps, std::size_t positions) {
    if (layers == 0 || kv_heads == 0 || group == 0 || steps == 0 || positions == 0)
      throw std::invalid_argument("kvquality::FutureAttention::reset: every extent must be >= 1 (layers " +
                                  std::to_string(layers) + ", kv_heads " + std::to_string(kv_heads) + ", group " +
                                  std::to_string(group) + ", steps " + std::to_string(steps) + ", positions " +
                                  std::to_string(positions) + ")");
    layers_ = layers, kv_heads_ = kv_heads, group_ = group, steps_ = steps, positions_ = positions;
    data_.assign(layers * kv_heads * (steps + 1) * positions, 0.0);
    finished_ = false;
  }

  /// Adds decode step `t` of block `layer`: `logits` `[q_head][n]` by slot (`q_head` in
  /// `[0, kv_heads · group)`), `positions[s]` the position of slot `s` (the same on every KV head:
  /// a full cache). Each row's softmax (in double) is added to its KV head's row `t`. Throws
  /// `std::invalid_argument` for `layer`, `t` or a position out of range, or after `finish()`.
  /// O(n_q_heads · n).
  void add_step(std::size_t layer, std::size_t t, const float* logits, std::size_t n, const std::int64_t* positions) {
    if (finished_ || layer >= layers_ || t >= steps_ || n == 0 || n > positions_)
      throw std::invalid_argument("kvquality::FutureAttention::add_step: layer " + std::to_string(layer) + ", step " +
                                  std::to_string(t) + ", n " + std::to_string(n) + " outside the table (layers " +
                                  std::to_string(layers_) + ", steps " + std::to_string(steps_) + ", positions " +
                                  std::to_string(positions_) + (finished_ ? ", finished)" : ")"));
    for (std::size_t s = 0; s < n; ++s)
      if (positions[s] < 0 || static_cast<std::size_t>(positions[s]) >= positions_)
        throw std::invalid_argument("kvquality::FutureAttention::add_step: position " + std::to_string(positions[s]) +
                                    " of slot " + std::to_string(s) + " outside [0, " + std::to_string(positions_) + ")");
    for (std::size_t q = 0; q < kv_heads_ * group_; ++q) {
      const float* row = logits + q * n;
      double m = row[0], sum = 0.0;
      for (std::size_t s = 1; s < n; ++s) m = std::max(m, static_cast<double>(row[s]));
      for (std::size_t s = 0; s < n; ++s) sum += std::exp(static_cast<double>(row[s]) - m);
      double* out = at(layer, q / group_, t);
      for (std::size_t s = 0; s < n; ++s)
        out[positions[s]] += std::exp(static_cast<double>(row[s]) - m) / sum;
    }
  }

  /// Turns the per-step rows into suffix sums (row i = Σ_{t >= i}); row T stays 0. O(size).
  void finish() {
    if (finished_) return;
    for (std::size_t l = 0; l < layers_; ++l)
      for (std::size_t j = 0; j < kv_heads_; ++j)
        for (std::size_t i = steps_; i-- > 0;) {
          double* row = at(l, j, i);
          const double* next = at(l, j, i + 1);
          for (std::size_t p = 0; p < positions_; ++p) row[p] += next[p];
        }
    finished_ = true;
  }

  /// `future(layer, j, i)`, `[positions]` (see the class comment). Throws `std::logic_error` before
  /// `finish()`, `std::invalid_argument` out of range. O(1).
  const double* future(std::size_t layer, std::size_t kv_head, std::size_t i) const {
    if (!finished_) throw std::logic_error("kvquality::FutureAttention::future: call finish() first");
    if (layer >= layers_ || kv_head >= kv_heads_ || i > steps_)
      throw std::invalid_argument("kvquality::FutureAttention::future: (layer " + std::to_string(layer) +
                                  ", kv_head " + std::to_string(kv_head) + ", step " + std::to_string(i) +
                                  ") outside the table");
    return data_.data() + index(layer, kv_head, i);
  }
  std::size_t steps() const { return steps_; }          ///< decode steps T of the window
  std::size_t positions() const { return positions_; }  ///< positions per row
  std::size_t group() const { return group_; }          ///< query heads per KV head

 private:
  std::size_t index(std::size_t l, std::size_t j, std::size_t i) const {
    return ((l * kv_heads_ + j) * (steps_ + 1) + i) * positions_;
  }
  double* at(std::size_t l, std::size_t j, std::size_t i) { return data_.data() + index(l, j, i); }
  std::size_t layers_ = 0, kv_heads_ = 0, group_ = 1, steps_ = 0, positions_ = 0;
  std::vector<double> data_;  // [layer][kv_head][step 0..T][position]
  bool finished_ = false;
};

/// The oracle's cache for block `layer` (see the top of this file): a `CacheInterface` an engine
/// drives like any other (the logits it passes are ignored), which scores slot `s` of KV head `j`
/// with log future(layer, j, i)[position of s] — `i = 0` at the prefill cut, `i = step + 1` after
/// decode step `step` (0-based) — and lets the inner `Cache` select (recent window `w` + top
/// `k − w`; per KV head). `config.shared_heads` must be false. The table must outlive the cache and
/// be finished before `prefill`. Scratch `[q_head][capacity]` allocated once; `decode_step` does not
/// allocate.
class OracleCache final : public kvevict::CacheInterface {
 public:
  using Inner =
      kvevict::Cache<kvevict::CurrentAttentionScore, kvevict::ConstantTemperature, kvevict::RecentTopKSelection>;
  /// Log-score of a token the full cache never attends to again (F = 0): below log of any
  /// positive double.
  static constexpr float kNeverAgain = -1.0e4f;

  /// Throws what `Inner`'s constructor throws, and `std::invalid_argument` for
  /// `config.shared_heads` or a table whose group differs from the view's.
  OracleCache(const kvevict::CacheConfig& config, kvevict::KVView<float> view, const FutureAttention& table,
              std::size_t layer)
      : inner_(checked(config, view, table), view), view_(view), table_(&table), layer_(layer),
        rows_(config.n_q_heads * view.capacity, 0.0f) {}

  void prefill(const float* /*logits*/, std::size_t prompt_len, const float* /*gumbel*/ = nullptr) override {
    fill(0, prompt_len);
    kvevict::MaterializedChunk last(rows_.data(), nullptr, 1, prompt_len);
    LastRow rows(last, prompt_len);
    inner_.prefill_chunk(rows, prompt_len, prompt_len);
    inner_.finish_prefill();
  }
  void decode_step(const float* /*logits*/, std::size_t n, const float* /*gumbel*/ = nullptr) override {
    if (n > view_.capacity)
      throw std::invalid_argument("kvquality::OracleCache::decode_step: n = " + std::to_string(n) +
                                  " exceeds the view's capacity " + std::to_string(view_.capacity));
    fill(inner_.step() + 1, n);
    inner_.decode_step(rows_.data(), n);
  }
  void reset(std::uint64_t seed) override { inner_.reset(seed); }
  std::size_t budget() const override { return inner_.budget(); }
  std::size_t recent_window() const override { return inner_.recent_window(); }
  std::size_t step() const override { return inner_.step(); }
  float temperature() const override { return inner_.temperature(); }
  std::size_t length(std::size_t h) const override { return inner_.length(h); }
  const float* scores(std::size_t h) const override { return inner_.scores(h); }
  const std::int64_t* positions(std::size_t h) const override { return inner_.positions(h); }
  std::vector<std::int64_t> retained_positions(std::size_t h) const override { return inner_.retained_positions(h); }
  void restore_position_order() override { inner_.restore_position_order(); }

 private:
  // The prefill's rows as a chunk of P rows of which the cache reads only the last (TOVA's rule).
  class LastRow final : public kvevict::ChunkRows {
   public:
    LastRow(kvevict::MaterializedChunk& rows, std::size_t P) : rows_(rows), P_(P) {}
    const float* row(std::size_t q_head, std::size_t i) override {
      if (i + 1 != P_) throw std::logic_error("kvquality::OracleCache: only the prompt's last row is scored");
      return rows_.row(q_head, 0);
    }

   private:
    kvevict::MaterializedChunk& rows_;
    std::size_t P_;
  };
  static const kvevict::CacheConfig& checked(const kvevict::CacheConfig& config, const kvevict::KVView<float>& view,
                                             const FutureAttention& table) {
    if (config.shared_heads)
      throw std::invalid_argument("kvquality::OracleCache: the oracle selects per KV head (shared_heads must be false)");
    if (view.n_kv_heads == 0 || config.n_q_heads != view.n_kv_heads * table.group())
      throw std::invalid_argument("kvquality::OracleCache: n_q_heads = " + std::to_string(config.n_q_heads) +
                                  " is not the view's " + std::to_string(view.n_kv_heads) + " KV heads times the table's group " +
                                  std::to_string(table.group()));
    return config;
  }
  // rows_[q][s] = log future(layer, q / g, i)[position of slot s of KV head q / g], s < n.
  void fill(std::size_t i, std::size_t n) {
    if (i > table_->steps())
      throw std::logic_error("kvquality::OracleCache: decode step " + std::to_string(i) + " beyond the table's " +
                             std::to_string(table_->steps()) + " steps");
    const std::size_t g = table_->group(), nq = view_.n_kv_heads * g;
    for (std::size_t q = 0; q < nq; ++q) {
      const std::size_t j = q / g;
      const double* f = table_->future(layer_, j, i);
      const std::int64_t* pos = view_.head_positions(j);
      float* row = rows_.data() + q * n;
      for (std::size_t s = 0; s < n; ++s) {
        if (pos[s] < 0 || static_cast<std::size_t>(pos[s]) >= table_->positions())
          throw std::invalid_argument("kvquality::OracleCache: position " + std::to_string(pos[s]) +
                                      " outside the table's " + std::to_string(table_->positions()) + " positions");
        const double v = f[pos[s]];
        row[s] = v > 0.0 ? static_cast<float>(std::log(v)) : kNeverAgain;
      }
    }
  }

  Inner inner_;
  kvevict::KVView<float> view_;
  const FutureAttention* table_;
  std::size_t layer_;
  std::vector<float> rows_;  // [q_head][n] (prefill: the last row only)
};

}  // namespace kvquality

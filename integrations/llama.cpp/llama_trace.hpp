// kvevict inside llama.cpp — llama_trace.hpp: what an `Evictor` gave its cache, kept for kvevict-replay and the tests:
// the logits rows by position (`--trace-out`) and the keys of a key score (`--keys-out`).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace kvevict_llama {
namespace detail {

/// The logits and keys an evictor's cache was given, by position. Off until `start_logits` / `start_keys`.
class TraceLog {
 public:
  /// Records logits from now on: a trace `[n_q_heads][capacity][capacity]` (row and column = position), -inf where
  /// the cache had nothing. Allocates n_q_heads · capacity² floats.
  void start_logits(std::size_t n_q_heads, std::size_t capacity) {
    n_ = capacity;
    trace_.assign(n_q_heads * capacity * capacity, -std::numeric_limits<float>::infinity());
  }
  /// Whether logits are recorded.
  bool logits_on() const { return !trace_.empty(); }
  /// One batch's rows: `x` `[q_head][row][slot]` (null: zeros, for a policy without scores) of `rows` tokens from
  /// position `first`, over the `n` slots at positions `pos[0, n)`; causal, a slot after a row's position is
  /// skipped. O(n_q_heads · rows · n).
  void add_rows(const float* x, std::size_t n_q_heads, std::size_t rows, std::size_t first, const std::int64_t* pos,
                std::size_t n) {
    for (std::size_t h = 0; h < n_q_heads; ++h)
      for (std::size_t r = 0; r < rows; ++r) {
        float* out = trace_.data() + (h * n_ + first + r) * n_;
        const float* in = x == nullptr ? nullptr : x + (h * rows + r) * n;
        for (std::size_t s = 0; s < n; ++s)
          if (static_cast<std::size_t>(pos[s]) <= first + r)
            out[static_cast<std::size_t>(pos[s])] = in != nullptr ? in[s] : 0.0f;
      }
  }
  /// The trace (empty if not recording).
  const std::vector<float>& logits() const { return trace_; }

  /// Records keys from now on: `n_kv_heads` KV heads of `head_dim`.
  void start_keys(std::size_t n_kv_heads, std::size_t head_dim) {
    heads_ = n_kv_heads;
    head_dim_ = head_dim;
  }
  /// Whether keys are recorded.
  bool keys_on() const { return heads_ != 0; }
  /// KV head `j`'s key at `position` (`head_dim` floats). Grows the log to the position. O(head_dim) amortized.
  void add_key(std::size_t position, std::size_t j, const float* key) {
    if (key_log_.size() < (position + 1) * heads_ * head_dim_) key_log_.resize((position + 1) * heads_ * head_dim_, 0.0f);
    std::copy_n(key, head_dim_, key_log_.data() + (position * heads_ + j) * head_dim_);
  }
  /// The keys `[j][position][head_dim]` for positions `[0, capacity)`, 0 where none was given. O(heads · capacity ·
  /// head_dim).
  std::vector<float> keys(std::size_t capacity) const {
    std::vector<float> out(heads_ * capacity * head_dim_, 0.0f);
    for (std::size_t p = 0; heads_ != 0 && p < key_log_.size() / (heads_ * head_dim_); ++p)
      for (std::size_t j = 0; j < heads_; ++j)
        std::copy_n(key_log_.data() + (p * heads_ + j) * head_dim_, head_dim_, out.data() + (j * capacity + p) * head_dim_);
    return out;
  }

 private:
  std::size_t n_ = 0, heads_ = 0, head_dim_ = 0;
  std::vector<float> trace_;    // [q_head][position][position]
  std::vector<float> key_log_;  // [position][kv_head][head_dim]
};

}  // namespace detail
}  // namespace kvevict_llama

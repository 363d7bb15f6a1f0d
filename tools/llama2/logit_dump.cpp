// kvevict tools — llama2/logit_dump.cpp: record one block's attention logits as a kvevict-replay trace.
// SPDX-License-Identifier: Apache-2.0
#include "llama2/logit_dump.hpp"

#include "file_output.hpp"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace llama2 {

struct LogitDump::State {
  State(std::size_t l, std::size_t nq, std::size_t nkv) : layer(l), n_q_heads(nq), n_kv_heads(nkv) {}
  std::size_t layer, n_q_heads, n_kv_heads;
  std::size_t prompt_len = 0;
  std::vector<std::vector<float>> rows;  // rows[t] = [q_head][t + 1]: position t's query against 0..t
};

namespace {

/// A `CacheInterface` that keeps every token and copies the logits it is handed into `State`.
class Recorder final : public kvevict::CacheInterface {
 public:
  Recorder(std::shared_ptr<LogitDump::State> state, const kvevict::KVView<float>& view)
      : state_(std::move(state)), view_(view), zeros_(view.capacity, 0.0f) {}

  void prefill(const float* logits, std::size_t P, const float* /*gumbel*/) override {
    const std::size_t H = state_->n_q_heads;
    state_->rows.assign(P, {});
    for (std::size_t t = 0; t < P; ++t) {
      std::vector<float>& row = state_->rows[t];
      row.resize(H * (t + 1));
      for (std::size_t h = 0; h < H; ++h) std::copy_n(logits + (h * P + t) * P, t + 1, row.data() + h * (t + 1));
    }
    state_->prompt_len = P;
  }
  void prefill_chunk(const float* logits, std::size_t C, std::size_t n, const float* /*gumbel*/) override {
    kvevict::MaterializedChunk rows(logits, nullptr, C, n);
    prefill_chunk(rows, C, n);
  }
  // Chunk rows i = positions held + i (nothing is evicted: slot s is position s).
  void prefill_chunk(kvevict::ChunkRows& rows, std::size_t C, std::size_t n) override {
    const std::size_t H = state_->n_q_heads, held = state_->rows.size();
    if (C == 0 || n != held + C)
      throw std::logic_error("llama2::LogitDump: a chunk of " + std::to_string(C) + " tokens over " +
                             std::to_string(n) + " slots after " + std::to_string(held) + " recorded rows");
    state_->rows.resize(n);
    for (std::size_t i = 0; i < C; ++i) state_->rows[held + i].assign(H * (held + i + 1), 0.0f);
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < C; ++i) {
        const std::size_t len = held + i + 1;
        std::copy_n(rows.row(h, i), len, state_->rows[held + i].data() + h * len);
      }
    state_->prompt_len = n;
  }
  void finish_prefill() override {}
  // Copying logits needs no threads: the engine's pool (--threads) is accepted and not used.
  void set_executor(kvevict::ExecutorRef /*executor*/) override {}
  void decode_step(const float* logits, std::size_t n, const float* /*gumbel*/) override {
    const std::size_t H = state_->n_q_heads, t = state_->rows.size();
    if (n != t + 1)
      throw std::logic_error("llama2::LogitDump: " + std::to_string(n) + " slots at position " + std::to_string(t) +
                             "; the dump needs a full cache");
    std::vector<float> row(H * n, 0.0f);
    const std::int64_t* pos = view_.head_positions(0);  // slot s holds position pos[s] (= s: nothing is evicted)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t s = 0; s < n; ++s) row[h * n + static_cast<std::size_t>(pos[s])] = logits[h * n + s];
    state_->rows.push_back(std::move(row));
  }
  void reset(std::uint64_t /*seed*/) override {
    for (std::size_t h = 0; h < view_.n_kv_heads; ++h) view_.lengths[h] = 0;
    state_->rows.clear();
    state_->prompt_len = 0;
  }
  std::size_t budget() const override { return view_.capacity; }
  std::size_t recent_window() const override { return 0; }
  std::size_t step() const override { return state_->rows.size() - state_->prompt_len; }
  float temperature() const override { return 1.0f; }
  std::size_t length(std::size_t h) const override { return view_.length(h); }
  const float* scores(std::size_t /*h*/) const override { return zeros_.data(); }
  const std::int64_t* positions(std::size_t h) const override { return view_.head_positions(h); }
  std::vector<std::int64_t> retained_positions(std::size_t h) const override {
    std::vector<std::int64_t> out(view_.head_positions(h), view_.head_positions(h) + view_.length(h));
    std::sort(out.begin(), out.end());
    return out;
  }
  void restore_position_order() override {}  // nothing is ever evicted: slots are in position order

 private:
  std::shared_ptr<LogitDump::State> state_;
  kvevict::KVView<float> view_;
  std::vector<float> zeros_;
};

}  // namespace

LogitDump::LogitDump(std::size_t layer, std::size_t n_q_heads, std::size_t n_kv_heads)
    : state_(std::make_shared<State>(layer, n_q_heads, n_kv_heads)) {
  if (n_kv_heads == 0 || n_q_heads % n_kv_heads != 0)
    throw std::invalid_argument("llama2::LogitDump: n_q_heads must be a multiple of n_kv_heads");
}

CacheFactory LogitDump::factory() const {
  std::shared_ptr<State> state = state_;
  return [state](std::size_t layer, const kvevict::KVView<float>& view) -> std::unique_ptr<kvevict::CacheInterface> {
    if (layer != state->layer) return nullptr;
    return std::make_unique<Recorder>(state, view);
  };
}

replay::Trace LogitDump::trace() const {
  const State& s = *state_;
  const std::size_t H = s.n_q_heads, N = s.rows.size();
  replay::Trace trace;
  trace.n_q_heads = H;
  trace.n_tokens = N;
  trace.prompt_len = s.prompt_len;
  trace.q_heads_per_kv = H / s.n_kv_heads;
  trace.logits.assign(H * N * N, 0.0f);
  for (std::size_t t = 0; t < N; ++t)
    for (std::size_t h = 0; h < H; ++h)
      std::copy_n(s.rows[t].data() + h * (t + 1), t + 1, trace.logits.data() + trace.index(h, t, 0));
  return trace;
}

void LogitDump::write(const std::string& path, const std::string& model, const std::vector<int>& tokens) const {
  const replay::Trace t = trace();
  if (t.n_tokens == 0) throw std::runtime_error("--dump-logits: nothing was recorded");
  try {
    if (path.size() >= 4 && path.compare(path.size() - 4, 4, ".npy") == 0) {
      replay::save_trace_npy(t, path);
      return;
    }
    kvtools::AtomicOutput out(path);  // whole or not at all
    const nlohmann::json meta = {{"model", model}, {"layer", state_->layer}, {"tokens", tokens}};
    replay::write_trace_json(out.stream(), t, &meta);
    out.commit();
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("--dump-logits: ") + e.what());
  }
}

}  // namespace llama2

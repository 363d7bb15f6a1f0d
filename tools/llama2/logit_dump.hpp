// kvevict tools — llama2/logit_dump.hpp: record one block's attention logits as a kvevict-replay trace.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "llama2/engine.hpp"
#include "trace.hpp"  // tools/replay: replay::Trace and its writers

namespace llama2 {

/// Records block `layer`'s pre-softmax attention logits over a whole run with a full cache, in
/// the trace format of kvevict-replay: row t holds the logits of the query at position t against
/// positions 0..t (`[q_head][N][N]`, prompt rows first).
///
/// The recorder plugs into the engine as that block's cache: `Engine` hands every cache exactly
/// these logits (`prefill`: `[q_head][P][P]`; `step`: `[q_head][n]` by slot), and the recorder
/// never evicts, so slot s is position s. Every other block gets no cache (full).
class LogitDump {
 public:
  LogitDump(std::size_t layer, std::size_t n_q_heads, std::size_t n_kv_heads);

  /// The factory to give `Engine`: the recorder for `layer`, a full cache for the other blocks.
  CacheFactory factory() const;

  /// The rows recorded so far as a trace: N = tokens processed, P = the prompt's length, g = n_q_heads / n_kv_heads.
  replay::Trace trace() const;

  /// Writes `trace()` to `path`: float32 `.npy` `[H_q, N, N]` if the name ends in ".npy" (then P and
  /// g are not in the file: pass them to kvevict-replay), JSON otherwise, with
  /// `"meta": {"model": model, "layer": layer, "tokens": tokens}`. Throws `std::runtime_error`.
  void write(const std::string& path, const std::string& model, const std::vector<int>& tokens) const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace llama2

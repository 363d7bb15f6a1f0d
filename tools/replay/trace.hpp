// kvevict tools — replay/trace.hpp: an attention-logit trace of one layer, as kvevict-replay reads it.
// SPDX-License-Identifier: Apache-2.0
//
// A trace is one layer's pre-softmax attention logits for a whole run of N tokens:
//
//   logits[h][t][j]  (h < H_q query heads, t < N query positions, j < N key positions)
//
// row t holding the logits of the query at position t against positions 0..N-1; only the causal
// part j <= t is meaningful (the rest is ignored). Optionally `gumbel`, same shape, holds the
// noise ζ to add whenever row t's query scores column j. `prompt_len` P says which rows are the
// prompt (0..P-1, scored at prefill); `q_heads_per_kv` g maps query head h to KV head h / g.
//
// Files (see README.md in this folder):
//   JSON:  {"prompt_len": P, "q_heads_per_kv": g, "logits": [H_q][N][N], "gumbel": [H_q][N][N], "meta": {...}}
//          (gumbel and meta optional; ignored entries j > t may be any number or null; every
//          number must fit in a float)
//   .npy:  float32 '<f4', C order, shape [H_q, N, N]; P and g given on the command line.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "input_error.hpp"  // InputError, thrown by every reader here

namespace replay {

/// One layer's logit trace, `[H_q][N][N]` row-major.
struct Trace {
  std::size_t n_q_heads = 0;                  ///< H_q
  std::size_t n_tokens = 0;                   ///< N
  std::optional<std::size_t> prompt_len;      ///< P (JSON field or --prompt-len)
  std::optional<std::size_t> q_heads_per_kv;  ///< g (JSON field or --q-heads-per-kv; default 1)
  std::vector<float> logits;                  ///< [H_q][N][N]; entries j > t are unspecified (may be NaN)
  std::vector<float> gumbel;                  ///< [H_q][N][N] or empty (no noise in the trace)

  bool has_gumbel() const { return !gumbel.empty(); }
  std::size_t index(std::size_t h, std::size_t t, std::size_t j) const { return (h * n_tokens + t) * n_tokens + j; }
  float logit(std::size_t h, std::size_t t, std::size_t j) const { return logits[index(h, t, j)]; }
  /// P, after `validate` (throws if unset).
  std::size_t P() const;
  /// g, after `validate` (1 if unset).
  std::size_t g() const { return q_heads_per_kv.value_or(1); }
};

/// Checks everything the replay relies on; throws `InputError` naming the first bad field:
/// `1 <= P <= N`, `g >= 1` dividing H_q, sizes of `logits` / `gumbel`, and every causal entry
/// (`j <= t`): logits neither NaN nor +inf (-inf = masked), gumbel finite.
void validate(const Trace& trace);

/// Parses a JSON trace from `in`; `name` (a path, or "-" for stdin) is used in error messages.
/// Checks the structure (types, ragged or mis-sized arrays, null inside the causal part, numbers
/// beyond float range — all as `InputError` naming the entry) against the document before
/// allocating the cube, but not P against N and not NaN / inf: call `validate` after applying
/// command-line overrides.
Trace read_trace_json(std::istream& in, const std::string& name);
/// Opens `path` ("-" = stdin) and parses it with `read_trace_json`. Throws `InputError` ("trace '<path>':
/// …") for a directory or another file that is not a regular one (a FIFO, /dev/zero: read without end).
Trace load_trace_json(const std::string& path);
/// Reads the logits (and optional gumbel) from float32 `.npy` files of shape [H_q, N, N].
Trace load_trace_npy(const std::string& logits_path, const std::string& gumbel_path = "");

/// Writes `trace` as JSON: entries j > t as null, floats in the shortest form that reads back
/// exactly. `meta` (optional, a JSON object) is written as the free-form "meta" field.
/// Throws `InputError` if P is unset.
void write_trace_json(std::ostream& out, const Trace& trace, const nlohmann::json* meta = nullptr);
/// Writes the logits (and, if present, the gumbel noise to `gumbel_path`) as float32 `.npy`
/// `[H_q, N, N]` (entries j > t as 0). P and g are not stored: pass them to kvevict-replay.
void save_trace_npy(const Trace& trace, const std::string& logits_path, const std::string& gumbel_path = "");

}  // namespace replay

// kvevict tools — a small Llama-2 inference engine whose KV cache is managed by kvevict.
// SPDX-License-Identifier: Apache-2.0
//
// llama2/model.hpp — the hyper-parameters and float32 weights of a Llama model (llama2.c `.bin` or GGUF).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "llama2/gguf_vocab.hpp"

namespace llama2 {

/// Hyper-parameters of a Llama model. From a llama2.c `.bin` file: its seven-int32 header
/// (`dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len`; a negative `vocab_size`
/// means the classifier is a separate matrix stored at the end: here `vocab_size` is its absolute
/// value and `shared_classifier` records the sign), RoPE θ = 10000 and RMS ε = 1e-5 as in llama2.c's
/// run.c. From a GGUF file: the `llama.*` keys (`Model::load`).
struct Config {
  std::size_t dim = 0;         ///< residual stream width
  std::size_t hidden_dim = 0;  ///< SwiGLU inner width
  std::size_t n_layers = 0;    ///< transformer blocks
  std::size_t n_heads = 0;     ///< query heads
  std::size_t n_kv_heads = 0;  ///< key/value heads (GQA: divides n_heads; MHA: equal)
  std::size_t vocab_size = 0;  ///< tokens
  std::size_t seq_len = 0;     ///< trained context length (RoPE positions 0..seq_len-1)
  bool shared_classifier = true;  ///< classifier = token embedding (tied)
  float rope_theta = 10000.0f;    ///< RoPE base θ: pair i of a head turns by pos · θ^(−2i/head_dim)
  float rms_eps = 1e-5f;          ///< RMSNorm ε

  /// Elements per head, `dim / n_heads`.
  std::size_t head_dim() const { return dim / n_heads; }
  /// Width of the K and V projections, `n_kv_heads * head_dim()`.
  std::size_t kv_dim() const { return n_kv_heads * head_dim(); }
};

/// Pointers to one transformer block's weights inside `Model`'s storage. All
/// matrices are row-major `[out][in]` float32 (so `y = W x`).
struct LayerWeights {
  const float* rms_att = nullptr;  ///< `[dim]` RMSNorm gain before attention
  const float* wq = nullptr;       ///< `[dim][dim]`
  const float* wk = nullptr;       ///< `[kv_dim][dim]`
  const float* wv = nullptr;       ///< `[kv_dim][dim]`
  const float* wo = nullptr;       ///< `[dim][dim]`
  const float* rms_ffn = nullptr;  ///< `[dim]` RMSNorm gain before the FFN
  const float* w1 = nullptr;       ///< `[hidden_dim][dim]` gate
  const float* w2 = nullptr;       ///< `[dim][hidden_dim]` down
  const float* w3 = nullptr;       ///< `[hidden_dim][dim]` up
};

/// A loaded model: the config plus float32 weights read into memory once (GGUF's quantized
/// tensors are dequantized at load time: 4 bytes per parameter). Movable (the weight pointers
/// follow the storage), not copyable.
class Model {
 public:
  /// Reads and validates a llama2.c "legacy" `.bin` file (the format of
  /// `karpathy/tinyllamas` and `../shared/models/*/`): header, then
  /// token_embedding `[vocab][dim]`, rms_att `[L][dim]`, wq, wk, wv, wo,
  /// rms_ffn `[L][dim]`, w1, w2, w3, rms_final `[dim]`, the unused legacy RoPE
  /// tables `[seq_len][head_dim]`, and the classifier `[vocab][dim]` only when
  /// the header's vocab_size is negative.
  ///
  /// Throws `std::invalid_argument` (bad input: the CLIs exit with code 2) whose message names the
  /// file and the problem
  /// when the file cannot be read, the header is shorter than 28 bytes, a
  /// dimension is non-positive or inconsistent (`dim % n_heads`,
  /// `n_heads % n_kv_heads`, odd head_dim), the file is a newer llama2.c
  /// export (magic "ak42"), the file size differs from what the header
  /// implies (truncated file or trailing bytes), or a weight is NaN or ±inf ("weight 'wq' of layer 0
  /// holds a non-finite value (nan at element 5)"; the unused legacy RoPE tables are not checked).
  ///
  /// A file that starts with the GGUF magic is read as GGUF instead (format from the magic, not the
  /// extension): `general.architecture` must be "llama"; the hyper-parameters come from
  /// `llama.block_count`, `embedding_length`, `feed_forward_length`, `attention.head_count`,
  /// `attention.head_count_kv` (default: head_count), `attention.layer_norm_rms_epsilon`,
  /// `rope.freq_base` (default 10000), `context_length`, and the tensors from GGUF's names
  /// (`token_embd`, `output_norm`, `output` — absent: tied —, `blk.N.attn_norm`, `attn_q`, `attn_k`,
  /// `attn_v`, `attn_output`, `ffn_norm`, `ffn_gate`, `ffn_up`, `ffn_down`), each of type f32, f16,
  /// bf16, q8_0, q4_0, q4_1, q4_K, q5_K or q6_K. Q and K are used as stored: llama.cpp's converter
  /// permutes Hugging Face's rotate-half layout into the adjacent pairs this engine's RoPE turns.
  /// Throws `std::invalid_argument` naming the key or tensor for a missing or inconsistent key, a
  /// tensor missing or of the wrong shape or an unsupported type, a tensor the model does not read
  /// ("tensor 'blk.4.attn_q.weight' is not read by a llama model with 'llama.block_count' = 4 …"), a
  /// weight that is NaN or ±inf after dequantization ("tensor 'blk.0.attn_q.weight' holds a non-finite
  /// value (nan at element 5)"), an RMS ε not in (0, 1) or not a normal float32 once rounded to float32,
  /// a RoPE base not in (1, 1e12) as a double and as a float32 ("… = 1.000000000001 becomes 1 as a
  /// float32 (the engine's type), which is not in (1, 1e12)"), partial rotary embeddings
  /// (`rope.dimension_count` ≠ head_dim), RoPE scaling, a vocabulary `gguf::read_vocab` refuses, or a
  /// malformed file (`gguf::File::parse`, which also refuses tensors whose bytes overlap: the
  /// dequantized weights are then at most 4 / 0.5625 ≈ 7.1 times the file's size).
  /// docs/gguf-loader.md lists every condition and message.
  static Model load(const std::string& path);

  Model(Model&&) = default;
  Model& operator=(Model&&) = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const Config& config() const { return config_; }
  /// `[vocab][dim]` token embedding rows.
  const float* token_embedding() const { return token_embedding_; }
  /// Weights of block `layer` (no bounds check; `layer < n_layers`).
  const LayerWeights& layer(std::size_t layer) const { return layers_[layer]; }
  /// `[dim]` final RMSNorm gain.
  const float* rms_final() const { return rms_final_; }
  /// `[vocab][dim]` classifier; the token embedding when `shared_classifier`.
  const float* classifier() const { return classifier_; }
  /// The tokenizer stored in a GGUF file's metadata; null for a llama2.c `.bin` or a GGUF without one.
  const GgufVocab* vocab() const { return vocab_.get(); }
  /// "llama2.c", or for GGUF the tensor types found and their counts in name order
  /// (e.g. "gguf (f32 x61, q4_1 x152, q8_0 x1)").
  const std::string& format() const { return format_; }

 private:
  Model() = default;
  static Model load_gguf(const std::string& path);

  Config config_;
  // .bin: the whole file as floats (the 7-int header included); GGUF: the dequantized tensors.
  std::vector<float> storage_;
  const float* token_embedding_ = nullptr;
  std::vector<LayerWeights> layers_;
  const float* rms_final_ = nullptr;
  const float* classifier_ = nullptr;
  std::shared_ptr<const GgufVocab> vocab_;
  std::string format_ = "llama2.c";
};

}  // namespace llama2

// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// tests/cuda/harness.hpp — runs the same prompts and decode steps through the CPU caches
// (`Cache` per sequence, or `PagedCache` per sequence on one shared `PagePool`) and through a
// `Backend` of the CUDA eviction code, feeding both the same logits (and noise), and compares
// after every call: lengths, kept position sets, positions and scores by slot, K/V rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <kvevict/presets.hpp>
#include <kvevict/paged/page_eviction.hpp>

#include "batch_host.hpp"

namespace kvtest_cuda {

/// How Keyformer's ζ is given: none (deterministic variant), injected arrays, or drawn by both
/// sides from the counter-based formula with the same seed.
enum class Noise { off, injected, drawn };

/// One comparison run.
struct CaseConfig {
  kvevict::Policy policy = kvevict::Policy::h2o;
  bool paged = false;
  bool page_unit = false;
  kvevict::PageLayout layout = kvevict::PageLayout::NHD;
  std::uint32_t n_q = 4, n_kv = 2, head_dim = 8;
  std::vector<std::uint32_t> prompts{40, 530, 700};  ///< one prompt length per sequence (the batch)
  std::uint32_t k = 520, w = 8, sinks = 4, steps = 30;
  Noise noise = Noise::off;
  bool ragged = false;     ///< step logits as ragged `indptr` blocks instead of dense `[B][q][n_max]`
  std::uint64_t seed = 1;  ///< logits, noise and the Keyformer seeds derive from it
  std::uint32_t page_size = 16, start_pages = 1;
  bool page_mean = false;
  float tau_init = 1.0f, tau_end = 2.0f;
};

/// What a run found. `pairs` counts (call, sequence, selection row) comparisons.
struct Report {
  std::uint64_t pairs = 0;
  std::uint64_t set_mismatches = 0;   ///< kept position sets differ
  std::uint64_t slot_mismatches = 0;  ///< a length, a position by slot, or a K/V row differs
  std::uint64_t score_bit_mismatches = 0;
  double max_rel_score_error = 0.0;  ///< over slots whose position agrees
  std::uint64_t status_errors = 0;   ///< device status codes != 0
  std::string first_problem;         ///< where the first difference was seen
  bool exact() const {
    return set_mismatches == 0 && slot_mismatches == 0 && score_bit_mismatches == 0 && status_errors == 0;
  }
};

/// Runs `cfg` through the CPU caches and `backend`, comparing after the prefill and after
/// every step. Throws `std::invalid_argument` for a configuration the CPU caches reject.
Report run_case(Backend& backend, const CaseConfig& cfg);

/// A readable name of a case ("h2o paged/page NHD noise=drawn ragged B=3 ...").
std::string case_name(const CaseConfig& cfg);

}  // namespace kvtest_cuda

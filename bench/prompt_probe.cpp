// kvevict prompt probe — one call of the fused prompt attention (attention/causal_attention.hpp) and the score it
// gives, as a consumer who only includes the umbrella header builds it; bench/instructions.sh --prompt counts it.
//
//   prompt_probe KERNEL P [D]     KERNEL: attention (the output only), h2o (the output and H2O's column sums),
//                                 keyformer (the output and Keyformer's noisy sums, τ = 1), kvzip (each key's
//                                 largest probability over a repeat of the context, no output: KVzip's score,
//                                 Kim et al. 2025 §3.2, as KVEvictCache(policy="kvzip") calls attention_maxes)
//
// SmolLM2-135M's attention shape: 9 query heads over 3 KV heads (GQA, g = 3) of dimension D (default 64), inputs
// uniform in [-4, 4) / 4 from a fixed seed. attention, h2o and keyformer run over a P-token prompt; kvzip over a
// P-token context followed by its P-token repeat (2P keys; the repeat's P queries, query_offset = P). Prints one
// line: `KERNEL P=P d=D isa=ISA pairs=N ns_per_pair=T out_sum=O score_sum=S`, where N is the (query head × causal
// (query, key) pair) count of the call (9 · P(P+1)/2; kvzip: 9 · P(3P+1)/2), T the thread CPU time of the call / N,
// O the sum of the output and S of the score written (H2O's and Keyformer's: 9 · P, every query's probabilities
// summing to 1; sanity figures, the dispatched paths agreeing to float rounding, not bit for bit). Exit 2 on a bad
// argument.
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <time.h>
#include <vector>

#include <kvevict/kvevict.hpp>

// Under callgrind (bench/instructions.sh --prompt) only the call is counted.
#include "probe_callgrind.hpp"

namespace {

constexpr std::size_t kQHeads = 9, kKVHeads = 3;

double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::size_t parse_size(const char* name, const char* text, unsigned long long cap) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || v == 0 || text[0] == '-' || errno == ERANGE || v > cap)
    throw std::invalid_argument(std::string(name) + " must be an integer in [1, " + std::to_string(cap) + "] (got '" +
                                text + "')");
  return static_cast<std::size_t>(v);
}

int run(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: prompt_probe attention|h2o|keyformer|kvzip P [D]\n");
    return 2;
  }
  const std::string kernel = argv[1];
  if (kernel != "attention" && kernel != "h2o" && kernel != "keyformer" && kernel != "kvzip") {
    std::fprintf(stderr, "prompt_probe: KERNEL must be attention, h2o, keyformer or kvzip (got '%s')\n", argv[1]);
    return 2;
  }
  // Capped so that every buffer's size fits (9 · 2P · D floats at most 2^34 bytes); D a multiple of 16 is
  // causal_attention's own check.
  const std::size_t P = parse_size("P", argv[2], 1u << 17);
  const std::size_t d = argc == 4 ? parse_size("D", argv[3], 1024) : 64;
  const bool kvzip = kernel == "kvzip";
  const std::size_t keys = kvzip ? 2 * P : P, queries = P, offset = kvzip ? P : 0;

  std::mt19937_64 gen(11);
  auto draw = [&gen] { return static_cast<float>(static_cast<std::int32_t>(gen() >> 41) - (1 << 22)) * 0x1p-22f; };
  std::vector<float> q(kQHeads * queries * d), k(kKVHeads * keys * d), v(kvzip ? 0 : kKVHeads * keys * d);
  for (float& x : q) x = draw();
  for (float& x : k) x = draw();
  for (float& x : v) x = draw();
  std::vector<float> out(kvzip ? 0 : kQHeads * queries * d), score(kernel == "attention" ? 0 : kQHeads * keys);

  kvevict::CausalAttentionArgs a;
  a.q = q.data();
  a.q_head_stride = queries * d;
  a.q_row_stride = d;
  a.k = k.data();
  a.k_head_stride = keys * d;
  a.k_row_stride = d;
  if (!kvzip) {
    a.v = v.data();
    a.v_head_stride = keys * d;
    a.v_row_stride = d;
    a.out = out.data();
    a.out_head_stride = queries * d;
    a.out_row_stride = d;
  }
  if (kernel == "h2o") a.sums = score.data();
  if (kernel == "keyformer") {
    a.noisy_sums = score.data();
    a.noise_seed = 5;
  }
  if (kvzip) a.maxes = score.data();
  a.n_q_heads = kQHeads;
  a.n_kv_heads = kKVHeads;
  a.head_dim = d;
  a.prompt_len = keys;
  a.query_offset = offset;
  a.scale = 1.0f / std::sqrt(static_cast<float>(d));

  CALLGRIND_START_INSTRUMENTATION;  // with --instr-atstart=no the filling above runs uninstrumented
  const double t0 = thread_seconds();
  CALLGRIND_TOGGLE_COLLECT;
  kvevict::causal_attention(a);  // serial: the count is the whole call's
  CALLGRIND_TOGGLE_COLLECT;
  const double seconds = thread_seconds() - t0;

  double out_sum = 0.0, score_sum = 0.0;
  for (float x : out) out_sum += x;
  for (float x : score) score_sum += x;
  // Query i (position offset + i) sees keys 0 .. offset + i: Σ (offset + i + 1) over the P queries.
  const double pairs = static_cast<double>(kQHeads) * static_cast<double>(queries) *
                       (static_cast<double>(offset) + (static_cast<double>(queries) + 1.0) / 2.0);
  std::printf("%s P=%zu d=%zu isa=%s pairs=%.0f ns_per_pair=%.4f out_sum=%.6g score_sum=%.3f\n", argv[1], P, d,
              kvevict::isa_name(kvevict::active_isa()), pairs, seconds * 1e9 / pairs, out_sum, score_sum);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prompt_probe: %s\n", e.what());
    return 2;
  }
}

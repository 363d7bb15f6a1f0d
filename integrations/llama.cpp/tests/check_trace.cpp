// kvevict-llama-check-trace: checks kvevict-llama's recorded logits (--trace-out) against an independent
// engine's, the project's own llama2 engine (kvevict-generate --dump-logits, one block per run, full cache).
// SPDX-License-Identifier: Apache-2.0
//
//   kvevict-llama-check-trace logits TRACE.npy KEPT.jsonl P N_LAYER REF SPLICED.npy
//   kvevict-llama-check-trace summed TRACE.npy KEPT.jsonl P N_LAYER REF SPLICED.npy
//   kvevict-llama-check-trace kept KEPT.jsonl REPLAY.jsonl
//
// `logits`: TRACE is kvevict-llama's model-wide trace, [n_layer·n_head][N][N] (head layer·n_head + h; row t =
// position t; log p over the cells llama.cpp held, -inf elsewhere); KEPT its --kept-out (line 0: after the prompt
// cut, line i: after decode position P − 1 + i); REF<l>.npy for l < N_LAYER are kvevict-generate's dumps of block
// l on the same tokens, [n_head][M][M] with M >= N (pre-softmax logits q·kᵀ/√d, full causal rows). It checks
//   1. held cells: every head's row t has finite entries at exactly the positions llama.cpp held for it: 0..t for
//      a prompt row (the prompt is held whole), KEPT's set before step t plus t for a decode row (-inf on a held
//      cell only where p underflows float: the reference's p below 2^-149, or a row without a reference);
//   2. softmax: every row's exp(log p) sums to 1 over those cells (|sum − 1| <= kSumTol);
//   3. the logits themselves: log p against log_softmax of the reference's logits over the same cells, for every
//      prompt row of every layer and head, and for the decode rows of layer 0 (|Δ log p| within kLogpRel of the
//      row's logit scale where the reference's p is a normal float, |Δp| <= kProbTol everywhere). Decode rows of
//      layers >= 1 have no independent reference: after eviction the new token's hidden state past layer 0 is the
//      evicted model's, which the full-cache engine does not compute (its q·k over the held cells differ
//      legitimately); they are checked by 1 and 2 only;
// and writes SPLICED, the trace to replay instead of kvevict-llama's own: every prompt row of every layer and
// the decode rows of layer 0 from the reference, the decode rows of layers >= 1 from TRACE (see 3).
// `summed`: TRACE is kvevict-llama --score-rows summed's trace, [1][N][N] (row t: log Σ_{l,h} p over the held
// cells), N_LAYER the model's every layer (REF0..REF<N_LAYER-1>, each [n_head][M][M]). It checks every row's held
// cells as 1., that exp(row) sums to n_layer · n_head over them, and each prompt row against log Σ_{l,h}
// softmax(reference) over the same cells (summed in double here, apart from the tool's float sum); decode rows
// have no independent reference past layer 0 (see 3.). SPLICED [1][N][N]: the prompt rows from the reference,
// the decode rows from TRACE.
// `kept`: the kept sets of two JSON Lines files (kvevict-replay's format) are equal line by line (t, τ,
// positions exactly; scores within kScoreTol relative).
// Exit 0: all checks passed; 1: a check failed (the first failures are printed); 2: bad input.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "npy.hpp"

namespace {

// Tolerances; the values measured on stories260K (P = 400, T = 24, k = 64) are also in docs/llama-cpp.md ("Tests").
//
// kSumTol: ggml's soft_max forms exp(x − max) in float (a few ulp each), sums in double and scales by 1/sum in
// float, so each p is within a few ulp (~2.4e-7 relative) of the exact softmax of its inputs; log p is stored in
// float (|log p|·2^-24 absolute, i.e. that relative error of p again). The sum is then 1 within ~5e-7 (measured
// 1.7e-7); 1e-5 leaves a 20x margin and still sees one cell of p >= 1e-5 missing, doubled or read from a masked cell.
constexpr double kSumTol = 1e-5;
// kLogpRel, kProbTol: llama.cpp keeps K and V in F16 (its default cache type; kvevict-llama does not change it)
// and rounds q to F16 for q·k, while the llama2 engine computes in float32. A logit q·k/√d is then off by up to
// 2·2^-11·Σ_i|q_i k_i|/√d, an error proportional to the logits' scale, not to their differences; the V rounding
// of the layers below adds to it in layers >= 1. With kvevict-llama built with an F32 cache (a local experiment)
// the same comparison agrees within 1e-4 in log p (6.5e-6 of the row's largest |logit|) and 9e-6 in p, so the
// rest is F16's. Measured with F16 (the tool as shipped): |Δ log p| <= 9.3e-3 · max(1, largest |logit| of the row),
// |Δp| <= 0.014. The bounds below are about twice that; a position read from the wrong cell gets another position's
// probability, which differs by factors, not by percents (a score read one cell off, or the held cells' scores
// rotated by one in the decode steps, fails the check by far).
constexpr double kLogpRel = 0.02;  // |Δ log p| <= kLogpRel · max(1, max_j |x_j|) over the row's held cells
constexpr double kProbTol = 0.03;  // |Δp| on every held cell
// log p is compared where the reference's p is a normal float (>= FLT_MIN = e^-87.3): below it ggml's p is a
// denormal with fewer bits, and below 2^-149 = e^-103.28 it is 0 (log p = -inf). A held cell recorded as -inf is
// accepted where the reference's log p, less the row's F16 tolerance, is below ln(2^-149).
constexpr double kLnFltMin = -87.3365, kLnDenormMin = -103.2789;
// kScoreTol: the kept scores are sums of such p over rows and heads (H2O, Keyformer) or one row's (TOVA), each p off
// by the F16 error above; measured 4.8e-3 (H2O), 1.7e-3 (Keyformer), 9.2e-3 (TOVA) relative. The kept positions,
// the check that matters, must be equal.
constexpr double kScoreTol = 0.03;

struct Failure {
  int count = 0;
  void report(const std::string& what) {
    if (count++ < 12) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  }
};

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read '" + path + "'");
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

std::string fmt(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

int check_logits(int argc, char** argv) {
  if (argc != 8) throw std::invalid_argument("logits: expected TRACE KEPT P N_LAYER REF SPLICED");
  const replay::NpyArray tr = replay::read_npy_f32(argv[2], "TRACE");
  const std::vector<nlohmann::json> kept_lines = read_lines(argv[3]);
  const std::size_t P = std::stoul(argv[4]), L = std::stoul(argv[5]);
  const std::string ref_prefix = argv[6];
  if (tr.shape.size() != 3 || tr.shape[1] != tr.shape[2] || L == 0 || tr.shape[0] % L != 0)
    throw std::invalid_argument("TRACE: expected [n_layer·n_head, N, N]");
  const std::size_t HL = tr.shape[0], H = HL / L, N = tr.shape[1];
  if (P == 0 || P > N || kept_lines.size() != N - P + 1)
    throw std::invalid_argument("KEPT: expected " + std::to_string(N - P + 1) + " lines (P = " + std::to_string(P) +
                                ", N = " + std::to_string(N) + "), got " + std::to_string(kept_lines.size()));
  std::vector<replay::NpyArray> ref(L);
  for (std::size_t l = 0; l < L; ++l) {
    ref[l] = replay::read_npy_f32(ref_prefix + std::to_string(l) + ".npy", "REF" + std::to_string(l));
    const auto& s = ref[l].shape;
    if (s.size() != 3 || s[0] != H || s[1] != s[2] || s[1] < N)
      throw std::invalid_argument("REF" + std::to_string(l) + ": expected [" + std::to_string(H) + ", M, M], M >= " +
                                  std::to_string(N));
  }
  auto T = [&](std::size_t head, std::size_t t, std::size_t j) { return tr.data[(head * N + t) * N + j]; };
  auto R = [&](std::size_t l, std::size_t h, std::size_t t, std::size_t j) {
    const std::size_t M = ref[l].shape[1];
    return ref[l].data[(h * M + t) * M + j];
  };
  // held[t]: the positions llama.cpp held for row t (kept set before t, plus t), from KEPT.
  std::vector<std::vector<std::size_t>> held(N);
  for (std::size_t t = 0; t < N; ++t) {
    if (t < P) {
      for (std::size_t j = 0; j <= t; ++j) held[t].push_back(j);
      continue;
    }
    const nlohmann::json& before = kept_lines[t - P];
    if (before.at("t").get<std::size_t>() != t - 1) throw std::invalid_argument("KEPT: line t's are not P-1, P, ...");
    for (const auto& p : before.at("kept").at(0)) {
      const std::size_t pos = p.get<std::size_t>();
      if (pos >= t || (!held[t].empty() && pos <= held[t].back()))
        throw std::invalid_argument("KEPT: line t = " + std::to_string(t - 1) + " is not ascending below " +
                                    std::to_string(t));
      held[t].push_back(pos);
    }
    held[t].push_back(t);
  }
  Failure fail;
  double max_sum_err = 0, max_dlogp_rel = 0, max_dp = 0;
  std::vector<double> max_dlogp_layer(L, 0.0), max_dp_layer(L, 0.0);
  std::size_t compared = 0, rows_checked = 0, underflow_checked = 0, underflow_unchecked = 0;
  std::vector<double> want(N);
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t t = 0; t < N; ++t) {
        const std::size_t head = l * H + h;
        const std::string where = "layer " + std::to_string(l) + " head " + std::to_string(h) + " row " +
                                  std::to_string(t) + (t < P ? " (prompt)" : " (decode)");
        // The reference's log_softmax over the held cells, where it is independent (not: decode rows of layers >= 1).
        const bool has_ref = t < P || l == 0;
        double scale = 1.0;
        if (has_ref) {
          double m = -std::numeric_limits<double>::infinity();
          for (std::size_t j : held[t]) {
            m = std::max(m, static_cast<double>(R(l, h, t, j)));
            scale = std::max(scale, std::abs(static_cast<double>(R(l, h, t, j))));
          }
          double z = 0;
          for (std::size_t j : held[t]) z += std::exp(static_cast<double>(R(l, h, t, j)) - m);
          const double lse = m + std::log(z);
          for (std::size_t j : held[t]) want[j] = static_cast<double>(R(l, h, t, j)) - lse;
        }
        const double logp_tol = kLogpRel * scale;
        // 1. finite exactly on the held cells (entries j > t are not recorded: the writer puts 0 there). A held cell
        // may be -inf only where p underflows float.
        std::size_t next = 0;
        for (std::size_t j = 0; j <= t; ++j) {
          const bool is_held = next < held[t].size() && held[t][next] == j;
          next += is_held;
          const float x = T(head, t, j);
          const bool underflow = is_held && x == -std::numeric_limits<float>::infinity();
          if (underflow && has_ref && want[j] - logp_tol < kLnDenormMin) {
            ++underflow_checked;
            continue;
          }
          if (underflow && !has_ref) {
            ++underflow_unchecked;
            continue;
          }
          if (std::isnan(x) || x > 1e-6f || std::isinf(x) == is_held)
            fail.report(where + ": entry " + std::to_string(j) + " is " + fmt(x) +
                        (is_held ? ", a held cell" + (has_ref ? " (the reference's log p " + fmt(want[j]) + ")" : "")
                                 : ", a cell not held"));
        }
        // 2. Σ p over the held cells is 1.
        double sum = 0;
        for (std::size_t j : held[t]) sum += std::exp(static_cast<double>(T(head, t, j)));
        max_sum_err = std::max(max_sum_err, std::abs(sum - 1.0));
        if (!(std::abs(sum - 1.0) <= kSumTol))
          fail.report(where + ": the softmax over the " + std::to_string(held[t].size()) + " held cells sums to " +
                      std::to_string(sum));
        // 3. log p and p against the reference's.
        if (!has_ref) continue;
        ++rows_checked;
        for (std::size_t j : held[t]) {
          const double got = static_cast<double>(T(head, t, j));
          const double dp = std::abs(std::exp(got) - std::exp(want[j]));
          max_dp = std::max(max_dp, dp);
          max_dp_layer[l] = std::max(max_dp_layer[l], dp);
          ++compared;
          if (!(dp <= kProbTol))
            fail.report(where + ": p of position " + std::to_string(j) + " is " + fmt(std::exp(got)) +
                        ", the reference's " + fmt(std::exp(want[j])));
          if (want[j] < kLnFltMin || std::isinf(got)) continue;
          const double d = std::abs(got - want[j]);
          max_dlogp_rel = std::max(max_dlogp_rel, d / scale);
          max_dlogp_layer[l] = std::max(max_dlogp_layer[l], d);
          if (!(d <= logp_tol))
            fail.report(where + ": log p of position " + std::to_string(j) + " is " + fmt(got) +
                        ", the reference's " + fmt(want[j]) + " (tolerance " + fmt(logp_tol) + ")");
        }
      }
  // The trace to replay: the reference's rows wherever it is independent, the tool's own elsewhere.
  std::vector<float> out(HL * N * N, 0.0f);
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t t = 0; t < N; ++t) {
        const bool from_ref = t < P || l == 0;
        float* row = out.data() + ((l * H + h) * N + t) * N;
        for (std::size_t j = 0; j <= t; ++j) row[j] = from_ref ? R(l, h, t, j) : T(l * H + h, t, j);
      }
  replay::write_npy_f32(argv[7], {HL, N, N}, out.data());
  std::printf("logits: %zu heads (%zu layers x %zu), N = %zu, P = %zu: every row finite exactly on its held cells "
              "and its softmax sums to 1 over them (max |sum - 1| %.2g, tolerance %.0e); %zu rows, %zu entries against "
              "kvevict-generate: max |dlog p| / max(1, max |logit|) %.3g (tolerance %.2g), max |dp| %.3g (tolerance "
              "%.2g); held cells at p = 0 (float underflow): %zu where the reference's p < 2^-149, %zu in rows "
              "without a reference\n",
              HL, L, H, N, P, max_sum_err, kSumTol, rows_checked, compared, max_dlogp_rel, kLogpRel, max_dp, kProbTol,
              underflow_checked, underflow_unchecked);
  for (std::size_t l = 0; l < L; ++l)
    std::printf("  layer %zu: max |dlog p| %.3g, max |dp| %.3g\n", l, max_dlogp_layer[l], max_dp_layer[l]);
  if (fail.count) std::fprintf(stderr, "%d failures\n", fail.count);
  return fail.count ? 1 : 0;
}

// kSumRel: a summed row's exp sums to n_layer · n_head (each head's p to 1 within kSumTol), relative.
// kSummedProbRel: |Σp − Σp_ref| / (n_layer · n_head) on a prompt row's held cell: the mean over heads of the per-head
// |Δp|, bounded by kProbTol like each of them; measured 5.0e-4 on stories260K (P = 400, k = 64). kSummedLogRel:
// |Δ log Σp| where Σp_ref >= 1e-3 · n_layer · n_head (a relative error of the sum; smaller sums are checked by
// kSummedProbRel only), measured 1.85e-2 (F16 keys and queries, as kLogpRel).
constexpr double kSumRel = 1e-5, kSummedProbRel = 0.001, kSummedLogRel = 0.04;

int check_summed(int argc, char** argv) {
  if (argc != 8) throw std::invalid_argument("summed: expected TRACE KEPT P N_LAYER REF SPLICED");
  const replay::NpyArray tr = replay::read_npy_f32(argv[2], "TRACE");
  const std::vector<nlohmann::json> kept_lines = read_lines(argv[3]);
  const std::size_t P = std::stoul(argv[4]), L = std::stoul(argv[5]);
  const std::string ref_prefix = argv[6];
  if (tr.shape.size() != 3 || tr.shape[0] != 1 || tr.shape[1] != tr.shape[2] || L == 0)
    throw std::invalid_argument("TRACE: expected [1, N, N]");
  const std::size_t N = tr.shape[1];
  if (P == 0 || P > N || kept_lines.size() != N - P + 1)
    throw std::invalid_argument("KEPT: expected " + std::to_string(N - P + 1) + " lines, got " +
                                std::to_string(kept_lines.size()));
  std::vector<replay::NpyArray> ref(L);
  std::size_t H = 0;
  for (std::size_t l = 0; l < L; ++l) {
    ref[l] = replay::read_npy_f32(ref_prefix + std::to_string(l) + ".npy", "REF" + std::to_string(l));
    const auto& s = ref[l].shape;
    if (l == 0 && s.size() == 3) H = s[0];
    if (s.size() != 3 || s[0] != H || H == 0 || s[1] != s[2] || s[1] < N)
      throw std::invalid_argument("REF" + std::to_string(l) + ": expected [n_head, M, M], M >= " + std::to_string(N));
  }
  const double heads = static_cast<double>(L * H);
  auto T = [&](std::size_t t, std::size_t j) { return tr.data[t * N + j]; };
  auto R = [&](std::size_t l, std::size_t h, std::size_t t, std::size_t j) {
    const std::size_t M = ref[l].shape[1];
    return static_cast<double>(ref[l].data[(h * M + t) * M + j]);
  };
  // held[t] as in `logits`: the prompt whole, then KEPT's set before t plus t.
  std::vector<std::vector<std::size_t>> held(N);
  for (std::size_t t = 0; t < N; ++t) {
    if (t < P) {
      for (std::size_t j = 0; j <= t; ++j) held[t].push_back(j);
      continue;
    }
    for (const auto& p : kept_lines[t - P].at("kept").at(0)) held[t].push_back(p.get<std::size_t>());
    held[t].push_back(t);
  }
  Failure fail;
  double max_sum_err = 0, max_dprob = 0, max_dlog = 0;
  std::size_t compared = 0;
  std::vector<double> want(N);
  std::vector<float> out(N * N, 0.0f);
  for (std::size_t t = 0; t < N; ++t) {
    const std::string where = "row " + std::to_string(t) + (t < P ? " (prompt)" : " (decode)");
    const bool has_ref = t < P;
    if (has_ref) {  // Σ_{l,h} softmax over the held cells, in double
      std::fill(want.begin(), want.end(), 0.0);
      for (std::size_t l = 0; l < L; ++l)
        for (std::size_t h = 0; h < H; ++h) {
          double m = -std::numeric_limits<double>::infinity(), z = 0;
          for (std::size_t j : held[t]) m = std::max(m, R(l, h, t, j));
          for (std::size_t j : held[t]) z += std::exp(R(l, h, t, j) - m);
          for (std::size_t j : held[t]) want[j] += std::exp(R(l, h, t, j) - m) / z;
        }
    }
    std::size_t next = 0;
    for (std::size_t j = 0; j <= t; ++j) {
      const bool is_held = next < held[t].size() && held[t][next] == j;
      next += is_held;
      const float x = T(t, j);
      out[t * N + j] = has_ref ? static_cast<float>(std::log(want[j])) : x;
      if (is_held && x == -std::numeric_limits<float>::infinity() && (!has_ref || want[j] < 1e-30)) continue;
      if (std::isnan(x) || std::isinf(x) == is_held || x > std::log(heads) + 1e-4)
        fail.report(where + ": entry " + std::to_string(j) + " is " + fmt(x) +
                    (is_held ? ", a held cell" : ", a cell not held"));
    }
    double sum = 0;
    for (std::size_t j : held[t]) sum += std::exp(static_cast<double>(T(t, j)));
    max_sum_err = std::max(max_sum_err, std::abs(sum / heads - 1.0));
    if (!(std::abs(sum / heads - 1.0) <= kSumRel))
      fail.report(where + ": exp of the row sums to " + std::to_string(sum) + " over its " +
                  std::to_string(held[t].size()) + " held cells, not n_layer * n_head = " + fmt(heads));
    if (!has_ref) continue;
    for (std::size_t j : held[t]) {
      const double got = std::exp(static_cast<double>(T(t, j)));
      const double dprob = std::abs(got - want[j]) / heads;
      max_dprob = std::max(max_dprob, dprob);
      ++compared;
      if (!(dprob <= kSummedProbRel))
        fail.report(where + ": Σp of position " + std::to_string(j) + " is " + fmt(got) + ", the reference's " +
                    fmt(want[j]));
      if (want[j] < 1e-3 * heads) continue;
      const double dlog = std::abs(std::log(got) - std::log(want[j]));
      max_dlog = std::max(max_dlog, dlog);
      if (!(dlog <= kSummedLogRel))
        fail.report(where + ": log Σp of position " + std::to_string(j) + " is " + fmt(std::log(got)) +
                    ", the reference's " + fmt(std::log(want[j])));
    }
  }
  replay::write_npy_f32(argv[7], {1, N, N}, out.data());
  std::printf("summed: %zu layers x %zu heads, N = %zu, P = %zu: every row finite exactly on its held cells, exp sums "
              "to n_layer * n_head (max relative error %.2g, tolerance %.0e); %zu prompt entries against "
              "kvevict-generate: max |dΣp| / (n_layer * n_head) %.3g (tolerance %.2g), max |dlog Σp| %.3g "
              "(tolerance %.2g)\n",
              L, H, N, P, max_sum_err, kSumRel, compared, max_dprob, kSummedProbRel, max_dlog, kSummedLogRel);
  if (fail.count) std::fprintf(stderr, "%d failures\n", fail.count);
  return fail.count ? 1 : 0;
}

int check_kept(int argc, char** argv) {
  if (argc != 4) throw std::invalid_argument("kept: expected KEPT REPLAY");
  const std::vector<nlohmann::json> a = read_lines(argv[2]), b = read_lines(argv[3]);
  Failure fail;
  if (a.size() != b.size()) fail.report(std::to_string(a.size()) + " lines against " + std::to_string(b.size()));
  double max_rel = 0;
  std::size_t positions = 0, same = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const std::string line = "line " + std::to_string(i) + " (t = " + a[i].at("t").dump() + ")";
    if (a[i].at("t") != b[i].at("t") || a[i].at("tau").get<double>() != b[i].at("tau").get<double>())
      fail.report(line + ": t or tau differ: " + b[i].at("t").dump() + ", " + b[i].at("tau").dump());
    const auto &ka = a[i].at("kept"), &kb = b[i].at("kept");
    if (ka != kb) {
      std::vector<long> sa = ka.at(0).get<std::vector<long>>(), sb = kb.at(0).get<std::vector<long>>(), only_a, only_b;
      std::set_difference(sa.begin(), sa.end(), sb.begin(), sb.end(), std::back_inserter(only_a));
      std::set_difference(sb.begin(), sb.end(), sa.begin(), sa.end(), std::back_inserter(only_b));
      std::string da, db;
      for (long p : only_a) da += " " + std::to_string(p);
      for (long p : only_b) db += " " + std::to_string(p);
      fail.report(line + ": kept sets differ: only in " + argv[2] + ":" + da + "; only in " + argv[3] + ":" + db);
      continue;
    }
    const auto &sa = a[i].at("scores").at(0), &sb = b[i].at("scores").at(0);
    ++same;
    positions += sa.size();
    for (std::size_t s = 0; s < sa.size(); ++s) {
      const double x = sa[s].get<double>(), y = sb[s].get<double>();
      const double rel = std::abs(x - y) / std::max({std::abs(x), std::abs(y), 1e-30});
      max_rel = std::max(max_rel, rel);
      if (!(rel <= kScoreTol))
        fail.report(line + ": the score of position " + ka.at(0).at(s).dump() + " is " + fmt(x) + " against " + fmt(y));
    }
  }
  std::printf("kept: %zu of %zu lines with the same positions (%zu in all); their scores within %.3g relative "
              "(tolerance %.2g)\n",
              same, a.size(), positions, max_rel, kScoreTol);
  if (fail.count) std::fprintf(stderr, "%d failures\n", fail.count);
  return fail.count ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "logits") return check_logits(argc, argv);
    if (mode == "summed") return check_summed(argc, argv);
    if (mode == "kept") return check_kept(argc, argv);
    std::fprintf(stderr, "usage: %s logits|summed TRACE KEPT P N_LAYER REF SPLICED | kept KEPT REPLAY\n", argv[0]);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvevict-llama-check-trace: %s\n", e.what());
    return 2;
  }
}

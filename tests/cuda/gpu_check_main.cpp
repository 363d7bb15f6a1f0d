// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// tests/cuda/gpu_check_main.cpp — the correctness check of the CUDA kernels on a GPU: every
// policy, contiguous and paged (token unit NHD and HND, page unit), batch 1 (dense logits) and
// 16 (ragged prompts and ragged logits), 200 decode steps, noise off / injected / drawn for
// Keyformer, each against the CPU caches fed the same logits (tests/cuda/harness.hpp).
// Passes when, per case: noise off or injected — every kept position set identical and every
// score within 1e-5 relative (in practice bit-identical), no status error; drawn noise — kept
// sets equal in >= 99.9% of (call, sequence, row) pairs. Prints a Markdown table (and writes
// it to the file given as the first argument); exit status 1 if a case fails, 2 on bad usage.
//
// `--host` runs the same matrix on the serial host executor instead (no GPU needed: the CI
// check of this program's own logic); `--quick` runs 20 steps instead of 200.
//
// Usage: gpu_check [--quick] [--host] [OUTPUT.md]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gpu_backend.hpp"
#include "harness.hpp"

int main(int argc, char** argv) {
  using namespace kvtest_cuda;
  bool quick = false, host = false;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (std::strcmp(argv[i], "--host") == 0)
      host = true;
    else if (argv[i][0] == '-') {
      std::fprintf(stderr, "gpu_check: unknown flag %s (usage: gpu_check [--quick] [--host] [OUTPUT.md])\n", argv[i]);
      return 2;
    } else {
      out = argv[i];
    }
  }
  try {
    const std::string gpu = host ? std::string("none (--host: the serial host executor)") : gpu_description();
    std::printf("gpu_check: %s\n", gpu.c_str());
    std::unique_ptr<Backend> backend;
    if (host)
      backend = std::make_unique<HostBackend>();
    else
      backend = make_gpu_backend();

    struct Layout {
      bool paged, page_unit;
      kvevict::PageLayout layout;
    };
    const Layout layouts[] = {{false, false, kvevict::PageLayout::NHD},
                              {true, false, kvevict::PageLayout::NHD},
                              {true, false, kvevict::PageLayout::HND},
                              {true, true, kvevict::PageLayout::NHD}};
    const kvevict::Policy policies[] = {kvevict::Policy::keyformer, kvevict::Policy::h2o, kvevict::Policy::tova,
                                        kvevict::Policy::window, kvevict::Policy::streaming_llm};
    std::vector<CaseConfig> cases;
    for (kvevict::Policy pol : policies)
      for (const Layout& l : layouts)
        for (std::uint32_t batch : {1u, 16u})
          for (Noise noise : {Noise::off, Noise::injected, Noise::drawn}) {
            if (pol != kvevict::Policy::keyformer && noise != Noise::off) continue;
            CaseConfig c;
            c.policy = pol;
            c.paged = l.paged;
            c.page_unit = l.page_unit;
            c.layout = l.layout;
            c.noise = noise;
            c.n_q = 8;
            c.n_kv = 2;
            c.head_dim = 16;
            c.k = 512;
            c.w = 16;
            c.sinks = 4;
            c.steps = quick ? 20 : 200;
            c.ragged = batch > 1;
            c.prompts.clear();
            if (batch == 1) {
              c.prompts.push_back(900);
            } else {
              for (std::uint32_t b = 0; b < batch; ++b) c.prompts.push_back(60 + 40 * b);  // 60 .. 660
            }
            c.seed = 1 + cases.size();
            cases.push_back(c);
          }
    std::ostringstream table;
    table << "| case | pairs | kept sets equal | slot / K,V mismatches | score bit mismatches | max rel. score error "
             "| status errors | result |\n|---|---|---|---|---|---|---|---|\n";
    int failures = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const CaseConfig& c : cases) {
      const Report r = run_case(*backend, c);
      const double agree =
          r.pairs == 0 ? 0.0 : 1.0 - static_cast<double>(r.set_mismatches) / static_cast<double>(r.pairs);
      const bool pass = c.noise == Noise::drawn ? (agree >= 0.999 && r.status_errors == 0)
                                                : (r.set_mismatches == 0 && r.slot_mismatches == 0 &&
                                                   r.status_errors == 0 && r.max_rel_score_error <= 1e-5);
      if (!pass) ++failures;
      char line[512];
      std::snprintf(
          line, sizeof line, "| %s | %llu | %.4f%% | %llu | %llu | %.3g | %llu | %s |\n", case_name(c).c_str(),
          static_cast<unsigned long long>(r.pairs), 100.0 * agree, static_cast<unsigned long long>(r.slot_mismatches),
          static_cast<unsigned long long>(r.score_bit_mismatches), r.max_rel_score_error,
          static_cast<unsigned long long>(r.status_errors), pass ? "pass" : ("FAIL: " + r.first_problem).c_str());
      table << line;
      std::printf("%s", line);
      std::fflush(stdout);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::ostringstream doc;
    doc << "### kvevict CUDA correctness check (gpu_check" << (quick ? " --quick" : "") << ")\n\n"
        << "GPU: " << gpu << "\n\n"
        << table.str() << "\n"
        << cases.size() - failures << " of " << cases.size() << " cases pass (" << secs << " s).\n";
    if (!out.empty()) {
      std::ofstream f(out);
      f << doc.str();
      if (!f) {
        std::fprintf(stderr, "gpu_check: cannot write %s\n", out.c_str());
        return 1;
      }
    }
    std::printf("\n%zu of %zu cases pass (%.1f s)\n", cases.size() - failures, cases.size(), secs);
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_check: %s\n", e.what());
    return 1;
  }
}

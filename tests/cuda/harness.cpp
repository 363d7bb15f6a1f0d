// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// tests/cuda/harness.cpp — see harness.hpp.
#include "harness.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include <kvevict/paged_presets.hpp>

namespace kvtest_cuda {
namespace {

/// A uniform in [0, 1) from the hash of (seed, a, b, c, d): the logits and ζ generator.
double unit(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t d) {
  using kvevict::detail::splitmix64;
  const std::uint64_t h = splitmix64(splitmix64(splitmix64(splitmix64(seed ^ a) ^ b) ^ c) ^ d);
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}
/// A logit: uniform in [-4, 4), or -inf (masked) with probability 1/64.
float logit(std::uint64_t seed, std::uint64_t b, std::uint64_t h, std::uint64_t r, std::uint64_t c) {
  const double u = unit(seed, b, h, r, c);
  if (u < 1.0 / 64.0) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(u * 8.0 - 4.0);
}
float injected_zeta(std::uint64_t seed, std::uint64_t b, std::uint64_t h, std::uint64_t r, std::uint64_t c) {
  return static_cast<float>(unit(seed ^ 0x5a5a5a5aULL, b, h, r, c) * 8.0 - 2.0);
}
/// K/V row element of (position p, head h, element e): exact in float, a function of the token.
float kv_value(std::int64_t p, std::uint32_t h, std::uint32_t e) {
  return static_cast<float>(p * 100 + static_cast<std::int64_t>(h) * 10 + static_cast<std::int64_t>(e));
}
std::int64_t position_of(std::uint32_t b, std::uint32_t t) { return 3 * static_cast<std::int64_t>(t) + 7 + b; }

kvevict::PolicyParams cpu_params(const CaseConfig& cfg) {
  kvevict::PolicyParams pp;
  pp.tau_init = cfg.tau_init;
  pp.tau_end = cfg.tau_end;
  pp.horizon = cfg.steps;
  pp.gumbel_noise = cfg.noise != Noise::off;
  pp.sinks = cfg.sinks;
  return pp;
}

kvevict::cuda::ScoreKind score_kind(kvevict::Policy p) {
  switch (p) {
    case kvevict::Policy::keyformer:
      return kvevict::cuda::ScoreKind::keyformer;
    case kvevict::Policy::h2o:
      return kvevict::cuda::ScoreKind::h2o;
    case kvevict::Policy::tova:
      return kvevict::cuda::ScoreKind::tova;
    case kvevict::Policy::streaming_llm:
    case kvevict::Policy::window:
      return kvevict::cuda::ScoreKind::none;
    default:
      break;
  }
  throw std::invalid_argument("kvtest_cuda: policy without a CUDA kernel (SnapKV, key norm)");
}
bool takes_window(kvevict::Policy p) { return p == kvevict::Policy::keyformer || p == kvevict::Policy::h2o; }

/// One sequence on the CPU side: its own contiguous KV and `Cache`, or a paged view on the shared pool.
struct CpuSeq {
  std::vector<float> k, v;
  std::vector<std::int64_t> pos;
  std::vector<std::size_t> lengths;
  std::unique_ptr<kvevict::CacheInterface> cache;
  std::vector<std::int32_t> table;
  std::size_t length = 0;
  kvevict::PagedKVView<float> pview;
  std::unique_ptr<kvevict::PagedCacheInterface> pcache;
};

}  // namespace

std::string case_name(const CaseConfig& cfg) {
  std::ostringstream o;
  o << kvevict::policy_name(cfg.policy)
    << (cfg.paged ? (cfg.page_unit ? " paged/page " : " paged/token ") : " contiguous ");
  if (cfg.paged) o << kvevict::page_layout_name(cfg.layout) << " ";
  o << "noise="
    << (cfg.noise == Noise::off        ? "off"
        : cfg.noise == Noise::injected ? "injected"
                                       : "drawn")
    << (cfg.ragged ? " ragged" : " dense") << " B=" << cfg.prompts.size() << " q=" << cfg.n_q << " kv=" << cfg.n_kv
    << " k=" << cfg.k << " steps=" << cfg.steps;
  return o.str();
}

Report run_case(Backend& backend, const CaseConfig& cfg) {
  namespace kc = kvevict::cuda;
  const std::uint32_t B = static_cast<std::uint32_t>(cfg.prompts.size()), nq = cfg.n_q, nkv = cfg.n_kv,
                      d = cfg.head_dim, ps = cfg.page_size;
  const std::uint32_t p_max = *std::max_element(cfg.prompts.begin(), cfg.prompts.end());
  const std::uint32_t cap = std::max(p_max, cfg.k) + (cfg.page_unit ? ps : 1) + 1;
  const std::uint32_t w = takes_window(cfg.policy) ? cfg.w : 0;
  const std::uint32_t sinks = cfg.policy == kvevict::Policy::streaming_llm ? cfg.sinks : 0;

  // ---- the device mirror ----
  BatchHost h;
  h.paged = cfg.paged;
  h.batch = B;
  h.n_kv = nkv;
  h.n_q = nq;
  h.head_dim = d;
  h.layout = cfg.layout;
  h.max_prompt = p_max;
  if (cfg.paged) {
    h.page_size = ps;
    h.max_pages = (cap + ps - 1) / ps;
    h.num_pages = h.max_pages * B;
    h.capacity = h.max_pages * ps;
  } else {
    h.capacity = cap;
  }
  h.allocate(w);

  // ---- the CPU caches ----
  kvevict::PagePool pool(cfg.paged ? h.num_pages : 1);
  std::vector<float> pk, pv;  // the CPU page pools
  if (cfg.paged) {
    pk.assign(static_cast<std::size_t>(h.num_pages) * ps * nkv * d, 0.0f);
    pv.assign(pk.size(), 0.0f);
  }
  std::vector<CpuSeq> cpu(B);
  for (std::uint32_t b = 0; b < B; ++b) {
    kvevict::CacheConfig config;
    config.n_q_heads = nq;
    config.budget = kvevict::Budget::tokens(cfg.k);
    config.recent = kvevict::RecentWindow::tokens(w);
    config.seed = cfg.seed * 1000 + b;
    h.seeds[b] = config.seed;
    CpuSeq& s = cpu[b];
    if (cfg.paged) {
      config.shared_heads = true;
      s.table.assign(h.max_pages, kvevict::kNoPage);
      s.pos.assign(static_cast<std::size_t>(h.max_pages) * ps, 0);
      s.pview.k = pk.data();
      s.pview.v = pv.data();
      s.pview.num_pages = h.num_pages;
      s.pview.page_size = ps;
      s.pview.n_kv_heads = nkv;
      s.pview.head_dim = d;
      s.pview.layout = cfg.layout;
      s.pview.page_table = s.table.data();
      s.pview.max_pages = h.max_pages;
      s.pview.length = &s.length;
      s.pview.positions = s.pos.data();
      kvevict::PagedEvictionConfig pc;
      pc.unit = cfg.page_unit ? kvevict::EvictUnit::page : kvevict::EvictUnit::token;
      pc.start_pages = cfg.page_unit ? cfg.start_pages : 0;
      pc.page_score = cfg.page_mean ? kvevict::PageScore::mean : kvevict::PageScore::sum;
      s.pcache = kvevict::make_paged_cache(cfg.policy, config, pc, s.pview, pool, cpu_params(cfg));
    } else {
      s.k.assign(static_cast<std::size_t>(nkv) * cap * d, 0.0f);
      s.v.assign(s.k.size(), 0.0f);
      s.pos.assign(static_cast<std::size_t>(nkv) * cap, 0);
      s.lengths.assign(nkv, 0);
      auto view =
          kvevict::KVView<float>::contiguous(s.k.data(), s.v.data(), s.pos.data(), s.lengths.data(), nkv, cap, d);
      s.cache = kvevict::make_cache(cfg.policy, config, view, cpu_params(cfg));
    }
  }

  // ---- appending one token to both sides ----
  std::vector<std::uint32_t> tokens(B, 0);  // tokens appended so far per sequence
  std::vector<float> krow(static_cast<std::size_t>(nkv) * d), vrow(krow.size());
  auto append = [&](std::uint32_t b) {
    const std::int64_t p = position_of(b, tokens[b]++);
    for (std::uint32_t hh = 0; hh < nkv; ++hh)
      for (std::uint32_t e = 0; e < d; ++e) {
        krow[hh * d + e] = kv_value(p, hh, e);
        vrow[hh * d + e] = -kv_value(p, hh, e);
      }
    CpuSeq& s = cpu[b];
    if (cfg.paged) {
      pool.append(s.pview, p, krow.data(), vrow.data());
      const std::uint32_t slot = static_cast<std::uint32_t>(h.lengths[b]);
      if (slot % ps == 0) {
        if (h.free_count == 0) throw std::logic_error("kvtest_cuda: the device free list is empty");
        h.indices[h.table_indptr[b] + slot / ps] = h.free_pages[--h.free_count];
      }
      const kc::PagedKV<float> kv = h.paged_view();
      for (std::uint32_t hh = 0; hh < nkv; ++hh)
        for (std::uint32_t e = 0; e < d; ++e) {
          h.k[kv.row(b, hh, slot) + e] = krow[hh * d + e];
          h.v[kv.row(b, hh, slot) + e] = vrow[hh * d + e];
        }
      h.positions[kv.slot(b, slot)] = p;
      h.lengths[b] = static_cast<std::int32_t>(slot + 1);
    } else {
      kvevict::KVView<float> view =
          kvevict::KVView<float>::contiguous(s.k.data(), s.v.data(), s.pos.data(), s.lengths.data(), nkv, cap, d);
      view.append(p, krow.data(), vrow.data());
      const kc::ContiguousKV<float> kv = h.contiguous_view();
      for (std::uint32_t hh = 0; hh < nkv; ++hh) {
        const std::uint32_t slot = static_cast<std::uint32_t>(h.lengths[b * nkv + hh]);
        for (std::uint32_t e = 0; e < d; ++e) {
          h.k[kv.row(b, hh, slot) + e] = krow[hh * d + e];
          h.v[kv.row(b, hh, slot) + e] = vrow[hh * d + e];
        }
        h.positions[kv.slot(b, hh, slot)] = p;
        h.lengths[b * nkv + hh] = static_cast<std::int32_t>(slot + 1);
      }
    }
  };

  // ---- comparing ----
  Report rep;
  auto note = [&](const std::string& what) {
    if (rep.first_problem.empty()) rep.first_problem = what;
  };
  auto compare = [&](const char* when, std::uint32_t call) {
    for (std::uint32_t b = 0; b < B; ++b) {
      if (h.status[b] != 0) {
        ++rep.status_errors;
        note(std::string(when) + " call " + std::to_string(call) + " seq " + std::to_string(b) + ": status " +
             std::to_string(h.status[b]));
      }
      for (std::uint32_t r = 0; r < h.selection_rows(); ++r) {
        ++rep.pairs;
        std::size_t cl;
        std::vector<std::int64_t> cpos, dpos;
        const std::string where = std::string(when) + " call " + std::to_string(call) + " seq " + std::to_string(b) +
                                  " row " + std::to_string(r);
        if (cfg.paged) {
          cl = cpu[b].pcache->length(0);
          cpos.assign(cpu[b].pcache->positions(0), cpu[b].pcache->positions(0) + cl);
          const kc::PagedKV<float> kv = h.paged_view();
          const std::size_t dl = static_cast<std::size_t>(h.lengths[b]);
          for (std::size_t s = 0; s < dl; ++s) dpos.push_back(h.positions[kv.slot(b, static_cast<std::uint32_t>(s))]);
        } else {
          cl = cpu[b].cache->length(r);
          cpos.assign(cpu[b].cache->positions(r), cpu[b].cache->positions(r) + cl);
          const kc::ContiguousKV<float> kv = h.contiguous_view();
          const std::size_t dl = static_cast<std::size_t>(h.lengths[b * nkv + r]);
          for (std::size_t s = 0; s < dl; ++s)
            dpos.push_back(h.positions[kv.slot(b, r, static_cast<std::uint32_t>(s))]);
        }
        std::vector<std::int64_t> cs = cpos, ds = dpos;
        std::sort(cs.begin(), cs.end());
        std::sort(ds.begin(), ds.end());
        if (cs != ds) {
          ++rep.set_mismatches;
          note(where + ": kept position sets differ (CPU " + std::to_string(cs.size()) + " tokens, device " +
               std::to_string(ds.size()) + ")");
        }
        if (cpos != dpos) {
          ++rep.slot_mismatches;
          note(where + ": positions by slot differ");
          continue;
        }
        // Scores by slot (every head of the row: paged rows hold all heads), and K/V rows.
        const std::uint32_t h0 = cfg.paged ? 0 : r, h1 = cfg.paged ? nkv : r + 1;
        for (std::uint32_t hh = h0; hh < h1; ++hh) {
          const float* cscore = cfg.paged ? cpu[b].pcache->scores(hh) : cpu[b].cache->scores(hh);
          for (std::size_t s = 0; s < cl; ++s) {
            const auto su = static_cast<std::uint32_t>(s);
            const float ds_ =
                cfg.paged ? h.scores[static_cast<std::size_t>(hh) * h.total_slots() + h.paged_view().slot(b, su)]
                          : h.scores[h.contiguous_view().slot(b, hh, su)];
            if (std::memcmp(&ds_, &cscore[s], sizeof(float)) != 0) {
              ++rep.score_bit_mismatches;
              const double den = std::max(std::fabs(static_cast<double>(cscore[s])), 1e-30);
              rep.max_rel_score_error = std::max(rep.max_rel_score_error, std::fabs(ds_ - cscore[s]) / den);
              note(where + ": score of head " + std::to_string(hh) + " slot " + std::to_string(s) + " differs");
            }
            const std::size_t off = cfg.paged ? h.paged_view().row(b, hh, su) : h.contiguous_view().row(b, hh, su);
            for (std::uint32_t e = 0; e < d; ++e)
              if (h.k[off + e] != kv_value(cpos[s], hh, e) || h.v[off + e] != -kv_value(cpos[s], hh, e)) {
                ++rep.slot_mismatches;
                note(where + ": K/V row of head " + std::to_string(hh) + " slot " + std::to_string(s) +
                     " is not its token's");
                break;
              }
          }
        }
      }
      if (cfg.paged && static_cast<std::size_t>(h.pages_freed[b]) != cpu[b].pcache->pages_freed()) {
        ++rep.slot_mismatches;
        note(std::string(when) + " call " + std::to_string(call) + " seq " + std::to_string(b) + ": pages freed " +
             std::to_string(h.pages_freed[b]) + " vs CPU " + std::to_string(cpu[b].pcache->pages_freed()));
      }
    }
    if (cfg.paged && h.free_count != pool.free_pages()) {
      ++rep.slot_mismatches;
      note(std::string(when) + " call " + std::to_string(call) + ": free pages " + std::to_string(h.free_count) +
           " vs CPU " + std::to_string(pool.free_pages()));
    }
  };

  // ---- prefill ----
  kc::PolicyParams p;
  p.score = score_kind(cfg.policy);
  p.gumbel_noise = cfg.noise != Noise::off;
  p.temperature.kind = kc::TemperatureKind::linear;
  p.temperature.tau_init = cfg.tau_init;
  p.temperature.tau_end = cfg.tau_end;
  p.temperature.horizon = cfg.steps;
  p.k = cfg.k;
  p.w = w;
  p.sinks = sinks;
  p.n_q_heads = nq;
  p.page_unit = cfg.page_unit;
  p.start_pages = cfg.page_unit ? cfg.start_pages : 0;
  p.page_mean = cfg.page_mean;
  kc::check_policy(p, nkv, h.capacity, cfg.paged ? ps : 0, "kvtest_cuda");

  for (std::uint32_t b = 0; b < B; ++b)
    for (std::uint32_t t = 0; t < cfg.prompts[b]; ++t) append(b);
  HostLogits pre;
  pre.stride = p_max;
  pre.x.assign(static_cast<std::size_t>(B) * nq * p_max * p_max, std::nanf(""));
  if (cfg.noise == Noise::injected) pre.gumbel.assign(pre.x.size(), std::nanf(""));
  for (std::uint32_t b = 0; b < B; ++b) {
    const std::uint32_t P = cfg.prompts[b];
    std::vector<float> x(static_cast<std::size_t>(nq) * P * P, std::nanf("")), z;
    if (cfg.noise == Noise::injected) z.assign(x.size(), std::nanf(""));
    for (std::uint32_t q = 0; q < nq; ++q)
      for (std::uint32_t r = 0; r < P; ++r)
        for (std::uint32_t c = 0; c <= r; ++c) {
          const float xv = logit(cfg.seed, b, q, r, c);
          x[(static_cast<std::size_t>(q) * P + r) * P + c] = xv;
          pre.x[((static_cast<std::size_t>(b) * nq + q) * p_max + r) * p_max + c] = xv;
          if (cfg.noise == Noise::injected) {
            const float zv = injected_zeta(cfg.seed, b, q, r, c);
            z[(static_cast<std::size_t>(q) * P + r) * P + c] = zv;
            pre.gumbel[((static_cast<std::size_t>(b) * nq + q) * p_max + r) * p_max + c] = zv;
          }
        }
    const float* zp = z.empty() ? nullptr : z.data();
    if (cfg.paged)
      cpu[b].pcache->prefill(x.data(), P, zp);
    else
      cpu[b].cache->prefill(x.data(), P, zp);
  }
  backend.prefill(h, p, pre);
  compare("prefill", 0);

  // ---- decode steps ----
  for (std::uint32_t step = 1; step <= cfg.steps; ++step) {
    std::vector<std::uint32_t> n(B);
    for (std::uint32_t b = 0; b < B; ++b) {
      append(b);
      n[b] = static_cast<std::uint32_t>(cfg.paged ? h.lengths[b] : h.lengths[b * nkv]);
    }
    const std::uint32_t n_max = *std::max_element(n.begin(), n.end());
    HostLogits lg;
    lg.stride = n_max;
    std::vector<std::size_t> base(B);
    if (cfg.ragged) {
      std::size_t off = 0;
      for (std::uint32_t b = 0; b < B; ++b) {
        lg.indptr.push_back(static_cast<std::int64_t>(off));
        base[b] = off;
        off += static_cast<std::size_t>(nq) * n[b];
      }
      lg.indptr.push_back(static_cast<std::int64_t>(off));
      lg.x.assign(off, 0.0f);
    } else {
      for (std::uint32_t b = 0; b < B; ++b) base[b] = static_cast<std::size_t>(b) * nq * n_max;
      lg.x.assign(static_cast<std::size_t>(B) * nq * n_max, std::nanf(""));  // padding is never read
    }
    if (cfg.noise == Noise::injected) lg.gumbel.assign(lg.x.size(), std::nanf(""));
    for (std::uint32_t b = 0; b < B; ++b) {
      const std::size_t row_stride = cfg.ragged ? n[b] : n_max;
      std::vector<float> x(static_cast<std::size_t>(nq) * n[b]), z;
      if (cfg.noise == Noise::injected) z.resize(x.size());
      for (std::uint32_t q = 0; q < nq; ++q)
        for (std::uint32_t c = 0; c < n[b]; ++c) {
          const float xv = logit(cfg.seed, b, q, 100000 + step, c);
          x[static_cast<std::size_t>(q) * n[b] + c] = xv;
          lg.x[base[b] + q * row_stride + c] = xv;
          if (cfg.noise == Noise::injected) {
            const float zv = injected_zeta(cfg.seed, b, q, 100000 + step, c);
            z[static_cast<std::size_t>(q) * n[b] + c] = zv;
            lg.gumbel[base[b] + q * row_stride + c] = zv;
          }
        }
      const float* zp = z.empty() ? nullptr : z.data();
      if (cfg.paged)
        cpu[b].pcache->decode_step(x.data(), n[b], zp);
      else
        cpu[b].cache->decode_step(x.data(), n[b], zp);
    }
    backend.step(h, p, lg);
    compare("step", step);
  }
  return rep;
}

}  // namespace kvtest_cuda

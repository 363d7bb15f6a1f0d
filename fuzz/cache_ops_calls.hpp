// kvevict fuzzing — cache_ops_calls.hpp: fuzz_cache_ops' calls decoded from the input (Harness::run): append,
// prefill, decode_step, restore_position_order, reset, prefill chunks (materialised and from Q·K),
// finish_prefill, the per-head decode step, H2O's prefill from attention sums and queries, each checked against what the harness knows.
// SPDX-License-Identifier: Apache-2.0
//
// Included by cache_ops.cpp only.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <kvevict/kvevict.hpp>

#include "cache_ops_harness.hpp"
#include "cache_ops_layer.hpp"
#include "cache_ops_subject.hpp"
#include "fuzz_util.hpp"

namespace {

using namespace kvevict;

template <class T>
void Harness<T>::run(FuzzedDataProvider& in) {
  using CI = CacheInterface;
  for (int op = 0; op < 96 && in.remaining_bytes() > 0; ++op) {
    const KVView<T>& kv = layer().view;
    const std::size_t n = kv.lengths[0];
    switch (in.ConsumeIntegralInRange<int>(0, 17)) {
      case 0: case 1: case 2: case 3: {  // append; rarely a run of tokens (long prompts within 96 ops)
        if (in.ConsumeIntegralInRange<int>(0, 31) == 0) {
          const std::size_t count = in.ConsumeIntegralInRange<std::size_t>(1, layer().cap);
          for (std::size_t t = 0; t < count; ++t) {
            const std::size_t len = kv.lengths[0];
            const std::int64_t last = len > 0 ? kv.head_positions(0)[len - 1] : -1;
            if (last == std::numeric_limits<std::int64_t>::max()) break;
            call("append", [&](Layer<T>& L, CI&) { L.append(last + 1); });
          }
          break;
        }
        const std::int64_t p = pick_position(in);
        call("append", [&](Layer<T>& L, CI&) { L.append(p); });
        break;
      }
      case 4: case 5: {  // prefill
        std::size_t P = n;
        const int p_draw = in.ConsumeIntegralInRange<int>(0, 15);
        if (p_draw == 0) P = in.ConsumeIntegralInRange<std::size_t>(0, layer().cap + 1);
        const bool huge = p_draw == 8;  // issue 51: P >= 2^62 over a 16-float logits buffer, refused
        if (huge) P = in.PickValueInArray(kvfuzz::kHugeSizes);
        const std::size_t count = huge ? 16 : s().n_q * P * P;
        const std::vector<float> x = pick_floats(in, count);
        const int ptrs = in.ConsumeIntegralInRange<int>(0, 7);
        const std::vector<float> z = ptrs == 1 ? pick_floats(in, count) : std::vector<float>();
        const std::vector<std::int64_t> prompt(kv.head_positions(0), kv.head_positions(0) + n);
        const bool ok = call("prefill", [&](Layer<T>&, CI& c) {
          c.prefill(ptrs == 0 ? nullptr : x.data(), P, z.empty() ? nullptr : z.data());
        });
        KVFUZZ_CHECK(!ok || !huge, where(), ": prefill accepted prompt_len = ", P);
        if (ok) {
          KVFUZZ_CHECK(!prefilled && !chunking, where(), ": a prefill succeeded after another prefill or a chunk");
          const std::size_t k = s().cache->budget();
          KVFUZZ_CHECK(k >= 1 && s().cache->recent_window() <= k, where(), ": resolved k = ", k, ", w = ",
                       s().cache->recent_window());
          KVFUZZ_CHECK(kv.lengths[0] == std::min(k, P), where(), ": prefill kept ", kv.lengths[0],
                       " slots, expected min(k = ", k, ", P = ", P, ")");
          KVFUZZ_CHECK(std::is_sorted(prompt.begin(), prompt.end()), where(), ": unordered prompt accepted");
          accepted = prompt;
          managed = kv.lengths[0];
          prefilled = true;
        }
        break;
      }
      case 6: case 7: case 8: {  // decode step
        std::size_t m = n;
        const int m_draw = in.ConsumeIntegralInRange<int>(0, 15);
        if (m_draw == 0) m = in.ConsumeIntegralInRange<std::size_t>(0, layer().cap + 1);
        const bool huge = m_draw == 8;  // issue 51: n >= 2^62 over a 16-float logits buffer, refused
        if (huge) m = in.PickValueInArray(kvfuzz::kHugeSizes);
        const std::size_t count = huge ? 16 : s().n_q * m;
        const std::vector<float> x = pick_floats(in, count);
        const int ptrs = in.ConsumeIntegralInRange<int>(0, 7);
        const std::vector<float> z = ptrs == 1 ? pick_floats(in, count) : std::vector<float>();
        const std::int64_t new_pos = m >= 1 && m <= n ? kv.head_positions(0)[m - 1] : 0;
        const std::size_t before = managed;
        const bool ok = call("decode_step", [&](Layer<T>&, CI& c) {
          c.decode_step(ptrs == 0 ? nullptr : x.data(), m, z.empty() ? nullptr : z.data());
        });
        KVFUZZ_CHECK(!ok || !huge, where(), ": decode_step accepted n = ", m);
        if (ok) {
          KVFUZZ_CHECK(prefilled && m == before + 1 && m == n, where(), ": decode_step(n = ", m,
                       ") accepted with ", before, " managed slots, view length ", n);
          KVFUZZ_CHECK(accepted.empty() || new_pos > accepted.back(), where(), ": decode accepted position ",
                       new_pos, " after ", accepted.back());
          const std::size_t k = s().cache->budget();
          KVFUZZ_CHECK(kv.lengths[0] == std::min(m, k), where(), ": decode step left ", kv.lengths[0],
                       " slots, expected min(n = ", m, ", k = ", k, ")");
          accepted.push_back(new_pos);
          managed = kv.lengths[0];
        }
        break;
      }
      case 9: {  // sorts the managed slots (before any prompt: all); slots appended since stay
        const std::vector<std::int64_t> before = layer().pos;
        const std::size_t sorted = prefilled || chunking ? managed : n;
        if (call("restore_position_order", [&](Layer<T>&, CI& c) { c.restore_position_order(); }))
          for (std::size_t h = 0; h < layer().nkv; ++h) {
            const std::int64_t* p = kv.head_positions(h);
            const std::int64_t* q = before.data() + h * layer().cap;
            KVFUZZ_CHECK(std::is_sorted(p, p + sorted), where(), ": restore_position_order left head ", h,
                         " unsorted");
            KVFUZZ_CHECK(std::equal(p + sorted, p + n, q + sorted), where(),
                         ": restore_position_order moved a slot appended since the last step");
          }
        break;
      }
      case 10: {
        const std::uint64_t new_seed = in.ConsumeIntegral<std::uint64_t>();
        if (call("reset", [&](Layer<T>&, CI& c) { c.reset(new_seed); })) reseeded = true, seed = new_seed;
        KVFUZZ_CHECK(kv.lengths[0] == 0 && s().cache->step() == 0 && s().cache->budget() == 0, where(),
                     ": reset left state behind");
        forget();
        break;
      }
      case 11: case 12: {  // a chunk of the prompt, materialised: usually every slot appended since
        std::size_t C = n >= managed ? n - managed : 0, m = n;
        const int c_draw = in.ConsumeIntegralInRange<int>(0, 11);
        if (c_draw == 0) C = in.ConsumeIntegralInRange<std::size_t>(0, layer().cap + 1);
        if (c_draw == 6) C = in.PickValueInArray(kvfuzz::kHugeSizes);  // issue 51: refused
        const int m_draw = in.ConsumeIntegralInRange<int>(0, 15);
        if (m_draw == 0) m = in.ConsumeIntegralInRange<std::size_t>(0, layer().cap + 1);
        if (m_draw == 8) m = in.PickValueInArray(kvfuzz::kHugeSizes);
        const bool huge = c_draw == 6 || m_draw == 8;
        const std::size_t count = huge ? 16 : s().n_q * C * m;
        const std::vector<float> x = pick_floats(in, count);
        const int ptrs = in.ConsumeIntegralInRange<int>(0, 7);
        const std::vector<float> z = ptrs == 1 ? pick_floats(in, count) : std::vector<float>();
        const std::vector<std::int64_t> fresh(kv.head_positions(0) + std::min(managed, n), kv.head_positions(0) + n);
        const bool ok = call("prefill_chunk", [&](Layer<T>&, CI& c) {
          c.prefill_chunk(ptrs == 0 ? nullptr : x.data(), C, m, z.empty() ? nullptr : z.data());
        });
        KVFUZZ_CHECK(!ok || !huge, where(), ": prefill_chunk accepted C = ", C, ", n = ", m);
        if (ok) {
          took_chunk(C, m, fresh);
          if (!chunks.empty() && chunks.front().z.empty() != z.empty()) replayable = false;
          chunks.push_back(Chunk{C, m, x, z});
        }
        break;
      }
      case 13: {  // a chunk scored from Q and K, with the cache's query-head count or another one
        std::size_t C = n >= managed ? n - managed : 0, nq = s().n_q;
        const int c_draw = in.ConsumeIntegralInRange<int>(0, 11);
        if (c_draw == 0) C = in.ConsumeIntegralInRange<std::size_t>(0, layer().cap + 1);
        if (c_draw == 6) C = in.PickValueInArray(kvfuzz::kHugeSizes);  // issue 51: refused
        bool huge = c_draw == 6;
        switch (in.ConsumeIntegralInRange<int>(0, 15)) {
          case 0: nq = 2 * s().n_q; break;
          case 1: nq = std::max<std::size_t>(1, s().n_q / 2); break;
          case 2: nq = in.ConsumeIntegralInRange<std::size_t>(0, 9); break;
          case 8: nq = in.PickValueInArray(kvfuzz::kHugeSizes), huge = true; break;  // issue 51: refused
          default: break;
        }
        std::vector<float> q(huge ? 16 : C * nq * layer().hd);
        for (float& f : q) f = static_cast<float>(in.ConsumeIntegralInRange<int>(-16, 16)) / 8.0f;
        const int scratch_draw = in.ConsumeIntegralInRange<int>(0, 15);
        const std::size_t scratch_cap = scratch_draw == 0   ? std::max<std::size_t>(1, n / 2)
                                        : scratch_draw == 8 ? in.PickValueInArray(kvfuzz::kHugeSizes)
                                                            : layer().cap;
        huge = huge || scratch_draw == 8;
        const float scale = in.ConsumeBool() ? 0.5f : 1.0f;
        const std::vector<std::int64_t> fresh(kv.head_positions(0) + std::min(managed, n), kv.head_positions(0) + n);
        const bool ok = call("prefill_chunk_qk", [&](Layer<T>& L, CI& c) {
          QKChunkScratch scratch(scratch_cap, L.hd);
          prefill_chunk_qk(c, L.view, q.empty() ? nullptr : q.data(), C, nq, scale, scratch);
        });
        KVFUZZ_CHECK(!ok || !huge, where(), ": prefill_chunk_qk accepted C = ", C, ", n_q_heads = ", nq,
                     ", scratch capacity ", scratch_cap);
        if (ok) {
          KVFUZZ_CHECK(nq == s().n_q, where(), ": prefill_chunk_qk accepted n_q_heads = ", nq, " for a cache of ",
                       s().n_q);
          took_chunk(C, n, fresh);
          replayable = false;  // its logits are computed inside (GEMM): no one-shot replay
        }
        break;
      }
      case 16: {  // prefill_from_attention: H2O's cut from column sums (hostile values, a wrong P, a huge P)
        std::size_t P = n;
        const int p_draw = in.ConsumeIntegralInRange<int>(0, 15);
        if (p_draw == 0) P = in.ConsumeIntegralInRange<std::size_t>(0, layer().cap + 1);
        const bool huge = p_draw == 8;
        if (huge) P = in.PickValueInArray(kvfuzz::kHugeSizes);
        const std::vector<float> sums = pick_floats(in, huge ? 16 : s().n_q * P);
        const bool null = in.ConsumeIntegralInRange<int>(0, 7) == 0;
        const std::vector<std::int64_t> prompt(kv.head_positions(0), kv.head_positions(0) + n);
        const bool ok = call("prefill_from_attention", [&](Layer<T>&, CI& c) {
          c.prefill_from_attention(null ? nullptr : sums.data(), P);
        });
        KVFUZZ_CHECK(!ok || (!huge && !null), where(), ": prefill_from_attention accepted P = ", P,
                     null ? " with null sums" : "");
        if (ok) {
          KVFUZZ_CHECK(!prefilled && !chunking, where(), ": prefill_from_attention succeeded after a prefill or chunk");
          for (float v : sums) KVFUZZ_CHECK(std::isfinite(v) && v >= 0.0f, where(), ": accepted a sum of ", v);
          const std::size_t k = s().cache->budget();
          KVFUZZ_CHECK(k >= 1 && kv.lengths[0] == std::min(k, P), where(), ": prefill_from_attention kept ",
                       kv.lengths[0], " slots, expected min(k = ", k, ", P = ", P, ")");
          accepted = prompt;
          managed = kv.lengths[0];
          prefilled = true;
          replayable = false;  // its scores come from the sums, not from logits a one-shot replay could take
        }
        break;
      }
      case 14: {  // finish_prefill
        if (call("finish_prefill", [&](Layer<T>&, CI& c) { c.finish_prefill(); })) {
          KVFUZZ_CHECK(chunking && !prefilled, where(), ": finish_prefill succeeded without a chunked prompt");
          const std::size_t k = s().cache->budget();
          KVFUZZ_CHECK(k >= 1 && kv.lengths[0] == std::min(k, managed), where(), ": finish_prefill kept ",
                       kv.lengths[0], " of ", managed, " slots with k = ", k);
          managed = kv.lengths[0];
          prefilled = true;
          chunking = false;
          if (!config().bounded_prefill) compare_with_one_shot();
        }
        break;
      }
      case 15: {  // the per-head decode step: begin, heads in a drawn order (bad, repeated, out of range), end
        const std::size_t nkv = layer().nkv, g = s().n_q / nkv;
        if (!open_step) {
          std::size_t m = n;
          const int m_draw = in.ConsumeIntegralInRange<int>(0, 15);
          if (m_draw == 0) m = in.ConsumeIntegralInRange<std::size_t>(0, layer().cap + 1);
          if (m_draw == 8) m = in.PickValueInArray(kvfuzz::kHugeSizes);  // issue 51: refused
          const std::size_t before = managed;
          if (!call("begin_decode_step", [&](Layer<T>&, CI& c) { c.begin_decode_step(m); })) break;
          KVFUZZ_CHECK(m_draw != 8, where(), ": begin_decode_step accepted n = ", m);
          KVFUZZ_CHECK(prefilled && m == before + 1 && m == n, where(), ": begin_decode_step(n = ", m,
                       ") accepted with ", before, " managed slots, view length ", n);
          open_step = true;
          step_m = m;
          step_pos = kv.head_positions(0)[m - 1];
          KVFUZZ_CHECK(accepted.empty() || step_pos > accepted.back(), where(), ": begin accepted position ",
                       step_pos, " after ", accepted.back());
          done.assign(nkv, 0);
        }
        const std::size_t calls = in.ConsumeIntegralInRange<std::size_t>(0, nkv + 1);
        for (std::size_t i = 0; i < calls; ++i) {
          const std::size_t j = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? nkv : in.ConsumeIntegralInRange<std::size_t>(0, nkv - 1);
          const std::vector<float> x = pick_floats(in, g * step_m);
          const int ptrs = in.ConsumeIntegralInRange<int>(0, 7);
          const std::vector<float> z = ptrs == 1 ? pick_floats(in, g * step_m) : std::vector<float>();
          if (call("score_decode_head", [&](Layer<T>&, CI& c) {
                c.score_decode_head(j, ptrs == 0 ? nullptr : x.data(), z.empty() ? nullptr : z.data());
              })) {
            KVFUZZ_CHECK(j < nkv && done[j] == 0, where(), ": score_decode_head(", j, ") accepted (n_kv_heads = ",
                         nkv, ", already scored: ", j < nkv ? int(done[j]) : -1, ")");
            done[j] = 1;
          }
        }
        if (in.ConsumeIntegralInRange<int>(0, 3) != 0 &&
            call("end_decode_step", [&](Layer<T>&, CI& c) { c.end_decode_step(); })) {
          KVFUZZ_CHECK(std::count(done.begin(), done.end(), 1) == static_cast<long>(nkv) && kv.lengths[0] >= 1,
                       where(), ": end_decode_step accepted with a KV head not scored");
          const std::size_t k = s().cache->budget();
          KVFUZZ_CHECK(kv.lengths[0] == std::min(step_m, k), where(), ": the per-head step left ", kv.lengths[0],
                       " slots, expected min(n = ", step_m, ", k = ", k, ")");
          accepted.push_back(step_pos);
          managed = kv.lengths[0];
          open_step = false;
        }
        break;
      }
      default: {  // queries, including an out-of-range head
        const std::size_t h = in.ConsumeIntegralInRange<std::size_t>(0, layer().nkv);
        call("retained_positions", [&](Layer<T>& L, CI& c) {
          const std::vector<std::int64_t> r = c.retained_positions(h);
          KVFUZZ_CHECK(h < L.nkv && r.size() == L.view.lengths[h] && std::is_sorted(r.begin(), r.end()), where(),
                       ": retained_positions(", h, ")");
        });
        break;
      }
    }
    check_common();
  }
}

}  // namespace

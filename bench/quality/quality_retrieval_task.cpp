// kvevict — bench/quality/quality_retrieval_task.cpp: kvevict-quality --retrieval: every run answers every prompt.
// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <iostream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "llama2/model.hpp"
#include "llama2/tokenizer.hpp"
#include "quality_run.hpp"

namespace kvquality {

int QualityRun::run_retrieval() {
  const llama2::LoadedModel& files = *loaded;
  const llama2::Model& model = files.model;
  const llama2::Tokenizer& tok = *files.tokenizer;
  // ---- the retrieval task: every run (and the full cache) answers every prompt greedily ----
  if (prompt + answer_tokens > model.config().seq_len)
    throw kvcli::UsageError("--prompt", std::to_string(prompt) + " + --answer-tokens " +
                                            std::to_string(answer_tokens) + " exceeds the model's context of " +
                                            std::to_string(model.config().seq_len) + " positions");
  std::vector<kvquality::RetrievalItem> items;
  rspec.doc_names = doc_names;  // a too-short document is named by its file
  try {
    items = kvquality::make_retrieval_items(
        doc_ids, [&](const std::string& t) { return tok.encode(t, false); }, rspec);
  } catch (const std::invalid_argument& e) {
    // Name the flag that can fix it: the documents are too short for the excerpt (--data), the
    // needle copies fill the prompt (--needle-repeats), or the prompt is too short (--prompt).
    std::string what = e.what();
    const std::string prefix = "make_retrieval_items: ";
    if (what.rfind(prefix, 0) == 0) what = what.substr(prefix.size());
    const char* flag = what.rfind("document ", 0) == 0 ? "--data"
                       : (what.find("no room") != std::string::npos && rspec.needle_repeats > 1) ? "--needle-repeats"
                                                                                                  : "--prompt";
    throw kvcli::UsageError(flag, what);
  }
  if (!prompts_out.empty()) {  // before the runs: a runner of other engines needs only the prompts
    std::ostringstream ps;
    for (std::size_t i = 0; i < items.size(); ++i) {
      ps << i << " " << items[i].depth << " " << items[i].code;
      for (int id : items[i].prompt) ps << " " << id;
      ps << "\n";
    }
    try {
      kvcli::write_file_atomically(prompts_out, ps.str());
    } catch (const std::exception& e) {
      throw kvcli::UsageError("--prompts-out", e.what());
    }
  }
  // answers[run + 1][item]; answers[0]: the full cache.
  std::vector<std::vector<std::string>> answers(runs.size() + 1, std::vector<std::string>(items.size()));
  std::atomic<std::size_t> next_item{0}, items_done{0};
  std::mutex mu;
  std::exception_ptr error;
  const auto start = std::chrono::steady_clock::now();
  const int end_id = files.end_id;
  // The greedy answers of `es[0]` (the lead, e.g. the full cache) and of every other engine to prompt `p`,
  // all in one batch: the prompt runs once (prefill_batch), then each answer token is one step_batch of
  // the engines still answering. The same answers as each engine's own prefill (last-position logits)
  // and steps, bit for bit. A lone engine (chunked prefill, which cannot share a prompt) prefills alone.
  auto answer_all = [&](const std::vector<llama2::Engine*>& es, const std::vector<int>& p) {
    llama2::Engine& lead = *es[0];
    const std::vector<llama2::Engine*> followers(es.begin() + 1, es.end());
    lead.reset();
    for (llama2::Engine* f : followers) f->reset();
    const llama2::RowMatrix& lp =
        followers.empty() ? lead.prefill(p) : llama2::Engine::prefill_batch(lead, followers, p);
    const std::size_t vocab = model.config().vocab_size;
    std::vector<const float*> logits(es.size(), lp.data() + static_cast<std::size_t>(lp.rows() - 1) * vocab);
    std::vector<std::vector<int>> out(es.size());
    std::vector<bool> answering(es.size(), true);
    for (std::size_t i = 0; i < answer_tokens; ++i) {
      std::vector<llama2::Engine*> step_es;
      std::vector<int> step_ids;
      std::vector<std::size_t> step_of;
      for (std::size_t e = 0; e < es.size(); ++e) {
        if (!answering[e]) continue;
        const int id = static_cast<int>(std::max_element(logits[e], logits[e] + vocab) - logits[e]);
        if (id == end_id || (rspec.format == kvquality::RetrievalFormat::chat && id == rspec.im_end)) {
          answering[e] = false;
          continue;
        }
        out[e].push_back(id);
        const std::string text = tok.decode(out[e]);
        // Stop once a run of digits has ended (the score reads only the first run).
        const std::string digits = kvquality::first_digits(text);
        if (!digits.empty() && text.find(digits) + digits.size() < text.size()) {
          answering[e] = false;
          continue;
        }
        if (i + 1 < answer_tokens) step_es.push_back(es[e]), step_ids.push_back(id), step_of.push_back(e);
      }
      if (step_es.empty()) break;
      llama2::Engine::step_batch(step_es, step_ids);
      for (std::size_t j = 0; j < step_es.size(); ++j) logits[step_of[j]] = step_es[j]->logits();
    }
    std::vector<std::string> texts;
    for (const std::vector<int>& o : out) texts.push_back(tok.decode(o));
    return texts;
  };
  const std::size_t answer_context = prompt + answer_tokens;
  auto rworker = [&] {
    try {
      std::unique_ptr<kvtools::ThreadPool> step_pool;
      if (step_threads > 1) step_pool = std::make_unique<kvtools::ThreadPool>(step_threads);
      llama2::Engine full(model, {}, 0, answer_context);
      full.set_prefill_logits(llama2::PrefillLogits::last);  // an answer reads the last position's only
      full.set_pool(step_pool.get());
      kvquality::FutureAttention unused;
      std::vector<std::unique_ptr<llama2::Engine>> engines =
          make_engines(unused, answer_tokens, step_pool.get(), answer_context);
      // answers[0] and the one-shot runs answer in one batch led by the full cache; chunked ones alone.
      std::vector<llama2::Engine*> batch{&full};
      std::vector<std::size_t> batch_answer{0}, alone;
      for (std::size_t r = 0; r < runs.size(); ++r) {
        engines[r]->set_prefill_logits(llama2::PrefillLogits::last);
        if (engines[r]->prefill_chunk() == 0)
          batch.push_back(engines[r].get()), batch_answer.push_back(r + 1);
        else
          alone.push_back(r);
      }
      for (std::size_t i; (i = next_item.fetch_add(1)) < items.size();) {
        const std::vector<std::string> got = answer_all(batch, items[i].prompt);
        for (std::size_t b = 0; b < batch.size(); ++b) answers[batch_answer[b]][i] = got[b];
        for (std::size_t r : alone) answers[r + 1][i] = answer_all({engines[r].get()}, items[i].prompt)[0];
        const std::size_t d = ++items_done;
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::lock_guard<std::mutex> lock(mu);
        std::cerr << "  prompt " << d << "/" << items.size() << "  " << fmt(secs, 1) << " s, ETA "
                  << fmt(secs / static_cast<double>(d) * static_cast<double>(items.size() - d), 0) << " s\n";
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
      next_item = items.size();
    }
  };
  std::cerr << "kvevict-quality: retrieval, " << items.size() << " prompts of " << prompt << " tokens ("
            << retrieval_format_text << "), " << runs.size() + 1 << " runs each, " << threads << " threads\n";
  std::vector<std::thread> rpool;
  for (unsigned i = 0; i < threads; ++i) rpool.emplace_back(rworker);
  for (auto& t : rpool) t.join();
  if (error) std::rethrow_exception(error);
  auto correct = [&](std::size_t a, std::size_t i) {
    return kvquality::first_digits(answers[a][i]) == items[i].code;
  };
  auto quoted = [](const std::string& t) {
    std::string q = "\"";
    for (char c : t) {
      if (c == '"') q += "\"\"";
      else if (c == '\n') q += "\\n";
      else q += c;
    }
    return q + "\"";
  };
  std::ostringstream csv;
  csv << "policy,ratio,k,seed,prompt,document,offset,depth,code,answer,correct\n";
  for (std::size_t a = 0; a <= runs.size(); ++a)
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (a == 0) csv << "full,1," << prompt << ",0,";
      else
        csv << runs[a - 1].label << "," << runs[a - 1].ratio << "," << runs[a - 1].kws.k << ","
            << runs[a - 1].seed << ",";
      csv << i << "," << doc_names[items[i].doc] << "," << items[i].offset << "," << items[i].depth << ","
          << items[i].code << "," << quoted(answers[a][i]) << "," << (correct(a, i) ? 1 : 0) << "\n";
    }
  // Markdown: accuracy per row and ratio, by depth and overall (seeded rows: over seeds and prompts).
  std::cout << "Retrieval: " << items.size() << " prompts (" << retrieval_n << " per depth) of " << prompt
            << " tokens, format " << retrieval_format_text << ", needle x" << rspec.needle_repeats << ", seed "
            << rspec.seed << ", greedy answer of at most " << answer_tokens
            << " tokens; correct = its first run of digits equals the code.\n\n| row | r | k |";
  for (unsigned d : rspec.depths) std::cout << " depth " << d << "% |";
  std::cout << " all |\n|---|---|---|";
  for (std::size_t i = 0; i <= rspec.depths.size(); ++i) std::cout << "---|";
  std::cout << "\n";
  auto row_line = [&](const std::string& label, const std::string& r, std::size_t k,
                      const std::vector<std::size_t>& which) {
    std::cout << "| " << label << " | " << r << " | " << k << " |";
    std::size_t all_ok = 0, all_n = 0;
    for (unsigned d : rspec.depths) {
      std::size_t ok = 0, n = 0;
      for (std::size_t a : which)
        for (std::size_t i = 0; i < items.size(); ++i)
          if (items[i].depth == d) ok += correct(a, i) ? 1 : 0, ++n;
      all_ok += ok, all_n += n;
      std::cout << " " << ok << "/" << n << " |";
    }
    std::cout << " " << all_ok << "/" << all_n << " (" << fmt(100.0 * static_cast<double>(all_ok) /
                                                           static_cast<double>(all_n), 0) << "%) |\n";
  };
  row_line("full", "1", prompt, {0});
  for (double r : ratios)
    for (const RowSpec& row : rows) {
      std::vector<std::size_t> which;
      std::size_t k = 0;
      for (std::size_t a = 0; a < runs.size(); ++a)
        if (runs[a].row == &row && runs[a].ratio == r) which.push_back(a + 1), k = runs[a].kws.k;
      std::ostringstream rt;
      rt << r;
      row_line(row.label, rt.str(), k, which);
    }
  std::cout << "\nPrompts (document @ excerpt offset, depth, code):";
  for (std::size_t i = 0; i < items.size(); ++i)
    std::cout << (i ? "; " : " ") << doc_names[items[i].doc] << "@" << items[i].offset << " " << items[i].depth
              << "% " << items[i].code;
  std::cout << "\n";
  kvcli::write_file_atomically(out_prefix + "_retrieval.csv", csv.str());
  std::cout.flush();
  if (!std::cout) throw std::runtime_error("stdout: write error");
  std::cerr << "wrote " << out_prefix << "_retrieval.csv\n";
  return kvcli::kExitOk;
}

}  // namespace kvquality

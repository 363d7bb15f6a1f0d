// kvevict-llama's shared pieces (tool_support.hpp): CPU time, llama.cpp's log, reading and tokenizing the text,
// the kept-set lines and the per-step invariants.
// SPDX-License-Identifier: Apache-2.0
#include "tool_support.hpp"

#include <algorithm>
#include <charconv>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>

#include "cli/kvevict_cli.hpp"

namespace kvevict_llama_tool {

bool g_verbose = false;

// CPU seconds this process has used (all threads): on a shared machine, less disturbed by other jobs than wall time.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void log_callback(ggml_log_level level, const char* text, void* /*user*/) {
  (void)level;
  if (g_verbose) std::fputs(text, stderr);
}

std::string read_file(const std::string& path, const std::string& flag) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) throw kvcli::UsageError(flag, "'" + path + "' does not exist");
  if (!S_ISREG(st.st_mode)) throw kvcli::UsageError(flag, "'" + path + "' is not a regular file");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  if (!in && !in.eof()) throw kvcli::UsageError(flag, "cannot read '" + path + "'");
  return os.str();
}

std::vector<llama_token> tokenize(const llama_vocab* vocab, const std::string& text) {
  const int n = -llama_tokenize(vocab, text.c_str(), static_cast<int32_t>(text.size()), nullptr, 0, true, false);
  std::vector<llama_token> ids(static_cast<std::size_t>(std::max(n, 0)));
  if (n > 0 && llama_tokenize(vocab, text.c_str(), static_cast<int32_t>(text.size()), ids.data(), n, true, false) < 0)
    throw std::runtime_error("llama_tokenize failed");
  return ids;
}

// The replay's JSON line (tools/replay/replay.cpp's LineWriter): t, τ, kept positions ascending, their scores.
void write_kept_line(std::ostream& out, std::size_t t, const kvevict::CacheInterface& cache, int seq) {
  const std::size_t n = cache.length(0);
  const std::int64_t* pos = cache.positions(0);
  const float* score = cache.scores(0);
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [pos](std::size_t a, std::size_t b) { return pos[a] < pos[b]; });
  auto num = [](auto x) {
    char buf[32];
    return std::string(buf, std::to_chars(buf, buf + sizeof buf, x).ptr);
  };
  std::string line = std::string(seq >= 0 ? "{\"seq\":" + num(seq) + "," : "{") + "\"t\":" + num(static_cast<std::uint64_t>(t)) + ",\"tau\":" + num(cache.temperature()) +
                     ",\"kept\":[[";
  std::string scores = "]],\"scores\":[[";
  for (std::size_t i = 0; i < n; ++i) {
    if (i) {
      line += ',';
      scores += ',';
    }
    line += num(pos[order[i]]);
    scores += num(score[order[i]]);
  }
  out << line << scores << "]]}\n";
}

// The invariants of issue 33, checked after every batch: at most k cells + the batch in llama.cpp's own
// mask, kept positions only from the previous kept set plus the batch, evicted positions never back, and
// llama.cpp's memory holding exactly the kept positions' range ends.
void check_step(const kvevict_llama::Evictor& ev, llama_memory_t mem, std::size_t k, std::size_t batch,
                const std::vector<std::int64_t>& before, std::size_t first, std::size_t t) {
  const llama_seq_id seq = ev.seq();
  const std::vector<std::int64_t> kept = ev.kept();
  if (ev.cell_map().visible() > k + batch && ev.prompt_len() != 0)
    throw std::runtime_error("step " + std::to_string(t) + ": the sequence held " +
                             std::to_string(ev.cell_map().visible()) + " cells, more than k + batch = " +
                             std::to_string(k + batch));
  for (std::int64_t p : kept) {
    const bool was_kept = std::binary_search(before.begin(), before.end(), p);
    const bool in_batch = static_cast<std::size_t>(p) >= first && static_cast<std::size_t>(p) < first + batch;
    if (!was_kept && !in_batch)
      throw std::runtime_error("step " + std::to_string(t) + ": position " + std::to_string(p) +
                               " is kept but was not held before");
    if (ev.evicted(static_cast<std::size_t>(p)))
      throw std::runtime_error("step " + std::to_string(t) + ": evicted position " + std::to_string(p) + " came back");
  }
  if (kept.empty()) return;
  const llama_pos lo = llama_memory_seq_pos_min(mem, seq), hi = llama_memory_seq_pos_max(mem, seq);
  const kvevict_llama::LayerKinds& kinds = ev.layer_kinds();
  if (kinds.hybrid()) {
    // llama.cpp's iSWA memory reports the sliding cache's lowest position (llama_kv_cache_iswa::seq_pos_min),
    // which may have let positions older than its window go: a kept position, at most the oldest kept one
    // inside the window.
    const auto in_window = std::upper_bound(kept.begin(), kept.end(),
                                            static_cast<std::int64_t>(kept.back()) -
                                                static_cast<std::int64_t>(kinds.window));
    if (hi != kept.back() || !std::binary_search(kept.begin(), kept.end(), static_cast<std::int64_t>(lo)) ||
        (in_window != kept.end() && lo > *in_window))
      throw std::runtime_error("step " + std::to_string(t) + ": llama.cpp's sliding-window cache holds positions [" +
                               std::to_string(lo) + ", " + std::to_string(hi) + "], kvevict keeps [" +
                               std::to_string(kept.front()) + ", " + std::to_string(kept.back()) +
                               "] (the lowest must be a kept one inside the window of " +
                               std::to_string(kinds.window) + " or older)");
    return;
  }
  if (lo != kept.front() || hi != kept.back())
    throw std::runtime_error("step " + std::to_string(t) + ": llama.cpp holds positions [" + std::to_string(lo) +
                             ", " + std::to_string(hi) + "], kvevict keeps [" + std::to_string(kept.front()) +
                             ", " + std::to_string(kept.back()) + "]");
}

}  // namespace kvevict_llama_tool

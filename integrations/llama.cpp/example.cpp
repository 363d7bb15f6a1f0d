// docs/llama-cpp.md's example: greedy decoding in llama.cpp, kvevict's H2O keeping 64 positions (model-wide).
#include <kvevict_llama.hpp>
#include <algorithm>
#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  std::vector<llama_token> ids(200, 1);  // your prompt's tokens
  const int steps = 32, chunk = 64, n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  kvevict::CacheConfig config;
  config.budget = kvevict::Budget::tokens(64), config.recent = kvevict::RecentWindow::tokens(16);
  kvevict_llama::Evictor ev(kvevict::Policy::h2o, config, {}, ids.size() + steps);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = ids.size() + steps, cp.n_batch = cp.n_ubatch = chunk, cp.n_threads = cp.n_threads_batch = 1;
  cp.cb_eval = kvevict_llama::eval_callback, cp.cb_eval_user_data = &ev;  // the scores...
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;                    // ...need the softmax
  llama_context* ctx = llama_init_from_model(model, cp);
  ev.attach(ctx, model);
  std::vector<llama_pos> pos(chunk);
  auto decode = [&](llama_token* t, int n) {  // a batch at the positions kvevict gives, then its selection
    llama_batch b = llama_batch_get_one(t, n);
    for (int i = 0, p0 = ev.begin(n); i < n; ++i) pos[i] = p0 + i;
    b.pos = pos.data();
    if (llama_decode(ctx, b) != 0) return;
    ev.end();  // decode steps: drops the evicted position (llama_memory_seq_rm)
  };
  for (std::size_t i = 0; i < ids.size(); i += chunk) decode(&ids[i], std::min<int>(chunk, ids.size() - i));
  ev.end_prompt();  // cuts the prompt to k = 64 positions
  for (int s = 0; s < steps; ++s) {
    const float* l = llama_get_logits_ith(ctx, -1);
    llama_token next = std::max_element(l, l + n_vocab) - l;
    decode(&next, 1);
  }
  std::printf("kept %zu positions, last %lld\n", ev.kept().size(), (long long)ev.kept().back());
  llama_free(ctx), llama_model_free(model);
}

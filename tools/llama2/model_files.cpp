// kvevict tools — llama2/model_files.cpp: --model / --tokenizer of the tools, resolved once.
// SPDX-License-Identifier: Apache-2.0
#include "llama2/model_files.hpp"

#include <filesystem>
#include <new>
#include <stdexcept>

#include "cli/kvevict_cli.hpp"

namespace llama2 {

std::string LoadedModel::end_name() const {
  if (!model.vocab()) return "end-of-story token (BOS = " + std::to_string(end_id) + ")";
  std::string piece = end_id >= 0 && static_cast<std::size_t>(end_id) < model.vocab()->tokens.size()
                          ? " " + model.vocab()->tokens[static_cast<std::size_t>(end_id)]
                          : std::string();
  return "end-of-sequence token (EOS = " + std::to_string(end_id) + piece + ")";
}

void add_model_inputs(kvcli::FileRoles& roles, const std::string& model_arg, const std::string& tokenizer_arg) {
  const std::string file = kvcli::find_checkpoint(model_arg.empty() ? kvcli::model_dir() : model_arg, "--model");
  roles.input("--model", file);
  roles.input("--tokenizer", tokenizer_arg.empty() ? kvcli::find_tokenizer_beside(file) : tokenizer_arg);
}

LoadedModel load_model(const std::string& model_arg, const std::string& tokenizer_arg, bool need_tokenizer) {
  const std::string model_flag = "--model";
  const std::string file = kvcli::find_checkpoint(model_arg.empty() ? kvcli::model_dir() : model_arg, model_flag);
  std::optional<Model> loaded;
  try {
    loaded.emplace(Model::load(file));
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    throw kvcli::UsageError(model_flag, kvcli::strip_origin(e.what()));
  }
  LoadedModel m{file, std::move(*loaded), std::nullopt, "", true, 1};
  const Config& cfg = m.model.config();
  const GgufVocab* vocab = m.model.vocab();
  if (vocab) {
    m.add_bos = vocab->add_bos >= 0 ? vocab->add_bos == 1 : vocab->model == "llama";
    m.end_id = static_cast<int>(vocab->eos_id);
  }

  std::string path = tokenizer_arg;
  const bool given = !path.empty();
  if (!given && vocab) {
    // A GGUF whose tokenizer this tool cannot build (an unknown pre-tokenizer) still runs on token ids
    // (--prompt-ids with --print-ids): the error is raised only when text is needed.
    try {
      m.tokenizer.emplace(Tokenizer::from_gguf(*vocab));
      m.tokenizer_source = "the GGUF vocabulary of '" + file + "'";
    } catch (const std::invalid_argument& e) {
      if (need_tokenizer)
        throw kvcli::UsageError(model_flag, "'" + file + "': its tokenizer: " + kvcli::strip_origin(e.what()));
    }
  } else {
    if (!given) path = kvcli::find_tokenizer_beside(file);
    if (need_tokenizer || (given && std::filesystem::is_regular_file(path))) {
      if (path.empty())
        throw kvcli::UsageError("--tokenizer", "no SentencePiece tokenizer (*.model) beside '" + file +
                                                   "'; give --tokenizer FILE.model (or --prompt-ids with --print-ids)");
      if (!std::filesystem::is_regular_file(path)) throw kvcli::UsageError("--tokenizer", "no file '" + path + "'");
      try {
        m.tokenizer.emplace(path);
      } catch (const std::exception&) {
        throw kvcli::UsageError("--tokenizer", "'" + path +
                                                   "' is not a SentencePiece model (llama2.c's tok*.bin tokenizers "
                                                   "are not supported; use the .model file)");
      }
      m.tokenizer_source = path;
    }
  }
  if (m.tokenizer && static_cast<std::size_t>(m.tokenizer->vocab_size()) != cfg.vocab_size)
    throw kvcli::UsageError(given ? "--tokenizer" : "--model",
                            "'" + (given ? path : file) + "' has " + std::to_string(m.tokenizer->vocab_size()) +
                                " pieces but the model '" + file + "' has vocab_size " +
                                std::to_string(cfg.vocab_size) + "; pass the model's own tokenizer");
  return m;
}

EvictionSettings eviction_settings(const kvcli::EvictionFlags& flags, const kvcli::Resolved& resolved,
                                   const std::string& policy) {
  EvictionSettings s;
  s.policy = policy;
  // kvcli::resolve gives k >= 1 for every eviction policy and k = 0 for the full cache, whose settings'
  // budget is never read: 1 stands in for it there.
  s.budget = kvevict::Budget::tokens(resolved.k == 0 ? 1 : resolved.k);
  s.recent = kvcli::recent_for(flags, resolved, policy);
  s.params = kvcli::policy_params(flags, resolved);
  s.layer_budgets = kvcli::layer_budgets_for(flags, resolved, policy);
  s.seed = flags.seed;
  s.shared_heads = flags.shared_heads || flags.paged;
  s.head_budgets = flags.head_budgets;
  s.kv_layout = flags.paged ? KvLayout::paged : KvLayout::contiguous;
  s.page_size = flags.page_size;
  s.evict_unit = flags.evict_pages ? kvevict::EvictUnit::page : kvevict::EvictUnit::token;
  return s;
}

}  // namespace llama2

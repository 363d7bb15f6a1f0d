// kvevict — bench/quality/quality_inputs.cpp: kvevict-quality's inputs: the model, the text or documents, the windows.
// SPDX-License-Identifier: Apache-2.0
#include <filesystem>
#include <stdexcept>

#include "llama2/model.hpp"
#include "llama2/tokenizer.hpp"
#include "quality_run.hpp"

namespace kvquality {

void QualityRun::load_inputs() {
  loaded.reset(new llama2::LoadedModel(llama2::load_model(model_path, tokenizer_path, true)));
  const llama2::LoadedModel& files = *loaded;
  const llama2::Model& model = files.model;
  if (retrieval_n > 0 && rspec.format == kvquality::RetrievalFormat::chat) {
    // ChatML framing needs the model's own <|im_start|> / <|im_end|> ids (SmolLM2: 1 and 2).
    const llama2::GgufVocab* vocab = model.vocab();
    auto id_of = [&](const char* piece) {
      if (vocab != nullptr)
        for (std::size_t i = 0; i < vocab->tokens.size(); ++i)
          if (vocab->tokens[i] == piece) return static_cast<int>(i);
      throw kvcli::UsageError("--retrieval-format", std::string("chat needs the token ") + piece +
                                                        " in the model's vocabulary (a GGUF chat model); use plain");
    };
    rspec.im_start = id_of("<|im_start|>");
    rspec.im_end = id_of("<|im_end|>");
  }
  if (window > model.config().seq_len)
    throw kvcli::UsageError("--window", std::to_string(window) + " exceeds the model's context of " +
                                            std::to_string(model.config().seq_len) + " positions");
  const llama2::Tokenizer& tok = *files.tokenizer;
  if (data_path.empty()) data_path = kvcli::shared_dir() + "/data/tinystories-val/tinystories_val.txt";
  std::string text;
  try {
    if (!std::filesystem::is_directory(data_path)) text = read_file(data_path);
  } catch (const std::runtime_error& e) {
    throw kvcli::UsageError("--data", e.what());
  }
  doc_mode = std::filesystem::is_directory(data_path);
  if (retrieval_n > 0 && !doc_mode)
    throw kvcli::UsageError("--retrieval", "needs --data to be a folder of documents (got the file '" + data_path +
                                               "')");
  if (!doc_mode) {
    ids = tokenize_corpus(tok, text);
    available = ids.size() / window;
    if (available == 0)
      throw kvcli::UsageError("--data", "'" + data_path + "' has " + std::to_string(ids.size()) +
                                            " tokens, less than one --window of " + std::to_string(window));
    if (n_windows_wanted > available)
      throw kvcli::UsageError("--windows", windows_opt + " exceeds the " + std::to_string(available) +
                                               " windows of " + std::to_string(window) + " tokens in '" + data_path +
                                               "'");
    n_windows = n_windows_wanted == 0 ? available : n_windows_wanted;
  } else {
    std::vector<std::size_t> lengths;
    std::vector<std::string> paths;
    try {
      paths = kvquality::list_documents(data_path);
    } catch (const std::runtime_error& e) {
      throw kvcli::UsageError("--data", e.what());
    }
    for (const std::string& path : paths) {
      doc_names.push_back(std::filesystem::path(path).filename().string());
      try {
        doc_ids.push_back(tok.encode(read_file(path), files.add_bos));
      } catch (const std::runtime_error& e) {  // e.g. a FIFO named x.txt in the folder
        throw kvcli::UsageError("--data", e.what());
      }
      lengths.push_back(doc_ids.back().size());
    }
    available = kvquality::document_windows(lengths, window, 0).size();
    if (retrieval_n == 0) {
      if (available == 0)
        throw kvcli::UsageError("--data", "no document in '" + data_path + "' has a --window of " +
                                              std::to_string(window) + " tokens");
      if (n_windows_wanted > available)
        throw kvcli::UsageError("--windows", windows_opt + " exceeds the " + std::to_string(available) +
                                                 " windows of " + std::to_string(window) +
                                                 " tokens in the documents of '" + data_path + "'");
      doc_wins = kvquality::document_windows(lengths, window, n_windows_wanted);
      n_windows = doc_wins.size();
    }
  }
}

std::vector<int> QualityRun::tokens_of(std::size_t w) const {
  if (!doc_mode) return window_tokens(ids, w, window);
  const std::vector<int>& d = doc_ids[doc_wins[w].doc];
  const auto from = d.begin() + static_cast<std::ptrdiff_t>(doc_wins[w].offset);
  return std::vector<int>(from, from + static_cast<std::ptrdiff_t>(window));
}

}  // namespace kvquality

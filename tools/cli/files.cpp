// kvevict tools — cli/files.cpp: the environment variables, model-file recognition and the output files.
// SPDX-License-Identifier: Apache-2.0
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/kvevict_cli.hpp"
#include "file_input.hpp"
#include "file_output.hpp"

namespace fs = std::filesystem;

namespace kvcli {

std::string shared_dir() {
  const char* env = std::getenv("KVEVICT_SHARED_DIR");
  return env != nullptr && *env != '\0' ? env : "../shared";
}

std::string model_dir() {
  const char* env = std::getenv("KVEVICT_MODEL_DIR");
  return env != nullptr && *env != '\0' ? env : shared_dir() + "/models/stories260K";
}

std::string help_footer() {
  return "Environment (all kvevict tools):\n"
         "  KVEVICT_SHARED_DIR  data root with models/ and data/ (default ../shared, relative to the working "
         "directory)\n"
         "  KVEVICT_MODEL_DIR   model folder: the llama2.c .bin checkpoint and the SentencePiece .model beside it\n"
         "                      (default $KVEVICT_SHARED_DIR/models/stories260K); --model/--tokenizer override it\n"
         "Exit codes: 0 success, 2 usage or input error (a bad flag, file, trace or model), 1 failure at run time.";
}

void check_llama2_checkpoint(const std::string& path, const std::string& flag) {
  const std::string who = flag + " '" + path + "'";
  // A FIFO would block in open and a device (/dev/zero) has no size: only regular files.
  if (const std::string problem = kvtools::file_problem(path); problem.rfind("is not", 0) == 0)
    throw UsageError(flag, "'" + path + "' " + problem);
  std::error_code ec;
  const std::uint64_t size = fs::file_size(path, ec);
  if (ec) throw UsageError(flag, "'" + path + "': cannot read (" + ec.message() + ")");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(flag, "'" + path + "': cannot open (" + std::strerror(errno) + ")");
  unsigned char head[28] = {};
  in.read(reinterpret_cast<char*>(head), sizeof head);
  const std::size_t got = static_cast<std::size_t>(in.gcount());
  auto not_ckpt = [&](const std::string& why) {
    return UsageError(flag, "'" + path + "' is not a llama2.c checkpoint (" + why + ")");
  };
  if (got >= 4 && std::memcmp(head, "GGUF", 4) == 0) return;  // GGUF: llama2::Model::load checks it whole
  if (got >= 4 && std::memcmp(head, "ak42", 4) == 0)
    throw not_ckpt("it is a newer llama2.c export (magic \"ak42\"); only the legacy format (export.py --version 0, as "
                   "in karpathy/tinyllamas) is supported");
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".model" || (got >= 2 && head[0] == 0x0a && std::memchr(head, 0xe2, got) != nullptr))
    throw not_ckpt("it looks like a SentencePiece tokenizer model; pass it as --tokenizer");
  if (got < 28) throw not_ckpt(std::to_string(size) + " bytes, shorter than the 28-byte header");
  bool text = true;
  for (unsigned char c : head) text = text && (c == '\n' || c == '\r' || c == '\t' || (c >= 0x20 && c < 0x7f));
  if (text) throw not_ckpt("it looks like a text file");
  std::int32_t h[7];
  std::memcpy(h, head, sizeof h);
  const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  std::ostringstream desc;
  for (int i = 0; i < 7; ++i) desc << (i ? " " : "") << names[i] << "=" << h[i];
  for (int i = 0; i < 7; ++i) {
    const bool ok = i == 5 ? h[i] != 0 && h[i] > -(1 << 24) && h[i] < (1 << 24) : h[i] > 0 && h[i] < (1 << 24);
    if (!ok) throw not_ckpt("implausible header: " + desc.str());
  }
  if (h[0] % h[3] != 0 || h[3] % h[4] != 0 || (h[0] / h[3]) % 2 != 0)
    throw not_ckpt("inconsistent header: " + desc.str());
  // Size the header implies (all factors < 2^24, so the products fit in 64 bits with room to spare).
  const std::uint64_t d = static_cast<std::uint64_t>(h[0]), hid = static_cast<std::uint64_t>(h[1]),
                      L = static_cast<std::uint64_t>(h[2]), hd = d / static_cast<std::uint64_t>(h[3]),
                      kv = hd * static_cast<std::uint64_t>(h[4]),
                      V = static_cast<std::uint64_t>(h[5] < 0 ? -std::int64_t{h[5]} : h[5]),
                      T = static_cast<std::uint64_t>(h[6]);
  const std::uint64_t floats = V * d + L * d * 2 + L * d * d * 2 + L * kv * d * 2 + L * hid * d * 3 + d + T * hd +
                               (h[5] < 0 ? V * d : 0);
  const std::uint64_t expected = 28 + 4 * floats;
  if (size != expected)
    throw not_ckpt("the header (" + desc.str() + ") implies " + std::to_string(expected) + " bytes, the file has " +
                   std::to_string(size) + (size < expected ? "; a truncated download?" : ""));
}

std::string find_checkpoint(const std::string& path, const std::string& flag) {
  std::error_code ec;
  const std::string where =
      "download stories260K.bin and tok512.model from https://huggingface.co/karpathy/tinyllamas (folder "
      "stories260K) into ../shared/models/stories260K, or point --model or KVEVICT_MODEL_DIR at a llama2.c or GGUF model";
  if (!fs::exists(path, ec)) throw UsageError(flag, "no model at '" + path + "'; " + where);
  if (fs::is_directory(path, ec)) {
    // llama2.c checkpoints first (a folder such as stories260K/ holds the .bin and a GGUF export of the
    // same model); a GGUF file only in a folder without one.
    std::vector<std::string> found, gguf;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string name = e.path().filename().string();
      if (e.is_regular_file() && e.path().extension() == ".bin" && name.rfind("tok", 0) != 0)
        found.push_back(e.path().string());
      if (e.is_regular_file() && e.path().extension() == ".gguf") gguf.push_back(e.path().string());
    }
    if (found.empty()) found = gguf;
    std::sort(found.begin(), found.end());
    if (found.empty())
      throw UsageError(flag, "no model (a llama2.c *.bin or a *.gguf) in the folder '" + path + "'; " + where);
    if (found.size() > 1) {
      std::string list;
      for (const auto& f : found) list += (list.empty() ? "" : ", ") + f;
      throw UsageError(flag, "the folder '" + path + "' holds several checkpoints (" + list +
                                 "); name one with --model FILE");
    }
    check_llama2_checkpoint(found.front(), flag);
    return found.front();
  }
  if (!fs::is_regular_file(path, ec)) throw UsageError(flag, "'" + path + "' is not a regular file");
  check_llama2_checkpoint(path, flag);
  return path;
}

std::string find_tokenizer_beside(const std::string& checkpoint) {
  fs::path dir = fs::path(checkpoint).parent_path();
  if (dir.empty()) dir = ".";
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".model") found.push_back(e.path().string());
  std::sort(found.begin(), found.end());
  return found.empty() ? std::string() : found.front();
}

void check_output_prefix(const std::string& prefix, const std::string& flag) {
  fs::path dir = fs::path(prefix).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UsageError(flag, "cannot write '" + prefix + "': the folder '" + dir.string() +
                               "' does not exist; create it or choose another " + flag);
  const std::string probe = (dir / (".kvevict-probe." + std::to_string(::getpid()))).string();
  std::FILE* f = std::fopen(probe.c_str(), "wb");
  if (f == nullptr)
    throw UsageError(flag, "cannot write in the folder '" + dir.string() + "' (" + std::strerror(errno) +
                               "); choose another " + flag);
  std::fclose(f);
  std::remove(probe.c_str());
}

void check_output_file(const std::string& path, const std::string& flag) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw UsageError(flag, "'" + path + "' is a directory; give a file name");
  check_output_prefix(path, flag);
}

void write_file_atomically(const std::string& path, const std::string& contents) {
  kvtools::write_file_atomically(path, contents);
}

std::string strip_origin(const std::string& message) {
  std::string m = message;
  // "llama2::Model::load: ..." / "kvevict::Budget: ..." -> "..."
  while ((m.rfind("llama2::", 0) == 0 || m.rfind("kvevict::", 0) == 0) && m.find(": ") != std::string::npos)
    m = m.substr(m.find(": ") + 2);
  return m;
}

}  // namespace kvcli

// tests/cli/cli_workspace.hpp — the folder every command-line tool test runs in (synthetic checkpoints and
// files, created once per process) and running one tool there: its exit code, stdout and stderr.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "../llama2/test_support.hpp"
#include "tool_files.hpp"

namespace cli_test {

namespace fs = std::filesystem;

using llama2_test::Header;

struct ToolRun {
  int exit_code = -1;
  std::string out, err;
  std::size_t out_lines() const {
    std::size_t n = 0;
    for (char c : out) n += c == '\n';
    return n;
  }
};

/// The folder every case runs in: synthetic checkpoints and files, created once.
class Workspace {
 public:
  static Workspace& get() {
    static Workspace w;
    return w;
  }
  const std::string& dir() const { return dir_; }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }

  /// Runs `binary args` in the workspace with `env` prepended (e.g. "KVEVICT_MODEL_DIR=x").
  ToolRun run(const std::string& binary, const std::string& args, const std::string& env = "") const {
    static int counter = 0;
    const std::string out = file("out." + std::to_string(counter)), err = file("err." + std::to_string(counter));
    ++counter;
    const std::string cmd = "cd '" + dir_ + "' && env " + env + " '" + binary + "' " + args + " > '" + out +
                            "' 2> '" + err + "' < /dev/null";
    const int status = std::system(cmd.c_str());
    ToolRun r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

 private:
  Workspace() {
    dir_ = (fs::temp_directory_path() / ("kvevict-cli-test." + std::to_string(::getpid()))).string();
    fs::create_directories(dir_);
    // tiny.bin: context 128, vocab 32. The weight seed is chosen so that greedy decoding from BOS never
    // predicts BOS (id 1) in 128 tokens: runs then end at --steps or at the end of the context.
    Header h;
    h.seq_len = 128;
    llama2_test::write_checkpoint(file("tiny.bin"), h, llama2_test::random_weights(h, kTinySeed));
    // A folder with two checkpoints, one with none, and a shared-dir layout for the environment variables.
    fs::create_directories(file("two"));
    fs::copy_file(file("tiny.bin"), file("two/a.bin"));
    fs::copy_file(file("tiny.bin"), file("two/b.bin"));
    fs::create_directories(file("none"));
    spit(file("none/notes.txt"), "nothing here\n");
    fs::create_directories(file("root/models/stories260K"));
    fs::copy_file(file("tiny.bin"), file("root/models/stories260K/tiny.bin"));
    // Files that are not checkpoints (in their own folder: none of them is beside tiny.bin).
    fs::create_directories(file("junk"));
    spit(file("junk/fake.gguf"), std::string("GGUF\x03\x00\x00\x00", 8) + std::string(64, '\0'));
    // Malformed GGUF files: a count no file can hold, an unknown tensor type, a truncated tensor.
    {
      auto u32 = [](std::uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
      auto u64 = [](std::uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); };
      auto str = [&](const std::string& x) { return u64(x.size()) + x; };
      spit(file("junk/huge-count.gguf"), "GGUF" + u32(3) + u64(0) + u64(std::uint64_t{1} << 60));
      const std::string tensor = str("token_embd.weight") + u32(1) + u64(32);
      spit(file("junk/unknown-type.gguf"), "GGUF" + u32(3) + u64(1) + u64(0) + tensor + u32(99) + u64(0));
      spit(file("junk/short-tensor.gguf"),
           "GGUF" + u32(3) + u64(1) + u64(0) + tensor + u32(0) + u64(0) + std::string(27, '\0') + "0123");
    }
    spit(file("junk/fake.model"), std::string("\x0a\x0b\x0a\x05<unk>\x15\x00\x00\x00\x00", 14) + std::string(40, 'x'));
    spit(file("junk/README.md"), "# A model card\n\nThis is not a checkpoint, it is text.\n");
    const std::string whole = slurp(file("tiny.bin"));
    spit(file("junk/truncated.bin"), whole.substr(0, whole.size() - 100));
    spit(file("junk/garbage.tok"), std::string(200, '\x7f'));
    // A replay trace: H_q = 1, N = 4, P = 3.
    spit(file("t.json"),
         "{\"prompt_len\": 3, \"logits\": [[[0, null, null, null], [0.5, 0, null, null], [1, 0, -1, null], "
         "[0.2, 0.4, 0.6, 0.8]]]}");
    spit(file("overflow.json"), "{\"prompt_len\": 1, \"logits\": [[[1e999]]]}");
  }
  ~Workspace() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static constexpr std::uint32_t kTinySeed = KVEVICT_CLI_TINY_SEED;
  std::string dir_;
};

enum class Tool { generate, replay, quality };

inline const char* binary(Tool t) {
  switch (t) {
    case Tool::generate: return KVEVICT_GENERATE_BIN;
    case Tool::replay: return KVEVICT_REPLAY_BIN;
    case Tool::quality:
#ifdef KVEVICT_QUALITY_BIN
      return KVEVICT_QUALITY_BIN;
#else
      return "";  // not built (-DKVEVICT_BUILD_BENCH=OFF): its cases are skipped
#endif
  }
  return "";
}

inline std::string shared() { return llama2_test::shared_dir().string(); }

inline std::string expand(std::string s) {
  for (std::size_t at; (at = s.find("{W}")) != std::string::npos;) s.replace(at, 3, Workspace::get().dir());
  for (std::size_t at; (at = s.find("{S}")) != std::string::npos;) s.replace(at, 3, shared());
  return s;
}

inline const std::string kTiny = "--model {W}/tiny.bin ";
inline const std::string kSmall = "--model {S}/models/stories260K/stories260K.bin ";

}  // namespace cli_test

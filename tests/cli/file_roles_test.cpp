// tests/cli/file_roles_test.cpp — no tool run can destroy a file: an output that names an input (or another
// output) by any spelling is refused before any work with exit 2 and one line naming both flags, the input
// left byte for byte; and outputs are written whole or not at all (kvtools::AtomicOutput).
//
// Every (output flag, input or earlier output flag) pair of kvevict-generate and kvevict-quality is driven
// here; kvevict-llama's pairs are cases of integrations/llama.cpp/tests/llama_cases.sh (they need
// llama.cpp); kvevict-replay and kvevict-e2e write no file (stdout only).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../llama2/test_support.hpp"
#include "tool_files.hpp"
#include "cli/file_roles.hpp"
#include "cli/kvevict_cli.hpp"
#include "file_output.hpp"

namespace fs = std::filesystem;

namespace {

using cli_test::slurp;
using cli_test::spit;

/// A fresh folder per test, removed after it.
class Dir {
 public:
  Dir() {
    static int n = 0;
    path_ = (fs::temp_directory_path() /
             ("kvevict-file-roles." + std::to_string(::getpid()) + "." + std::to_string(n++)))
                .string();
    fs::create_directories(path_);
  }
  ~Dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }
  /// The names in the folder (to see that no temporary file is left behind).
  std::vector<std::string> names() const {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(path_)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  }

 private:
  std::string path_;
};

// ---- kvtools::file_identity and kvcli::FileRoles -------------------------------------------------------

TEST(FileIdentity, SameFileBySpellingLinkAndHardLink) {
  Dir d;
  spit(d / "m.bin", "model");
  fs::create_directories(d / "sub");
  fs::create_symlink(d / "m.bin", d / "link.bin");
  fs::create_hard_link(d / "m.bin", d / "hard.bin");
  const kvtools::FileIdentity id = kvtools::file_identity(d / "m.bin");
  EXPECT_TRUE(id.exists);
  EXPECT_EQ(kvtools::file_identity(d / "sub/../m.bin"), id);
  EXPECT_EQ(kvtools::file_identity(d / "./m.bin"), id);
  EXPECT_EQ(kvtools::file_identity(d / "link.bin"), id);
  EXPECT_EQ(kvtools::file_identity(d / "hard.bin"), id);
  spit(d / "other.bin", "model");  // same bytes, another file
  EXPECT_NE(kvtools::file_identity(d / "other.bin"), id);
  // Files that do not exist yet: the same once created if their canonical paths agree.
  EXPECT_FALSE(kvtools::file_identity(d / "new.csv").exists);
  EXPECT_EQ(kvtools::file_identity(d / "sub/../new.csv"), kvtools::file_identity(d / "new.csv"));
  EXPECT_NE(kvtools::file_identity(d / "new2.csv"), kvtools::file_identity(d / "new.csv"));
}

std::string usage_message(const kvcli::FileRoles& roles, std::string* flag) {
  try {
    roles.check();
  } catch (const kvcli::UsageError& e) {
    *flag = e.flag();
    return e.what();
  }
  return "";
}

TEST(FileRoles, RefusesAnOutputThatIsAnInputNamingBothFlags) {
  Dir d;
  spit(d / "m.gguf", "GGUF");
  kvcli::FileRoles roles;
  roles.input("--model", d / "m.gguf").input("--prompt-file", "").output("--kept-out", d / "sub/../m.gguf");
  fs::create_directories(d / "sub");
  std::string flag;
  const std::string msg = usage_message(roles, &flag);
  EXPECT_EQ(flag, "--kept-out");
  EXPECT_EQ(msg, "--kept-out: '" + (d / "sub/../m.gguf") + "' is the same file as --model '" + (d / "m.gguf") +
                     "', an input of this run: writing it would destroy it; choose another --kept-out");
}

TEST(FileRoles, RefusesTwoOutputsOfOneFileAndReportsInputsFirst) {
  Dir d;
  spit(d / "m.gguf", "GGUF");
  kvcli::FileRoles two;
  two.output("--kept-out", d / "k.jsonl").output("--trace-out", d / "./k.jsonl");
  std::string flag;
  EXPECT_EQ(usage_message(two, &flag), "--trace-out: '" + (d / "./k.jsonl") + "' is the same file as --kept-out '" +
                                           (d / "k.jsonl") + "'; give each output its own file");
  EXPECT_EQ(flag, "--trace-out");
  // An output that is both an input and another output's file is reported as the input's.
  kvcli::FileRoles both;
  both.output("--kept-out", d / "m.gguf").output("--trace-out", d / "m.gguf").input("--model", d / "m.gguf");
  EXPECT_NE(usage_message(both, &flag).find("--kept-out"), std::string::npos);
  EXPECT_NE(usage_message(both, &flag).find("is the same file as --model"), std::string::npos);
  // Distinct files, and flags not given, pass.
  kvcli::FileRoles fine;
  fine.input("--model", d / "m.gguf").input("--tokenizer", "").output("--kept-out", d / "k.jsonl");
  fine.output("--trace-out", d / "t.npy").output("--keys-out", "");
  EXPECT_NO_THROW(fine.check());
}

// ---- kvtools::AtomicOutput: whole or not at all -----------------------------------------------------

TEST(AtomicOutput, UncommittedLeavesTheOldFileAndNoTemporary) {
  Dir d;
  spit(d / "out.csv", "the good file\n");
  {
    kvtools::AtomicOutput out(d / "out.csv");
    out.stream() << "half a ne";
    EXPECT_EQ(slurp(d / "out.csv"), "the good file\n");  // nothing visible before commit
  }  // a run that failed: the destructor discards the temporary file
  EXPECT_EQ(slurp(d / "out.csv"), "the good file\n");
  EXPECT_EQ(d.names(), std::vector<std::string>{"out.csv"});
}

TEST(AtomicOutput, CommitReplacesWholeAndKeepsASymlink) {
  Dir d;
  spit(d / "target.csv", "old");
  fs::create_symlink(d / "target.csv", d / "link.csv");
  {
    kvtools::AtomicOutput out(d / "link.csv");
    out.stream() << "new contents";
    out.commit();
    EXPECT_THROW(out.commit(), std::logic_error);
  }
  EXPECT_TRUE(fs::is_symlink(d / "link.csv"));
  EXPECT_EQ(slurp(d / "target.csv"), "new contents");
  EXPECT_EQ(d.names(), (std::vector<std::string>{"link.csv", "target.csv"}));
  kvtools::write_file_atomically(d / "fresh.txt", "abc");
  EXPECT_EQ(slurp(d / "fresh.txt"), "abc");
}

TEST(AtomicOutput, DevicesInPlaceDirectoriesAndMissingFoldersRefused) {
  {
    kvtools::AtomicOutput null("/dev/null");  // a device is written in place, never renamed over
    null.stream() << "x";
    null.commit();
  }
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  Dir d;
  fs::create_directories(d / "adir");
  try {
    kvtools::AtomicOutput bad(d / "adir");
    ADD_FAILURE() << "a directory was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write '" + (d / "adir") + "' (it is a directory)");
  }
  try {
    kvtools::AtomicOutput bad(d / "no/such/folder.csv");
    ADD_FAILURE() << "a missing folder was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write '" + (d / "no/such/folder.csv") + "' (No such file or directory)");
  }
  EXPECT_EQ(d.names(), std::vector<std::string>{"adir"});
}

// ---- the tools: every (output, input) pair ------------------------------------------------------------

struct ToolRun {
  int code = -1;
  std::string err;
};

ToolRun run_tool(const std::string& dir, const std::string& binary, const std::string& args) {
  const std::string err = dir + "/.stderr";
  const std::string cmd = "cd '" + dir + "' && '" + binary + "' " + args + " > /dev/null 2> '" + err + "' < /dev/null";
  const int status = std::system(cmd.c_str());
  ToolRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  r.err = slurp(err);
  fs::remove(err);
  return r;
}

/// A workspace with a llama2.c checkpoint (tiny.bin, context 128), a tokenizer file beside it (never read:
/// the files are checked before anything is loaded), a text and a folder of documents.
class Tools : public ::testing::Test {
 protected:
  void SetUp() override {
    llama2_test::Header h;
    h.seq_len = 128;
    llama2_test::write_checkpoint(d / "tiny.bin", h, llama2_test::random_weights(h, 1));
    spit(d / "tok.model", "a tokenizer, never read");
    spit(d / "text.txt", "Once upon a time.\n\nThe end.\n");
    fs::create_directories(d / "docs");
    spit(d / "docs/a.txt", "first document\n");
    spit(d / "docs/b.rst", "second document\n");
    fs::create_directories(d / "sub");
    for (const char* f : {"tiny.bin", "tok.model", "text.txt", "docs/a.txt", "docs/b.rst"}) before[f] = slurp(d / f);
  }
  /// Every input byte for byte as before, and no temporary file left beside them.
  void expect_inputs_intact() {
    for (const auto& [f, bytes] : before) EXPECT_EQ(slurp(d / f), bytes) << f;
    for (const std::string& name : d.names()) EXPECT_EQ(name.find(".tmp."), std::string::npos) << name;
  }
  void expect_refused(const ToolRun& r, const std::string& out_flag, const std::string& in_flag) {
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(": " + out_flag + ": "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("is the same file as " + in_flag + " '"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    expect_inputs_intact();
  }
  Dir d;
  std::map<std::string, std::string> before;
};

TEST_F(Tools, GenerateDumpLogitsNeverOverwritesTheModelOrTokenizer) {
  const std::string gen = KVEVICT_GENERATE_BIN;
  const std::string base = "--model tiny.bin --tokenizer tok.model --prompt-ids 1,2,3 --steps 2 --print-ids ";
  // Every spelling of the same file: as given, through "..", a symbolic link, a hard link.
  fs::create_symlink(d / "tiny.bin", d / "sub/model-link.bin");
  fs::create_hard_link(d / "tok.model", d / "sub/tok-hard.model");
  expect_refused(run_tool(d.path(), gen, base + "--dump-logits tiny.bin"), "--dump-logits", "--model");
  expect_refused(run_tool(d.path(), gen, base + "--dump-logits sub/../tiny.bin"), "--dump-logits", "--model");
  expect_refused(run_tool(d.path(), gen, base + "--dump-logits sub/model-link.bin"), "--dump-logits", "--model");
  expect_refused(run_tool(d.path(), gen, base + "--dump-logits ./tok.model"), "--dump-logits", "--tokenizer");
  expect_refused(run_tool(d.path(), gen, base + "--dump-logits sub/tok-hard.model"), "--dump-logits", "--tokenizer");
  // The model found in a folder, and the tokenizer found beside it, count as the inputs they are.
  expect_refused(run_tool(d.path(), gen, "--model " + d.path() + " --prompt-ids 1,2 --print-ids --dump-logits tiny.bin"),
                 "--dump-logits", "--model");
  expect_refused(run_tool(d.path(), gen, "--model tiny.bin --prompt-ids 1,2 --print-ids --dump-logits tok.model"),
                 "--dump-logits", "--tokenizer");
  // A good run writes the dump whole; a second run replaces it whole.
  const ToolRun ok = run_tool(d.path(), gen, "--model tiny.bin --prompt-ids 1,2,3 --steps 2 --print-ids --dump-logits t.json");
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(slurp(d / "t.json").rfind("{", 0), 0u);
  expect_inputs_intact();
}

TEST_F(Tools, QualityOutputsNeverOverwriteAnInputOrEachOther) {
#ifndef KVEVICT_QUALITY_BIN
  GTEST_SKIP() << "kvevict-quality is not built (-DKVEVICT_BUILD_BENCH=OFF)";
#else
  const std::string q = KVEVICT_QUALITY_BIN;
  const std::string base = "--model tiny.bin --tokenizer tok.model --windows 1 --window 64 --prompt 32 --ratios 0.5 ";
  const std::string docs = "--data docs --retrieval 1 ";
  // --prompts-out against every input: the model, the tokenizer, a document of --data DIR.
  expect_refused(run_tool(d.path(), q, base + docs + "--prompts-out tiny.bin"), "--prompts-out", "--model");
  expect_refused(run_tool(d.path(), q, base + docs + "--prompts-out sub/../tok.model"), "--prompts-out", "--tokenizer");
  expect_refused(run_tool(d.path(), q, base + docs + "--prompts-out docs/b.rst"), "--prompts-out", "--data");
  // --out PREFIX: each file it expands to, against --data FILE and the model.
  spit(d / "text.csv", "a text named like a CSV\n");
  before["text.csv"] = slurp(d / "text.csv");
  expect_refused(run_tool(d.path(), q, base + "--data text.csv --out text"), "--out (text.csv)", "--data");
  spit(d / "text_summary.csv", "another\n");
  before["text_summary.csv"] = slurp(d / "text_summary.csv");
  expect_refused(run_tool(d.path(), q, base + "--data text_summary.csv --out sub/../text"), "--out (sub/../text_summary.csv)",
                 "--data");
  fs::create_symlink(d / "tiny.bin", d / "m.gp");
  expect_refused(run_tool(d.path(), q, base + "--data text.txt --out m"), "--out (m.gp)", "--model");
  // Two outputs: --prompts-out is one of the --out files.
  const ToolRun two = run_tool(d.path(), q, base + docs + "--out r --prompts-out r_retrieval.csv");
  EXPECT_EQ(two.code, 2) << two.err;
  EXPECT_NE(two.err.find("--prompts-out: 'r_retrieval.csv' is the same file as --out (r_retrieval.csv) "
                         "'r_retrieval.csv'; give each output its own file"),
            std::string::npos)
      << two.err;
  expect_inputs_intact();
#endif
}

}  // namespace

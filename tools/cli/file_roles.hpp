// kvevict tools — cli/file_roles.hpp: the one rule for every tool's files: no output is an input or another output.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <vector>

namespace kvcli {

/// The files one run of a tool reads and writes, each under the flag that named it. A tool lists every
/// input (model, tokenizer, prompt file, data, trace) and every output (each file an output prefix
/// expands to, too) once its flags are parsed, then calls `check()` before it opens any file for writing
/// and before any work. Identity is `kvtools::file_identity`: device and inode for what exists, the
/// canonical path for what does not, so `./m.gguf`, `dir/../m.gguf`, a symbolic or a hard link to the
/// model all count as the model. Empty paths are ignored (a flag not given). O(files²) comparisons.
class FileRoles {
 public:
  /// Adds a file the run reads. `flag` is how the message names it ("--model", "--data").
  FileRoles& input(const std::string& flag, const std::string& path);
  /// Adds a file the run writes. `flag` is how the message names it ("--out (PREFIX.csv)").
  FileRoles& output(const std::string& flag, const std::string& path);
  /// Throws `UsageError(output's flag, "'<path>' is the same file as <other flag> '<other path>'; ...")`
  /// for the first output that is an input or an earlier output; the message names both flags.
  void check() const;

 private:
  struct Entry {
    std::string flag, path;
    bool output;
  };
  std::vector<Entry> files_;
};

}  // namespace kvcli

// kvevict tools — cli/file_roles.cpp: refusing an output that names an input or another output.
// SPDX-License-Identifier: Apache-2.0
#include "cli/file_roles.hpp"

#include "cli/kvevict_cli.hpp"
#include "file_output.hpp"

namespace kvcli {

FileRoles& FileRoles::input(const std::string& flag, const std::string& path) {
  if (!path.empty()) files_.push_back({flag, path, false});
  return *this;
}

FileRoles& FileRoles::output(const std::string& flag, const std::string& path) {
  if (!path.empty()) files_.push_back({flag, path, true});
  return *this;
}

void FileRoles::check() const {
  std::vector<kvtools::FileIdentity> ids;
  ids.reserve(files_.size());
  for (const Entry& e : files_) ids.push_back(kvtools::file_identity(e.path));
  // Inputs first in the message: an output that would overwrite the model is reported as that, whatever
  // order the flags were listed in.
  for (std::size_t i = 0; i < files_.size(); ++i) {
    if (!files_[i].output) continue;
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t j = 0; j < files_.size(); ++j) {
        const bool wanted = pass == 0 ? !files_[j].output : files_[j].output && j < i;
        if (!wanted) continue;
        if (ids[i] != ids[j]) continue;
        const std::string other = files_[j].flag + " '" + files_[j].path + "'";
        throw UsageError(files_[i].flag,
                         "'" + files_[i].path + "' is the same file as " + other +
                             (files_[j].output ? "; give each output its own file"
                                               : ", an input of this run: writing it would destroy it; choose "
                                                 "another " + files_[i].flag.substr(0, files_[i].flag.find(' '))));
      }
  }
}

}  // namespace kvcli

// kvevict tools — file_output.hpp: how every tool writes a file, so that no run can destroy one.
// SPDX-License-Identifier: Apache-2.0
//
// Two faults this header closes, for every tool at once:
//  - an output flag naming an input (kvevict-llama --kept-out M --model M truncated the model while it was
//    mapped): `file_identity` says whether two paths are one file (device and inode of what exists, the
//    canonical path of what does not), so a tool can refuse the pair before any file is opened
//    (cli/file_roles.hpp does it for the flags);
//  - a run that fails half-way leaving a truncated file where a good one was: `AtomicOutput` writes to a
//    temporary file in the destination's folder and renames it over the destination only on `commit()`.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace kvtools {

/// What makes two paths the same file. `exists`: `(dev, ino)` of the file the path names after every
/// symbolic link (so hard links, `..`, `./` and links to it all compare equal). Otherwise the path made
/// absolute and canonical as far as it exists (`std::filesystem::weakly_canonical`), which is what the
/// file will be called once created.
struct FileIdentity {
  bool exists = false;
  std::uint64_t dev = 0, ino = 0;
  std::string canonical;  ///< set when !exists
  bool operator==(const FileIdentity& o) const {
    return exists == o.exists && (exists ? dev == o.dev && ino == o.ino : canonical == o.canonical);
  }
  bool operator!=(const FileIdentity& o) const { return !(*this == o); }
};

/// The identity of `path` (see FileIdentity). Never opens the file; a path that cannot be stat'ed for
/// any reason but its absence is compared by its canonical spelling. O(path length) system calls.
inline FileIdentity file_identity(const std::string& path) {
  FileIdentity id;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    id.exists = true;
    id.dev = static_cast<std::uint64_t>(st.st_dev);
    id.ino = static_cast<std::uint64_t>(st.st_ino);
    return id;
  }
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(path, ec);
  const std::filesystem::path canon = ec ? abs : std::filesystem::weakly_canonical(abs, ec);
  id.canonical = (ec ? std::filesystem::path(path) : canon).lexically_normal().string();
  return id;
}

/// One output file written whole or not at all. The bytes go to `<dir>/.<name>.tmp.<pid>.<n>` beside the
/// destination (the same file system, so the rename is atomic); `commit()` flushes, closes and renames it
/// over the destination; the destructor of an uncommitted one removes the temporary file, leaving the
/// destination as it was. A replaced file keeps its permission bits. A destination that is a symbolic link is resolved first, so the link stays and
/// the file it names is replaced. A destination that exists and is not a regular file (a character
/// device such as /dev/null, a FIFO) is written in place, without a temporary file.
/// Errors: `std::runtime_error` "cannot write '<path>' (<reason>)" from the constructor (the folder is
/// missing or not writable, the destination is a directory) and from `commit()` (a write or rename error;
/// the temporary file is removed).
class AtomicOutput {
 public:
  explicit AtomicOutput(const std::string& path) : path_(path) {
    std::error_code ec;
    std::filesystem::path target = path;
    if (std::filesystem::is_symlink(target, ec)) target = std::filesystem::weakly_canonical(target, ec);
    if (ec) target = path;
    target_ = target.string();
    struct stat st {};
    if (::stat(target_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      if (S_ISDIR(st.st_mode)) throw std::runtime_error("cannot write '" + path_ + "' (it is a directory)");
      in_place_ = true;
      out_.open(target_, std::ios::binary | std::ios::trunc);
    } else {
      static unsigned counter = 0;
      const std::filesystem::path t(target_);
      tmp_ = (t.parent_path() / ("." + t.filename().string() + ".tmp." + std::to_string(::getpid()) + "." +
                                 std::to_string(counter++)))
                 .string();
      out_.open(tmp_, std::ios::binary | std::ios::trunc);
      // The file that replaces an existing one keeps its permission bits.
      if (out_ && ::stat(target_.c_str(), &st) == 0) ::chmod(tmp_.c_str(), st.st_mode & 07777);
    }
    if (!out_) {
      const std::string why = std::strerror(errno);
      discard();
      throw std::runtime_error("cannot write '" + path_ + "' (" + why + ")");
    }
  }
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;
  ~AtomicOutput() { discard(); }

  /// The stream to write the file's bytes to (until `commit()`).
  std::ostream& stream() { return out_; }
  /// The path the file is written to on `commit()` (as given).
  const std::string& path() const { return path_; }

  /// Makes the written bytes the destination's contents. Throws `std::runtime_error` naming the file
  /// on a write, close or rename error (then the destination is unchanged). Once only.
  void commit() {
    if (committed_) throw std::logic_error("AtomicOutput::commit: '" + path_ + "' is already committed");
    out_.flush();
    const bool ok = static_cast<bool>(out_);
    out_.close();
    if (!ok || out_.fail()) {
      discard();
      throw std::runtime_error("cannot write '" + path_ + "' (write error)");
    }
    if (!in_place_ && std::rename(tmp_.c_str(), target_.c_str()) != 0) {
      const std::string why = std::strerror(errno);
      discard();
      throw std::runtime_error("cannot write '" + path_ + "' (rename: " + why + ")");
    }
    committed_ = true;
  }

 private:
  void discard() noexcept {
    if (committed_) return;
    if (out_.is_open()) out_.close();
    if (!in_place_ && !tmp_.empty()) std::remove(tmp_.c_str());
    tmp_.clear();
  }

  std::string path_, target_, tmp_;
  std::ofstream out_;
  bool in_place_ = false, committed_ = false;
};

/// Writes `contents` to `path` whole or not at all (AtomicOutput). Throws `std::runtime_error` naming the
/// file on failure, leaving what was at `path` unchanged. O(contents).
inline void write_file_atomically(const std::string& path, const std::string& contents) {
  AtomicOutput out(path);
  out.stream().write(contents.data(), static_cast<std::streamsize>(contents.size()));
  out.commit();
}

}  // namespace kvtools

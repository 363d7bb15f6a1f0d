// kvevict tools — file_input.hpp: the one check every tool makes before it reads a file a user named.
// SPDX-License-Identifier: Apache-2.0
//
// A FIFO, a device (/dev/zero) or a directory given where a file is expected was opened and read until
// memory ran out (or, for a FIFO, blocked in open). `check_regular_file` refuses anything but a regular
// file, without opening it (stat does not block), and `read_regular_file` also caps what it reads.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

namespace kvtools {

/// The most bytes `read_regular_file` reads by default (1 GiB: far above any text a tool here reads).
inline constexpr std::uint64_t kMaxReadBytes = std::uint64_t{1} << 30;

/// "" if `path` names a regular file (symbolic links followed); else why it cannot be read as one:
/// "cannot read (<errno text>)" if it cannot be stat'ed, "is not a regular file (it is a directory | a
/// FIFO | a character device | a block device | a socket)" otherwise. Never opens the file. O(1).
inline std::string file_problem(const std::string& path, std::uint64_t* size = nullptr) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::string("cannot read (") + std::strerror(errno) + ")";
  if (S_ISREG(st.st_mode)) {
    if (size) *size = static_cast<std::uint64_t>(st.st_size);
    return "";
  }
  const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "not a file";
  return std::string("is not a regular file (it is ") + kind + ")";
}

/// Checks that `path` names a regular file and returns its size in bytes. Throws
/// `std::invalid_argument` "'<path>' <file_problem>" otherwise (e.g. "'/dev/zero' is not a regular
/// file (it is a character device)", "'x': cannot read (No such file or directory)"). O(1).
inline std::uint64_t check_regular_file(const std::string& path) {
  std::uint64_t size = 0;
  const std::string problem = file_problem(path, &size);
  if (!problem.empty())
    throw std::invalid_argument("'" + path + "'" + (problem.rfind("cannot", 0) == 0 ? ": " : " ") + problem);
  return size;
}

/// The bytes of the regular file `path`, at most `max_bytes` of them. Throws `std::invalid_argument` as
/// `check_regular_file`, "'<path>' has N bytes, more than the M this tool reads" for a larger file,
/// and "'<path>': cannot read (...)" if it cannot be opened or read. Reads no more than the size it
/// found (a file that grows meanwhile is cut there). O(size).
inline std::string read_regular_file(const std::string& path, std::uint64_t max_bytes = kMaxReadBytes) {
  const std::uint64_t size = check_regular_file(path);
  if (size > max_bytes)
    throw std::invalid_argument("'" + path + "' has " + std::to_string(size) + " bytes, more than the " +
                                std::to_string(max_bytes) + " this tool reads");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("'" + path + "': cannot read (" + std::strerror(errno) + ")");
  std::string bytes(static_cast<std::size_t>(size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  bytes.resize(static_cast<std::size_t>(in.gcount()));  // a file that shrank meanwhile
  if (in.bad()) throw std::invalid_argument("'" + path + "': cannot read (I/O error)");
  return bytes;
}

}  // namespace kvtools

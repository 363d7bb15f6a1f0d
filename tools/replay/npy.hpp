// kvevict tools — replay/npy.hpp: a small, strict reader and writer of NumPy .npy float32 arrays.
// SPDX-License-Identifier: Apache-2.0
//
// Format (numpy.lib.format, versions 1.0, 2.0 and 3.0):
//   "\x93NUMPY" major minor  header_len (uint16 LE for 1.0, uint32 LE for 2.0/3.0)
//   header: a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (a, b, c), }
//           padded with spaces and ending in '\n'
//   data:   prod(shape) little-endian float32 values in C (row-major) order, nothing after them.
// Anything else — another dtype, Fortran order, a malformed header, a short or long data part — is
// rejected with an `InputError` naming the file and the problem; nothing is guessed.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "input_error.hpp"  // InputError, thrown by the reader and the writer

namespace replay {

struct NpyArray {
  std::vector<std::size_t> shape;
  std::vector<float> data;  ///< prod(shape) values, C order
};

/// Reads a float32 '<f4' C-order .npy file. `field` names the file in error messages (e.g. "--logits").
/// Throws `InputError` on any deviation from the format above, an unreadable file, or one that is not
/// a regular file ("--logits '/dev/zero': is not a regular file (it is a character device)").
NpyArray read_npy_f32(const std::string& path, const std::string& field);

/// Parses the header dict of a .npy file (exposed for tests): sets `shape` and checks
/// descr == '<f4' and fortran_order == False. Throws `InputError` with `field`.
std::vector<std::size_t> parse_npy_header(const std::string& header, const std::string& field);

/// Writes `data` (C order, prod(shape) values) as a version 1.0 '<f4' .npy file.
/// Throws `InputError` (field = path) if the file cannot be written or the sizes disagree.
void write_npy_f32(const std::string& path, const std::vector<std::size_t>& shape, const float* data);

}  // namespace replay

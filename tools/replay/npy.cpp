// kvevict tools — replay/npy.cpp: strict .npy float32 reader and writer.
// SPDX-License-Identifier: Apache-2.0
#include "npy.hpp"

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "file_input.hpp"
#include "file_output.hpp"
#include "input_error.hpp"

namespace replay {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6;

bool little_endian_host() {
  const std::uint32_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

void byteswap_floats(std::vector<float>& v) {
  for (float& x : v) {
    unsigned char b[4];
    std::memcpy(b, &x, 4);
    std::swap(b[0], b[3]);
    std::swap(b[1], b[2]);
    std::memcpy(&x, b, 4);
  }
}

/// Recursive-descent parser of the header's Python dict literal.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& field) : s_(text), field_(field) {}

  std::vector<std::size_t> parse() {
    bool have_descr = false, have_order = false, have_shape = false;
    std::vector<std::size_t> shape;
    skip_ws();
    expect('{');
    for (;;) {
      skip_ws();
      if (peek() == '}') break;
      const std::string key = string_literal();
      skip_ws();
      expect(':');
      skip_ws();
      if (key == "descr") {
        duplicate(have_descr, key);
        const std::string descr = string_literal();
        if (descr != "<f4")
          fail("dtype '" + descr + "' is not little-endian float32 '<f4' (save x.astype(numpy.float32))");
      } else if (key == "fortran_order") {
        duplicate(have_order, key);
        const std::string value = identifier();
        if (value == "True") fail("Fortran order is not supported (save numpy.ascontiguousarray(x))");
        if (value != "False") fail("header: fortran_order must be True or False, got '" + value + "'");
      } else if (key == "shape") {
        duplicate(have_shape, key);
        shape = tuple();
      } else {
        fail("header: unexpected key '" + key + "' (expected descr, fortran_order, shape)");
      }
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != '}') fail("header: expected ',' or '}' at offset " + std::to_string(i_));
    }
    ++i_;  // '}'
    while (i_ < s_.size() && s_[i_] == ' ') ++i_;
    if (i_ + 1 != s_.size() || s_[i_] != '\n') fail("header: must end with the dict, padding spaces and '\\n'");
    if (!have_descr) fail("header: missing 'descr'");
    if (!have_order) fail("header: missing 'fortran_order'");
    if (!have_shape) fail("header: missing 'shape'");
    return shape;
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const { throw InputError(field_, problem); }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n')) ++i_;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("header: expected '") + c + "' at offset " + std::to_string(i_));
    ++i_;
  }
  void duplicate(bool& seen, const std::string& key) const {
    if (seen) fail("header: duplicate key '" + key + "'");
    seen = true;
  }
  std::string string_literal() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail("header: expected a quoted string at offset " + std::to_string(i_));
    const std::size_t end = s_.find(quote, i_ + 1);
    if (end == std::string::npos) fail("header: unterminated string");
    std::string out = s_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    return out;
  }
  std::string identifier() {
    const std::size_t start = i_;
    while (i_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[i_]))) ++i_;
    return s_.substr(start, i_ - start);
  }
  std::vector<std::size_t> tuple() {
    std::vector<std::size_t> dims;
    expect('(');
    for (;;) {
      skip_ws();
      if (peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(peek())))
        fail("header: shape must be a tuple of non-negative integers");
      std::size_t d = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        const std::size_t digit = static_cast<std::size_t>(s_[i_++] - '0');
        if (d > (std::numeric_limits<std::size_t>::max() - digit) / 10) fail("header: shape dimension too large");
        d = d * 10 + digit;
      }
      dims.push_back(d);
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != ')') fail("header: expected ',' or ')' in shape at offset " + std::to_string(i_));
    }
    ++i_;  // ')'
    return dims;
  }

  const std::string& s_;
  const std::string& field_;
  std::size_t i_ = 0;
};

}  // namespace

std::vector<std::size_t> parse_npy_header(const std::string& header, const std::string& field) {
  return HeaderParser(header, field).parse();
}

NpyArray read_npy_f32(const std::string& path, const std::string& field) {
  const std::string where = field + " '" + path + "'";
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(where, "is a directory");
  if (const std::string problem = kvtools::file_problem(path); problem.rfind("is not", 0) == 0)
    throw InputError(where, problem);  // a FIFO or a device: read without end
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(where, std::string("cannot open (") + std::strerror(errno) + ")");
  in.seekg(0, std::ios::end);
  const std::streamoff file_size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (file_size < 0) throw InputError(where, "cannot read");

  unsigned char pre[kMagicLen + 2] = {};
  if (!in.read(reinterpret_cast<char*>(pre), sizeof pre) || std::memcmp(pre, kMagic, kMagicLen) != 0)
    throw InputError(where, "not a .npy file (missing the \\x93NUMPY magic)");
  const unsigned major = pre[kMagicLen], minor = pre[kMagicLen + 1];
  if (major < 1 || major > 3 || minor != 0)
    throw InputError(where, "unsupported .npy version " + std::to_string(major) + "." + std::to_string(minor));
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  unsigned char len_le[4] = {};
  if (!in.read(reinterpret_cast<char*>(len_le), static_cast<std::streamsize>(len_bytes)))
    throw InputError(where, "truncated header");
  std::size_t header_len = 0;
  for (std::size_t b = len_bytes; b-- > 0;) header_len = header_len * 256 + len_le[b];
  const std::size_t data_offset = kMagicLen + 2 + len_bytes + header_len;
  if (data_offset > static_cast<std::size_t>(file_size)) throw InputError(where, "truncated header");
  std::string header(header_len, '\0');
  if (!in.read(&header[0], static_cast<std::streamsize>(header_len))) throw InputError(where, "truncated header");

  NpyArray array;
  array.shape = parse_npy_header(header, where);
  std::size_t count = 1;
  for (std::size_t d : array.shape) {
    if (d != 0 && count > std::numeric_limits<std::size_t>::max() / 4 / d) throw InputError(where, "shape too large");
    count *= d;
  }
  const std::size_t data_bytes = static_cast<std::size_t>(file_size) - data_offset;
  if (data_bytes != count * 4)
    throw InputError(where, "data part has " + std::to_string(data_bytes) + " bytes, the shape needs " +
                                std::to_string(count * 4) + (data_bytes < count * 4 ? " (truncated file)" : ""));
  array.data.resize(count);
  if (count > 0 && !in.read(reinterpret_cast<char*>(array.data.data()), static_cast<std::streamsize>(count * 4)))
    throw InputError(where, "read error in the data part");
  if (!little_endian_host()) byteswap_floats(array.data);
  return array;
}

void write_npy_f32(const std::string& path, const std::vector<std::size_t>& shape, const float* data) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  std::size_t count = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    dict += (i > 0 ? ", " : "") + std::to_string(shape[i]);
    count *= shape[i];
  }
  dict += shape.size() == 1 ? ",), }" : "), }";  // as numpy writes it: (a,) (a, b) (a, b, c)
  // Pad so that magic + version + length + header is a multiple of 64, ending with '\n'.
  const std::size_t unpadded = kMagicLen + 2 + 2 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  if (dict.size() > 65535) throw InputError(path, "shape has too many dimensions for a version 1.0 header");

  // Whole or not at all: a failed run leaves what was at `path` as it was (kvtools::AtomicOutput).
  try {
    kvtools::AtomicOutput file(path);
    std::ostream& out = file.stream();
    out.write(kMagic, kMagicLen);
    const unsigned char version_and_len[4] = {1, 0, static_cast<unsigned char>(dict.size() & 0xff),
                                              static_cast<unsigned char>(dict.size() >> 8)};
    out.write(reinterpret_cast<const char*>(version_and_len), 4);
    out.write(dict.data(), static_cast<std::streamsize>(dict.size()));
    if (little_endian_host()) {
      out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * 4));
    } else {
      std::vector<float> swapped(data, data + count);
      byteswap_floats(swapped);
      out.write(reinterpret_cast<const char*>(swapped.data()), static_cast<std::streamsize>(count * 4));
    }
    file.commit();
  } catch (const std::runtime_error& e) {
    throw InputError(path, e.what());
  }
}

}  // namespace replay

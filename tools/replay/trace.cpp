// kvevict tools — replay/trace.cpp: validating, reading and writing logit traces.
// SPDX-License-Identifier: Apache-2.0
#include "trace.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "npy.hpp"
#include "file_input.hpp"

namespace replay {
namespace {

using nlohmann::json;

std::string at(const char* name, std::size_t h, std::size_t t, std::size_t j) {
  return std::string(name) + "[" + std::to_string(h) + "][" + std::to_string(t) + "][" + std::to_string(j) + "]";
}

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

/// Appends the shortest decimal form of `x` that reads back as the same float.
// Shortest text that reads back as the same float bits. `to_chars(-0.0f)` gives "-0", which JSON
// readers (nlohmann included) parse as the integer 0, losing the sign: negative zero is written "-0.0".
void append_float(std::string& out, float x) {
  if (x == 0.0f && std::signbit(x)) {
    out += "-0.0";
    return;
  }
  char buf[32];
  const auto res = std::to_chars(buf, buf + sizeof buf, x);
  out.append(buf, res.ptr);
}

/// SAX handler that builds the DOM (nlohmann's own DOM builder) and tracks the path of the value
/// being parsed, so that a number beyond the range of double ("1e400", which nlohmann reports as
/// out_of_range.406 without saying where) becomes an `InputError` naming the field, e.g.
/// "logits[0][2][1]", and a key given twice in one object becomes an `InputError` naming it. Every
/// other syntax error is rethrown as nlohmann's parse_error.
class PathTrackingSax {
 public:
  explicit PathTrackingSax(json& root) : dom_(root, true) {}

  bool null() { return scalar(dom_.null()); }
  bool boolean(bool b) { return scalar(dom_.boolean(b)); }
  bool number_integer(json::number_integer_t x) { return scalar(dom_.number_integer(x)); }
  bool number_unsigned(json::number_unsigned_t x) { return scalar(dom_.number_unsigned(x)); }
  bool number_float(json::number_float_t x, const json::string_t& s) { return scalar(dom_.number_float(x, s)); }
  bool string(json::string_t& s) { return scalar(dom_.string(s)); }
  bool binary(json::binary_t& b) { return scalar(dom_.binary(b)); }
  bool start_object(std::size_t n) {
    frames_.push_back({false, 0, {}, {}});
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    Frame& f = frames_.back();
    f.key = k;
    // nlohmann keeps the last of duplicate keys; a trace with two values for one field is ambiguous.
    if (!f.keys.insert(k).second) throw InputError(path(), "duplicate key '" + k + "' (each key may appear once)");
    return dom_.key(k);
  }
  bool end_object() {
    frames_.pop_back();
    return scalar(dom_.end_object());
  }
  bool start_array(std::size_t n) {
    frames_.push_back({true, 0, {}, {}});
    return dom_.start_array(n);
  }
  bool end_array() {
    frames_.pop_back();
    return scalar(dom_.end_array());
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& token, const Exception& ex) {
    if (ex.id == 406)  // out_of_range.406: number overflow (the token is a valid JSON number)
      throw InputError(path(), "the number " + token + " is out of range (a float holds at most 3.4028235e+38)");
    return dom_.parse_error(position, token, ex);
  }

 private:
  struct Frame {
    bool array;
    std::size_t index;
    std::string key;
    std::set<std::string> keys;  // an object's keys so far
  };
  bool scalar(bool ok) {  // a value is complete: the enclosing array moves to its next element
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    return ok;
  }
  std::string path() const {
    std::string p;
    for (std::size_t i = 0; i < frames_.size(); ++i) {
      if (frames_[i].array)
        p += "[" + std::to_string(frames_[i].index) + "]";
      else
        p += (i == 0 ? "" : ".") + frames_[i].key;
    }
    return p.empty() ? "trace" : p;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::vector<Frame> frames_;
};

/// `a * b`, or an `InputError` for `field` if it does not fit in size_t.
std::size_t checked_mul(std::size_t a, std::size_t b, const std::string& field) {
  std::size_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    throw InputError(field, "shape " + std::to_string(a) + " x " + std::to_string(b) + " overflows size_t");
  return r;
}

/// A positive-or-zero integer field of the JSON root.
std::size_t read_count(const json& value, const char* field) {
  if (!value.is_number_integer())
    throw InputError(field, std::string("must be an integer, got ") +
                                (value.is_number() || value.is_null() || value.is_boolean()
                                     ? value.dump()  // short; an array or object may be huge or deep
                                     : std::string(value.is_string() ? "a " : "an ") + value.type_name()));
  if (value.is_number_unsigned()) return value.get<std::size_t>();
  const auto v = value.get<std::int64_t>();
  if (v < 0) throw InputError(field, "must be >= 1 (got " + std::to_string(v) + ")");
  return static_cast<std::size_t>(v);
}

/// Reads a `[H][N][N]` array of numbers into `out`. `H` and `N` are taken from the array if 0 on
/// entry, else required. `null` is allowed only above the diagonal (stored as NaN). Every number
/// must fit in a float (|x| <= FLT_MAX), wherever it is. The whole shape is checked against the
/// document (every head N rows, every row N entries) before `out` is allocated, so the allocation
/// is bounded by what the file really holds, and `H * N * N` is computed with overflow checks.
void read_cube(const json& value, const char* field, std::size_t& H, std::size_t& N, std::vector<float>& out) {
  if (!value.is_array())
    throw InputError(field, "must be an array [H_q][N][N], got a " + std::string(value.type_name()));
  if (value.empty()) throw InputError(field, "has no query heads (H_q = 0)");
  std::size_t heads = H, n = N;
  if (heads == 0) {
    heads = value.size();
    if (!value[0].is_array() || value[0].empty())
      throw InputError(std::string(field) + "[0]", "must be a non-empty array of N rows");
    n = value[0].size();
  } else if (value.size() != heads) {
    throw InputError(field, "has " + std::to_string(value.size()) + " query heads, logits has " + std::to_string(heads));
  }
  // Shape pass: no allocation proportional to the claimed sizes.
  for (std::size_t h = 0; h < heads; ++h) {
    const json& head = value[h];
    const std::string head_name = std::string(field) + "[" + std::to_string(h) + "]";
    if (!head.is_array() || head.size() != n)
      throw InputError(head_name, "expected an array of N = " + std::to_string(n) + " rows, got " +
                                      (head.is_array() ? std::to_string(head.size()) + " rows" : head.type_name()));
    for (std::size_t t = 0; t < n; ++t) {
      const json& row = head[t];
      if (!row.is_array() || row.size() != n)
        throw InputError(head_name + "[" + std::to_string(t) + "]",
                         "expected an array of N = " + std::to_string(n) + " entries, got " +
                             (row.is_array() ? std::to_string(row.size()) + " entries" : row.type_name()));
    }
  }
  const std::size_t total = checked_mul(checked_mul(heads, n, field), n, field);
  std::vector<float> cube(total, std::numeric_limits<float>::quiet_NaN());
  constexpr double kFloatMax = static_cast<double>(std::numeric_limits<float>::max());
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t t = 0; t < n; ++t) {
      const json& row = value[h][t];
      float* dst = cube.data() + (h * n + t) * n;
      for (std::size_t j = 0; j < n; ++j) {
        const json& x = row[j];
        if (x.is_number()) {
          const double d = x.get<double>();
          if (!(std::fabs(d) <= kFloatMax))  // beyond float range: converting would be undefined
            throw InputError(at(field, h, t, j), "the number " + x.dump() + " is out of range (a float holds at most 3.4028235e+38)");
          dst[j] = static_cast<float>(d);
        } else if (x.is_null()) {
          if (j <= t)
            throw InputError(at(field, h, t, j), "null inside the causal part (only entries j > t may be null)");
        } else {
          throw InputError(at(field, h, t, j), std::string("expected a number, got a ") + x.type_name());
        }
      }
    }
  H = heads;
  N = n;
  out = std::move(cube);
}

void append_cube_json(std::string& out, const Trace& trace, const std::vector<float>& cube, const char* name) {
  const std::size_t H = trace.n_q_heads, N = trace.n_tokens;
  out += '[';
  for (std::size_t h = 0; h < H; ++h) {
    out += h ? ",\n [" : "\n [";
    for (std::size_t t = 0; t < N; ++t) {
      out += t ? ",\n  [" : "\n  [";
      for (std::size_t j = 0; j < N; ++j) {
        if (j) out += ',';
        if (j > t) {
          out += "null";
          continue;
        }
        const float x = cube[trace.index(h, t, j)];
        if (!std::isfinite(x))
          throw InputError(at(name, h, t, j), "is not finite; JSON cannot hold it (write .npy instead)");
        append_float(out, x);
      }
      out += ']';
    }
    out += ']';
  }
  out += ']';
}

}  // namespace

std::size_t Trace::P() const {
  if (!prompt_len) throw InputError("prompt_len", "missing (give it in the JSON trace or with --prompt-len)");
  return *prompt_len;
}

void validate(const Trace& trace) {
  const std::size_t H = trace.n_q_heads, N = trace.n_tokens;
  if (H == 0) throw InputError("logits", "has no query heads (H_q = 0)");
  if (N == 0) throw InputError("logits", "has no tokens (N = 0)");
  const std::size_t total = checked_mul(checked_mul(H, N, "logits"), N, "logits");
  if (trace.logits.size() != total)
    throw InputError("logits", "holds " + std::to_string(trace.logits.size()) +
                                   " values, expected H_q * N * N = " + std::to_string(total));
  if (trace.has_gumbel() && trace.gumbel.size() != trace.logits.size())
    throw InputError("gumbel", "holds " + std::to_string(trace.gumbel.size()) + " values, logits " +
                                   std::to_string(trace.logits.size()));
  const std::size_t P = trace.P();
  if (P < 1) throw InputError("prompt_len", "must be >= 1 (got 0)");
  if (P > N)
    throw InputError("prompt_len",
                     "P = " + std::to_string(P) + " exceeds the trace's N = " + std::to_string(N) + " tokens");
  const std::size_t g = trace.g();
  if (g < 1) throw InputError("q_heads_per_kv", "must be >= 1 (got 0)");
  if (H % g != 0)
    throw InputError("q_heads_per_kv",
                     "H_q = " + std::to_string(H) + " query heads are not divisible by g = " + std::to_string(g));
  for (std::size_t h = 0; h < H; ++h)
    for (std::size_t t = 0; t < N; ++t) {
      const float* x = trace.logits.data() + trace.index(h, t, 0);
      for (std::size_t j = 0; j <= t; ++j) {
        if (std::isnan(x[j])) throw InputError(at("logits", h, t, j), "is NaN (only entries j > t are ignored)");
        if (x[j] == std::numeric_limits<float>::infinity())
          throw InputError(at("logits", h, t, j),
                           "is +inf or beyond float range (-inf masks an entry; +inf is invalid)");
      }
      if (!trace.has_gumbel()) continue;
      const float* z = trace.gumbel.data() + trace.index(h, t, 0);
      for (std::size_t j = 0; j <= t; ++j)
        if (!std::isfinite(z[j]))
          throw InputError(at("gumbel", h, t, j), "must be finite (only entries j > t are ignored)");
    }
}

Trace read_trace_json(std::istream& in, const std::string& name) {
  const std::string where = "trace '" + name + "'";
  json doc;
  try {
    PathTrackingSax sax(doc);
    json::sax_parse(in, &sax);
  } catch (const json::parse_error& e) {
    throw InputError(where, std::string("invalid JSON (") + e.what() +
                                "); JSON has no NaN or Infinity: write null for ignored entries, or use .npy");
  } catch (const json::exception& e) {  // any other nlohmann error is still bad input
    throw InputError(where, std::string("invalid JSON (") + e.what() + ")");
  }
  if (!doc.is_object()) throw InputError(where, "the top level must be a JSON object");
  Trace trace;
  for (const auto& item : doc.items()) {
    const std::string& key = item.key();
    if (key != "prompt_len" && key != "q_heads_per_kv" && key != "logits" && key != "gumbel" && key != "meta")
      throw InputError(key, "unknown field (expected prompt_len, q_heads_per_kv, logits, gumbel, meta)");
  }
  if (doc.contains("prompt_len")) trace.prompt_len = read_count(doc["prompt_len"], "prompt_len");
  if (doc.contains("q_heads_per_kv")) trace.q_heads_per_kv = read_count(doc["q_heads_per_kv"], "q_heads_per_kv");
  if (!doc.contains("logits")) throw InputError("logits", "missing");
  read_cube(doc["logits"], "logits", trace.n_q_heads, trace.n_tokens, trace.logits);
  if (doc.contains("gumbel")) read_cube(doc["gumbel"], "gumbel", trace.n_q_heads, trace.n_tokens, trace.gumbel);
  return trace;
}

Trace load_trace_json(const std::string& path) {
  if (path == "-") return read_trace_json(std::cin, "-");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError("trace '" + path + "'", "is a directory");
  // A FIFO or a device (/dev/zero) would be read without end: only regular files (and "-", stdin).
  if (const std::string problem = kvtools::file_problem(path); problem.rfind("is not", 0) == 0)
    throw InputError("trace '" + path + "'", problem);
  std::ifstream in(path);
  if (!in) throw InputError("trace '" + path + "'", std::string("cannot open (") + std::strerror(errno) + ")");
  return read_trace_json(in, path);
}

Trace load_trace_npy(const std::string& logits_path, const std::string& gumbel_path) {
  NpyArray logits = read_npy_f32(logits_path, "--logits");
  const auto& s = logits.shape;
  if (s.size() != 3 || s[0] == 0 || s[1] == 0 || s[1] != s[2])
    throw InputError("--logits '" + logits_path + "'",
                     "shape " + shape_text(s) + " is not [H_q, N, N] with H_q >= 1 and N >= 1");
  Trace trace;
  trace.n_q_heads = s[0];
  trace.n_tokens = s[1];
  trace.logits = std::move(logits.data);
  if (!gumbel_path.empty()) {
    NpyArray gumbel = read_npy_f32(gumbel_path, "--gumbel");
    if (gumbel.shape != s)
      throw InputError("--gumbel '" + gumbel_path + "'",
                       "shape " + shape_text(gumbel.shape) + " differs from the logits' " + shape_text(s));
    trace.gumbel = std::move(gumbel.data);
  }
  return trace;
}

void write_trace_json(std::ostream& out, const Trace& trace, const json* meta) {
  std::string text =
      "{\"prompt_len\": " + std::to_string(trace.P()) + ", \"q_heads_per_kv\": " + std::to_string(trace.g());
  if (meta != nullptr) text += ", \"meta\": " + meta->dump();
  text += ",\n\"logits\": ";
  append_cube_json(text, trace, trace.logits, "logits");
  if (trace.has_gumbel()) {
    text += ",\n\"gumbel\": ";
    append_cube_json(text, trace, trace.gumbel, "gumbel");
  }
  text += "}\n";
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

void save_trace_npy(const Trace& trace, const std::string& logits_path, const std::string& gumbel_path) {
  const std::size_t H = trace.n_q_heads, N = trace.n_tokens;
  const std::vector<std::size_t> shape{H, N, N};
  std::vector<float> causal(H * N * N, 0.0f);  // entries j > t written as 0
  auto write = [&](const std::vector<float>& cube, const std::string& path) {
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t t = 0; t < N; ++t)
        std::copy_n(cube.data() + trace.index(h, t, 0), t + 1, causal.data() + trace.index(h, t, 0));
    write_npy_f32(path, shape, causal.data());
  };
  write(trace.logits, logits_path);
  if (trace.has_gumbel() && !gumbel_path.empty()) write(trace.gumbel, gumbel_path);
}

}  // namespace replay

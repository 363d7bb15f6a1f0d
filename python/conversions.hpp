// python/conversions.hpp — Python values and NumPy arrays to checked C++ values, for every binding.
// SPDX-License-Identifier: Apache-2.0
//
// Each converter names the argument in its message: TypeError for a value of the wrong kind,
// ValueError for a bad value (dtype, shape, contiguity, range), OverflowError for an int that
// does not fit. Arrays are checked before any C++ call, so a refused argument changes nothing.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <kvevict/kvevict.hpp>
#include <string>
#include <vector>

#include "cli/amount.hpp"

namespace kvpy {

namespace py = pybind11;

/// Element types of K/V storage the bindings support (numpy float16 is IEEE binary16, the
/// bit layout of `Eigen::half`).
enum class DType { float32, float16 };

/// "float32" or "float16".
const char* dtype_name(DType d);

/// The Python type name of `o` ("int", "NoneType").
std::string type_name(py::handle o);
/// `repr(o)`.
std::string text(py::handle o);
/// `[a, b, c]`.
std::string dims(const std::vector<py::ssize_t>& shape);
/// The shape of `a` as `[a, b, c]`.
std::string array_shape(const py::array& a);

/// A Python int (or anything with `__index__`, e.g. numpy.int64; not bool, not float) in
/// [0, 2^64): TypeError (not an int), ValueError (negative), OverflowError (too large).
std::uint64_t to_u64(py::handle o, const std::string& name);
/// `to_u64` as `std::size_t`.
std::size_t to_size(py::handle o, const std::string& name);
/// A Python int in int64: TypeError (not an int), OverflowError (out of range).
std::int64_t to_i64(py::handle o, const std::string& name);
/// A Python float or int (not bool) as double; TypeError otherwise.
double to_double(py::handle o, const std::string& name);
/// True or False exactly; TypeError otherwise (1 is not a bool here).
bool to_bool(py::handle o, const std::string& name);
/// A str; TypeError naming the argument otherwise.
std::string to_text(py::handle o, const std::string& name);
/// `head_budgets`: 'uniform', 'adaptive' (AdaKV, floor 0.2) or 'adaptive:ALPHA' (floor ALPHA in [0, 1]),
/// parsed by the tools' --head-budgets grammar (kvcli::parse_head_budgets). ValueError "head_budgets: <the
/// grammar's problem>" otherwise; TypeError for a non-str.
kvevict::HeadBudgets to_head_budgets(py::handle o);

/// An amount given as tokens (int), a fraction (float) or a string in the tools' grammar ("64", "0.5",
/// "50%"; cli/amount.hpp), with the tools' range checks: ValueError "<name>: <problem>" otherwise.
kvcli::Amount to_amount(py::handle o, const std::string& name, kvcli::AmountKind kind);
/// `budget`: k tokens, or k = floor(r * P). The library's message is kept, prefixed with the argument.
kvevict::Budget to_budget(py::handle o);
/// `recent`: w tokens, or w = floor(q * k).
kvevict::RecentWindow to_recent(py::handle o);
/// A dtype argument ('float32', numpy.float16, ...): native-endian float32 or float16, else ValueError.
DType to_dtype(py::handle o);

/// Element kinds an array argument may need.
enum class Elem { float32, float16, int64 };

/// The array element kind of a K/V dtype.
inline Elem elem_of(DType d) { return d == DType::float32 ? Elem::float32 : Elem::float16; }
/// "float32", "float16" or "int64".
const char* elem_name(Elem e);
/// The dtype of `a` for a message: its name ("float32"), with its byte order when that is not
/// native ("float32 (non-native byte order '>f4'; ...)"), so that a big-endian array is not
/// described as the float32 it was refused for.
std::string dtype_text(const py::array& a);
/// Whether `a` holds native-endian elements of kind `e`.
bool has_elem(const py::array& a, Elem e);
/// `obj` as an array without a check (numpy.asarray for array-likes); TypeError naming `name`
/// and `expected` if it is None, a str or not array-like.
py::array as_array(py::handle obj, const std::string& name, const std::string& expected);

/// `obj` as a NumPy array (no copy for arrays and objects exposing `__array__` over their
/// memory, e.g. CPU torch tensors), checked to be a native-endian, C-contiguous array of
/// element `e` and exactly `shape`; `writeable` also requires write access. Otherwise raises
/// ValueError (TypeError if `obj` is not array-like) naming `name`, the expected shape (`what`,
/// e.g. "[n_q_heads, n]") with its value, and what was given.
py::array checked_array(py::handle obj, const std::string& name, Elem e, const std::vector<py::ssize_t>& shape,
                        const std::string& what, bool writeable = false);

/// ValueError "k and v must be different arrays" / "k and v overlap in memory ..." when the two
/// caller arrays share an element (every V write would clobber K).
void require_disjoint(const py::array& k, const py::array& v);

/// A new 1-D NumPy array holding a copy of `values` (built after the lock that guarded them: locking.hpp).
template <class T>
py::array_t<T> to_numpy(const std::vector<T>& values) {
  py::array_t<T> out(static_cast<py::ssize_t>(values.size()));
  std::copy(values.begin(), values.end(), out.mutable_data());
  return out;
}

/// A new list of Python ints, one per element of `values`.
template <class T>
py::list to_list(const std::vector<T>& values) {
  py::list out;
  for (const T& v : values) out.append(v);
  return out;
}

/// Runs an accessor of the library, turning its "KV head out of range" (std::invalid_argument)
/// into IndexError.
template <class F>
auto guarded(F f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    throw py::index_error(e.what());
  }
}

}  // namespace kvpy

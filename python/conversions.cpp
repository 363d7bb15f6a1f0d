// python/conversions.cpp — the checked conversions of conversions.hpp (ints, amounts, dtypes, arrays).
// SPDX-License-Identifier: Apache-2.0
#include "conversions.hpp"

#include <cstdint>
#include <sstream>
#include <stdexcept>

namespace kvpy {

using kvcli::Amount;
using kvcli::AmountKind;

const char* dtype_name(DType d) { return d == DType::float32 ? "float32" : "float16"; }

std::string type_name(py::handle o) { return py::type::handle_of(o).attr("__name__").cast<std::string>(); }

std::string text(py::handle o) { return py::repr(o).cast<std::string>(); }

std::string dims(const std::vector<py::ssize_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

std::string array_shape(const py::array& a) { return dims(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim())); }

namespace {

/// `o` as a Python int (not bool); TypeError otherwise.
py::int_ to_int(py::handle o, const std::string& name) {
  if (PyBool_Check(o.ptr()) || !PyIndex_Check(o.ptr()))
    throw py::type_error(name + " must be an int, got " + type_name(o) + " " + text(o));
  PyObject* v = PyNumber_Index(o.ptr());
  if (v == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::int_>(v);
}

}  // namespace

std::uint64_t to_u64(py::handle o, const std::string& name) {
  const py::int_ v = to_int(o, name);
  if (PyObject_RichCompareBool(v.ptr(), py::int_(0).ptr(), Py_LT) == 1)
    throw py::value_error(name + " must be >= 0 (got " + text(v) + ")");
  const unsigned long long x = PyLong_AsUnsignedLongLong(v.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_SetString(PyExc_OverflowError, (name + " = " + text(v) + " does not fit in 64 bits").c_str());
    throw py::error_already_set();
  }
  return static_cast<std::uint64_t>(x);
}

std::size_t to_size(py::handle o, const std::string& name) { return static_cast<std::size_t>(to_u64(o, name)); }

std::int64_t to_i64(py::handle o, const std::string& name) {
  const py::int_ v = to_int(o, name);
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (overflow != 0) {
    PyErr_SetString(PyExc_OverflowError, (name + " = " + text(v) + " does not fit in int64").c_str());
    throw py::error_already_set();
  }
  if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
  return static_cast<std::int64_t>(x);
}

double to_double(py::handle o, const std::string& name) {
  if (PyBool_Check(o.ptr()) || !(PyFloat_Check(o.ptr()) || PyIndex_Check(o.ptr()) || PyNumber_Check(o.ptr())))
    throw py::type_error(name + " must be a number, got " + type_name(o) + " " + text(o));
  const double x = PyFloat_AsDouble(o.ptr());
  if (x == -1.0 && PyErr_Occurred()) throw py::error_already_set();
  return x;
}

bool to_bool(py::handle o, const std::string& name) {
  if (!PyBool_Check(o.ptr()))
    throw py::type_error(name + " must be True or False, got " + type_name(o) + " " + text(o));
  return o.ptr() == Py_True;
}

std::string to_text(py::handle o, const std::string& name) {
  if (!py::isinstance<py::str>(o)) throw py::type_error(name + " must be a str (got " + type_name(o) + ")");
  return o.cast<std::string>();
}

kvevict::HeadBudgets to_head_budgets(py::handle o) {
  kvevict::HeadBudgets split;
  if (const std::string problem = kvcli::parse_head_budgets(to_text(o, "head_budgets"), split); !problem.empty())
    throw py::value_error("head_budgets: " + problem);
  return split;
}

Amount to_amount(py::handle o, const std::string& name, AmountKind kind) {
  const char* expected = kind == AmountKind::budget
                             ? "an int (tokens), a float (fraction of the prompt) or a string such as '64', '0.5' "
                               "or '50%'"
                             : "an int (tokens), a float (fraction of the budget) or a string such as '8', '0.3' "
                               "or '30%'";
  Amount a;
  std::string problem;
  if (py::isinstance<py::str>(o)) {
    problem = kvcli::parse_amount_text(o.cast<std::string>(), kind, a);
  } else if (!PyBool_Check(o.ptr()) && PyIndex_Check(o.ptr())) {
    a.tokens = to_size(o, name);
    a.text = text(o);  // a count's range is the library's to check (its message names the argument's value)
  } else if (PyFloat_Check(o.ptr())) {
    problem = kvcli::check_amount_fraction(PyFloat_AsDouble(o.ptr()), kind, text(o), a);
  } else {
    throw py::type_error(name + " must be " + expected + ", got " + type_name(o) + " " + text(o));
  }
  if (!problem.empty()) throw py::value_error(name + ": " + problem);
  return a;
}

kvevict::Budget to_budget(py::handle o) {
  const Amount a = to_amount(o, "budget", AmountKind::budget);
  try {
    return a.is_ratio ? kvevict::Budget::ratio(a.ratio) : kvevict::Budget::tokens(a.tokens);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(std::string("budget = ") + text(o) + ": " + e.what());
  }
}

kvevict::RecentWindow to_recent(py::handle o) {
  const Amount a = to_amount(o, "recent", AmountKind::recent);
  try {
    return a.is_ratio ? kvevict::RecentWindow::ratio(a.ratio) : kvevict::RecentWindow::tokens(a.tokens);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(std::string("recent = ") + text(o) + ": " + e.what());
  }
}

DType to_dtype(py::handle o) {
  py::dtype dt;
  try {
    dt = py::dtype::from_args(py::reinterpret_borrow<py::object>(o));
  } catch (const py::error_already_set&) {  // NumPy's own TypeError for a name it does not know ('bfloat16')
    throw py::value_error("dtype must be float32 or float16 (got " + text(o) + ", which NumPy does not know; "
                          "bfloat16 K/V is supported in C++ only)");
  }
  if (!dt.attr("isnative").cast<bool>())  // '>f4' would be stored and read as native float32
    throw py::value_error("dtype must be a native-endian float32 or float16 (got '" +
                          dt.attr("str").cast<std::string>() + "', a non-native byte order)");
  if (dt.kind() == 'f' && dt.itemsize() == 4) return DType::float32;
  if (dt.kind() == 'f' && dt.itemsize() == 2) return DType::float16;
  throw py::value_error("dtype must be float32 or float16 (got " + dt.attr("name").cast<std::string>() + ")");
}

const char* elem_name(Elem e) {
  switch (e) {
    case Elem::float32: return "float32";
    case Elem::float16: return "float16";
    case Elem::int64: return "int64";
  }
  return "?";
}

std::string dtype_text(const py::array& a) {
  const py::dtype dt = a.dtype();
  std::string name = dt.attr("name").cast<std::string>();
  if (!dt.attr("isnative").cast<bool>())
    name += " (non-native byte order '" + dt.attr("str").cast<std::string>() +
            "'; convert with a.astype(a.dtype.newbyteorder('=')))";
  return name;
}

bool has_elem(const py::array& a, Elem e) {
  const py::dtype dt = a.dtype();
  if (!dt.attr("isnative").cast<bool>()) return false;
  switch (e) {
    case Elem::float32: return dt.kind() == 'f' && dt.itemsize() == 4;
    case Elem::float16: return dt.kind() == 'f' && dt.itemsize() == 2;
    case Elem::int64: return dt.kind() == 'i' && dt.itemsize() == 8;
  }
  return false;
}

py::array as_array(py::handle obj, const std::string& name, const std::string& expected) {
  if (py::isinstance<py::array>(obj)) return py::reinterpret_borrow<py::array>(obj);
  if (obj.is_none() || py::isinstance<py::str>(obj))
    throw py::type_error(name + " must be " + expected + ", got " + type_name(obj));
  try {
    return py::module_::import("numpy").attr("asarray")(obj);
  } catch (py::error_already_set&) {
    throw py::type_error(name + " must be " + expected + ", got " + type_name(obj));
  }
}

py::array checked_array(py::handle obj, const std::string& name, Elem e, const std::vector<py::ssize_t>& shape,
                        const std::string& what, bool writeable) {
  const std::string expected = std::string("a C-contiguous ") + elem_name(e) + " array of shape " + what + " = " +
                               dims(shape);
  const py::array a = as_array(obj, name, expected);
  const std::string given = dtype_text(a) + " array of shape " + array_shape(a);
  if (!has_elem(a, e)) throw py::value_error(name + " must be " + expected + ", got a " + given);
  bool same_shape = a.ndim() == static_cast<py::ssize_t>(shape.size());
  for (std::size_t i = 0; same_shape && i < shape.size(); ++i)
    same_shape = a.shape(static_cast<py::ssize_t>(i)) == shape[i];
  if (!same_shape) throw py::value_error(name + " must be " + expected + ", got a " + given);
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(name + " must be " + expected + ", got a non-contiguous " + given +
                          " (use numpy.ascontiguousarray)");
  if (writeable && !a.writeable()) throw py::value_error(name + " must be writeable, got a read-only " + given);
  return a;
}

void require_disjoint(const py::array& k, const py::array& v) {
  if (k.ptr() == v.ptr() || k.data() == v.data()) throw py::value_error("k and v must be different arrays");
  // Views of one buffer (v = k shifted by a row) would make every V write clobber K.
  const auto k0 = reinterpret_cast<std::uintptr_t>(k.data()), v0 = reinterpret_cast<std::uintptr_t>(v.data());
  const auto kn = static_cast<std::uintptr_t>(k.nbytes()), vn = static_cast<std::uintptr_t>(v.nbytes());
  if (k0 < v0 + vn && v0 < k0 + kn)
    throw py::value_error("k and v overlap in memory (views of one buffer); give each its own array");
}

}  // namespace kvpy

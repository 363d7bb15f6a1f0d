// python/module.cpp — the module definition of `import kvevict`: its docstring, version, the C++ exception
// translation, and one bind_* call per topic (cache, paged cache, replay, GGUF reader).
// SPDX-License-Identifier: Apache-2.0
#include <pybind11/pybind11.h>

#include <exception>
#include <stdexcept>

#include "bindings.hpp"
#include "docstrings.hpp"

namespace py = pybind11;

PYBIND11_MODULE(kvevict, m) {
  m.doc() = kvpy::doc::kModule;
  m.attr("__version__") = KVEVICT_VERSION;

  // std::length_error (a full KV head, a full sequence or page pool) -> OverflowError;
  // std::invalid_argument -> ValueError and std::out_of_range -> IndexError are pybind11's own translations.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const std::length_error& e) {
      PyErr_SetString(PyExc_OverflowError, e.what());
    }
  });

  kvpy::bind_cache(m);
  kvpy::bind_paged(m);  // after bind_cache: adds the PagedCache overload of attention_logits
  kvpy::bind_replay(m);
  bind_gguf(m);
}

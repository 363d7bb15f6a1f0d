// python/module.cpp — the module definition of `import kvevict`: its docstring, version, the C++ exception
// translation, and one bind_* call per topic (cache, paged cache, replay, layer layout, GGUF reader).
// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <pybind11/pybind11.h>

#include <exception>
#include <stdexcept>
#include <string>

#include "bindings.hpp"
#include "docstrings.hpp"

namespace py = pybind11;

namespace {

// The folder `kvevict/` beside this module's own file (build/python/kvevict, or site-packages/kvevict after
// pip install): the pure-Python submodules (kvevict.transformers) live there. Empty if the file is not found.
std::string submodule_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&submodule_dir), &info) == 0 || info.dli_fname == nullptr) return {};
  std::string file = info.dli_fname;
  const auto slash = file.find_last_of('/');
  return (slash == std::string::npos ? std::string(".") : file.substr(0, slash)) + "/kvevict";
}

}  // namespace

PYBIND11_MODULE(kvevict, m) {
  m.doc() = kvpy::doc::kModule;
  m.attr("__version__") = KVEVICT_VERSION;
  // A __path__ makes the extension module a package, so that `import kvevict.transformers` finds
  // kvevict/transformers.py (optional: it needs torch and transformers, and says so when they are missing).
  py::list path;
  if (const std::string dir = submodule_dir(); !dir.empty()) path.append(dir);
  m.attr("__path__") = path;

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
  kvpy::bind_expected_attention(m);  // after bind_cache: takes a Cache
  kvpy::bind_layer_layout(m);
  kvpy::bind_attention(m);
  bind_gguf(m);
}

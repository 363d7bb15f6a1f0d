// python/options.hpp — keyword-only options from one table (py::arg, py::kw_only, defaults) and the
// policy options shared by Cache and PagedCache (policy name, budget, recent window, Keyformer, SnapKV).
// SPDX-License-Identifier: Apache-2.0
//
// A binding lists its options once, as a table of names and defaults; `with_args` turns the table
// into the `py::kw_only(), py::arg_v(...)...` annotations and `taking_options` into a callable
// with one `py::object` parameter per option, so pybind11 itself rejects an unknown keyword
// (TypeError listing the call's keywords) and `help()` shows the signature. The values are then
// read by name through `Options`, and checked by conversions.hpp with the argument's name.
#pragma once

#include <pybind11/pybind11.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <kvevict/kvevict.hpp>
#include <string>
#include <utility>

namespace kvpy {

namespace py = pybind11;

/// One keyword-only option: its name and a function making its default (null: None). A default
/// other than None is one the option always has (budget '50%'); None means "not given", so that an
/// option a policy does not use can be refused.
struct OptionSpec {
  const char* name;
  py::object (*make_default)() = nullptr;
};

/// The option values of one call, read by name. O(options) per lookup (tables have ~20 entries).
class Options {
 public:
  template <std::size_t N>
  Options(const std::array<OptionSpec, N>& specs, std::array<py::object, N> values)
      : specs_(specs.data()), values_(values.begin(), values.end()), count_(N) {}

  /// The value of option `name`: the value given, its default when None is given for an option
  /// with a default, else a null object when it is None (not given).
  /// Throws std::logic_error for a name not in the table (a binding's own mistake).
  py::object get(const char* name) const;
  /// Whether option `name` is given (not None).
  bool has(const char* name) const { return static_cast<bool>(get(name)); }

 private:
  const OptionSpec* specs_;
  std::vector<py::object> values_;
  std::size_t count_;
};

/// `py::arg_v(spec.name, default)` of one table entry.
py::arg_v arg_of(const OptionSpec& spec);

namespace detail {
template <std::size_t>
using Object = py::object;
template <std::size_t N, class Fn, std::size_t... I>
decltype(auto) with_args(const std::array<OptionSpec, N>& specs, Fn&& fn, std::index_sequence<I...>) {
  return fn(arg_of(specs[I])...);
}
template <class... Lead, std::size_t N, class F, std::size_t... I>
auto taking_options(const std::array<OptionSpec, N>& specs, F f, std::index_sequence<I...>) {
  return [&specs, f](Lead... lead, Object<I>... o) {
    return f(std::forward<Lead>(lead)..., Options(specs, std::array<py::object, N>{std::move(o)...}));
  };
}
}  // namespace detail

/// `fn(py::arg_v...)` with one annotation per entry of `specs`, in order (put `py::kw_only()` before them).
template <std::size_t N, class Fn>
decltype(auto) with_args(const std::array<OptionSpec, N>& specs, Fn&& fn) {
  return detail::with_args(specs, std::forward<Fn>(fn), std::make_index_sequence<N>());
}

/// A callable `(Lead..., py::object x N)` calling `f(Lead..., Options)`: the function pybind11
/// binds for the table `specs` (which must outlive it: a namespace-scope table).
template <class... Lead, std::size_t N, class F>
auto taking_options(const std::array<OptionSpec, N>& specs, F f) {
  return detail::taking_options<Lead...>(specs, std::move(f), std::make_index_sequence<N>());
}

/// The policy part of a cache's options, checked: the policy, its configuration and parameters.
struct PolicySetup {
  kvevict::Policy policy = kvevict::Policy::keyformer;
  std::string name;  ///< canonical policy name
  kvevict::CacheConfig config;
  kvevict::PolicyParams params;
  bool noisy = false;      ///< keyformer with Gumbel noise: a `gumbel` array may be injected
  std::uint64_t seed = 0;  ///< the noise seed (the latest one after `reset(seed)`)

  /// ValueError unless `gumbel` is None or the policy draws Gumbel noise.
  void check_gumbel(py::handle gumbel) const;
  /// The library's "SnapKV observation window L = … exceeds budget k = …" in the Python argument's terms.
  std::string name_snap_window(const std::string& message) const;
  /// "unresolved (50% of the prompt)": a fraction budget before prefill (budget reads 0 until then).
  std::string unresolved_budget() const;
};

/// Parses `policy` (ValueError "policy: ...") and refuses the options it does not use: sinks
/// (streaming only), tau_init / tau_end / horizon / noise / seed (keyformer only), snap_* (snapkv only).
/// The first step of building a cache, before its storage is checked.
PolicySetup policy_of(const std::string& policy, const Options& o);

/// Reads n_q_heads (required), budget, recent (the tools' defaults: 30% for keyformer, h2o and snapkv,
/// else 0), seed (42), `shared_heads` when `has_shared_heads` (else true), and the policy's own
/// options into `s`. TypeError / ValueError / OverflowError naming the option.
void configure(PolicySetup& s, const Options& o, bool has_shared_heads);

/// Default of `budget` in every cache's table: '50%' (the tools' default).
py::object default_budget();
/// Default `False`.
py::object default_false();

}  // namespace kvpy

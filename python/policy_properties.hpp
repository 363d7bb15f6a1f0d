// python/policy_properties.hpp — the read-only properties of the eviction state that kvevict.Cache and
// kvevict.PagedCache both bind (budget, budget_resolved, recent_window, step, temperature, policy).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <pybind11/pybind11.h>

#include "docstrings.hpp"

namespace kvpy {

/// Binds on `c` (a py::class_ of `Cache`, PyCache or PyPagedCache) the properties budget, budget_resolved,
/// recent_window, step, temperature and policy, in that order, each reading the member of the same name.
template <class Cache, class Class>
void bind_policy_properties(Class& c) {
  c.def_property_readonly("budget", &Cache::budget, doc::kBudget)
      .def_property_readonly("budget_resolved", &Cache::budget_resolved, doc::kBudgetResolved)
      .def_property_readonly("recent_window", &Cache::recent_window,
                             "Resolved recent window w (0 before the first prefill).")
      .def_property_readonly("step", &Cache::step, "Decode steps done since prefill.")
      .def_property_readonly("temperature", &Cache::temperature, doc::kTemperature)
      .def_property_readonly("policy", &Cache::policy, "Canonical policy name.");
}

}  // namespace kvpy

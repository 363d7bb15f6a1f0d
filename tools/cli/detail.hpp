// kvevict tools — cli/detail.hpp: helpers shared by the cli/*.cpp files (not part of the tools' interface).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

#include "cli/amount.hpp"

namespace kvcli::detail {

inline bool is_eviction_policy(const std::string& p) {
  return p == "keyformer" || p == "h2o" || p == "streaming" || p == "window" || p == "tova" || p == "snapkv" ||
         p == "knorm" || p == "keydiff";
}

// "--budget 50%" / "--budget-ratio 0.5" as the user typed it, for messages.
inline std::string typed(const std::string& flag, const Amount& a) { return flag + " " + a.text; }

}  // namespace kvcli::detail

// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// policies.hpp — forwarding header kept for existing includes; the content lives in
// kvevict/presets.hpp.
#pragma once

#include "kvevict/presets.hpp"

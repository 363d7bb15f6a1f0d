// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// score/fast_math.hpp — forwarding header kept for existing includes; the content lives in
// kvevict/core/fast_math.hpp.
#pragma once

#include "kvevict/core/fast_math.hpp"

// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// kv/attention_logits.hpp — forwarding header kept for existing includes; the content lives in
// kvevict/attention/attention_logits.hpp.
#pragma once

#include "kvevict/attention/attention_logits.hpp"

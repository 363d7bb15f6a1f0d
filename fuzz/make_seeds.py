#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<target>/ (run from anywhere; idempotent).

The named regression seeds encode the exact scenarios of faults found earlier in the byte layout the harnesses
read with FuzzedDataProvider: integers are taken from the END of the input, most significant byte
first, as many bytes as the range needs (ConsumeIntegralInRange), so an `Encoder` (seeds/encoder.py) writes the
harness's choices in call order and reverses them. Keep it in step with the harnesses' call order.

The writers live in fuzz/seeds/ (encoder.py: the Encoder and `write`; one module per target).
"""
from seeds.causal_attention import causal_attention_seeds
from seeds.cache_ops import cache_ops_issue37_seeds, cache_ops_issue51_seeds, cache_ops_seeds
from seeds.helpers import helpers_seeds
from seeds.llama2 import llama2_seeds, tokenizer_seeds
from seeds.paged_ops import paged_ops_issue51_seeds
from seeds.replay import npy_seeds, replay_seeds, trace_json_duplicate_seeds, trace_json_seeds
from seeds.select_keep import select_keep_seeds

if __name__ == "__main__":
    cache_ops_seeds()
    cache_ops_issue37_seeds()
    cache_ops_issue51_seeds()
    paged_ops_issue51_seeds()
    select_keep_seeds()
    trace_json_seeds()
    replay_seeds()
    npy_seeds()
    llama2_seeds()
    tokenizer_seeds()
    helpers_seeds()
    trace_json_duplicate_seeds()
    causal_attention_seeds()

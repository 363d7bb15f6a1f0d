"""kvevict's plugin with tensor_parallel_size=2 on vLLM's CPU backend: a random-init Llama whose 4 query and
2 KV heads divide by 2 (conftest.tiny_llama_dir), 'streaming' and 'knorm' at k = 256, three requests of 600,
300 and 630 tokens. Both ranks cut the same blocks at every step (KVEVICT_VLLM_TRACE), each cut is the
reference's (reference.py) and the greedy ids equal transformers' with the evicted positions masked. Under
'knorm' each rank holds one of the two KV heads, the key scores are all-reduced before the choice, and TP = 1
makes the very same cuts and ids (a 'streaming' cut is a function of the count alone)."""

import json
import os
import subprocess
import sys

import pytest

import reference

HERE = os.path.dirname(os.path.abspath(__file__))
def _run(model, prompts_path, trace_dir, tp, config):
    os.makedirs(trace_dir)
    env = dict(os.environ, KVEVICT_VLLM_TRACE=trace_dir, VLLM_CPU_OMP_THREADS_BIND="0|1" if tp == 2 else "0")
    run = subprocess.run([sys.executable, os.path.join(HERE, "engine_run.py"), model, prompts_path, "20",
                          "--kvevict", json.dumps(config), "--tp", str(tp)],
                         env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    ids = json.loads(next(line for line in run.stdout.splitlines() if line.startswith('{"ids"')))["ids"]
    traces = {}
    for name in sorted(os.listdir(trace_dir)):
        with open(os.path.join(trace_dir, name)) as f:
            traces[name] = [json.loads(line) for line in f]
    return ids, traces


# 'streaming' in scripts/ci-extended.sh (E7) only: its cut is a function of the count, computed alike on every rank
# with no message between them; 'knorm' runs the all-reduce and the ranks' report comparison.
@pytest.mark.parametrize("config", [pytest.param({"policy": "streaming", "budget": 256}, marks=pytest.mark.extended),
                                    {"policy": "knorm", "budget": 256}], ids=["streaming", "knorm"])
def test_both_ranks_cut_the_same_blocks_and_give_tp1s_ids(tiny_llama_dir, stories, tmp_path, config):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    prompts = [tok(" ".join(stories[a:b]))["input_ids"][:n] for a, b, n in ((0, 40, 600), (40, 70, 300),
                                                                          (70, 120, 630))]
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(prompts))
    ids2, traces2 = _run(tiny_llama_dir, str(path), str(tmp_path / "tp2"), 2, config)
    assert list(traces2) == ["rank0.jsonl", "rank1.jsonl"]
    rank0, rank1 = traces2["rank0.jsonl"], traces2["rank1.jsonl"]
    assert rank0 == rank1  # the same rows, lengths, evicted counts, kept block ids and evicted blocks at every build
    assert sum(row[1] > 0 for build in rank0 for row in build) > 0
    if config["policy"] == "knorm":  # the scores were all-reduced: TP = 1 must make the very same cuts
        ids1, traces1 = _run(tiny_llama_dir, str(path), str(tmp_path / "tp1"), 1, config)
        assert list(traces1) == ["rank0.jsonl"]
        # lengths, evicted counts and evicted logical blocks per row (block ids may come from another pool size)
        strip = lambda trace: [[row[:2] + row[3:] for row in build] for build in trace]
        assert strip(rank0) == strip(traces1["rank0.jsonl"])
        assert ids2 == ids1
    # the ids are transformers' on the same model with the evicted positions masked (reference.py), and every
    # cut is a request's reference choice at that count (a decode row: one new token, so length + evicted
    # blocks - 1 tokens were cached)
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    if config["policy"] == "streaming":
        rules = [lambda c: reference.evicted_pages_sim(c, config["budget"], 128, 1)] * len(prompts)
    else:
        rules = [reference.KnormRule(len(p), config["budget"], 128) for p in prompts]
    assert ids2 == [reference.masked_greedy(model, p, 20, (rule, 128)) for p, rule in zip(prompts, rules)]
    for build in rank0:
        for length, evicted, _, logical in build:
            c = length + evicted * 128 - 1
            if evicted:
                assert logical in [rule(c) for rule in rules], (c, logical)

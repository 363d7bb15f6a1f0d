"""kvevict's plugin with tensor_parallel_size=2 on vLLM's CPU backend: a random-init Llama whose 4 query and
2 KV heads divide by 2 (conftest.tiny_llama_dir), 'streaming' at k = 256, three requests of 600, 300 and 630
tokens. Both ranks cut the same blocks at every step (KVEVICT_VLLM_TRACE), the cuts are those of TP = 1,
and the greedy ids equal TP = 1's, which equal transformers' with the evicted positions masked."""

import json
import os
import subprocess
import sys

import reference

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = {"policy": "streaming", "budget": 256}


def _run(model, prompts_path, trace_dir, tp):
    os.makedirs(trace_dir)
    env = dict(os.environ, KVEVICT_VLLM_TRACE=trace_dir, VLLM_CPU_OMP_THREADS_BIND="0|1" if tp == 2 else "0")
    run = subprocess.run([sys.executable, os.path.join(HERE, "engine_run.py"), model, prompts_path, "20",
                          "--kvevict", json.dumps(CONFIG), "--tp", str(tp)],
                         env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    ids = json.loads(next(line for line in run.stdout.splitlines() if line.startswith('{"ids"')))["ids"]
    traces = {}
    for name in sorted(os.listdir(trace_dir)):
        with open(os.path.join(trace_dir, name)) as f:
            traces[name] = [json.loads(line) for line in f]
    return ids, traces


def test_both_ranks_cut_the_same_blocks_and_give_tp1s_ids(tiny_llama_dir, stories, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    prompts = [tok(" ".join(stories[a:b]))["input_ids"][:n] for a, b, n in ((0, 40, 600), (40, 70, 300),
                                                                          (70, 120, 630))]
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(prompts))
    ids1, traces1 = _run(tiny_llama_dir, str(path), str(tmp_path / "tp1"), 1)
    ids2, traces2 = _run(tiny_llama_dir, str(path), str(tmp_path / "tp2"), 2)
    assert list(traces1) == ["rank0.jsonl"] and list(traces2) == ["rank0.jsonl", "rank1.jsonl"]
    rank0, rank1 = traces2["rank0.jsonl"], traces2["rank1.jsonl"]
    assert rank0 == rank1  # the same rows, lengths, evicted counts and kept block ids at every build
    # the same cuts as TP = 1: lengths and evicted counts per row (block ids may come from another pool size)
    strip = lambda trace: [[row[:2] for row in build] for build in trace]
    assert strip(rank0) == strip(traces1["rank0.jsonl"])
    assert sum(row[1] > 0 for build in rank0 for row in build) > 0
    assert ids2 == ids1
    # and TP = 1's ids are transformers' on the same model with the evicted positions masked (reference.py)
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    rule = (lambda c: reference.evicted_pages_sim(c, CONFIG["budget"], 128, 1), 128)
    assert ids1 == [reference.masked_greedy(model, p, 20, rule) for p in prompts]

"""KVEvictCache on a real model: SmolLM2-135M-Instruct (Q4_1 GGUF through transformers' GGUF loader, float32).
The docs' example runs as written and prints what docs/transformers.md shows; its model then serves the other
checks: 'full' is DynamicCache, Keyformer at 50% holds k per KV head at every step in all 30 layers, and the
kept sets are kvevict.replay's of the logits the cache was given."""
import contextlib
import io
import re
import sys

import numpy as np
import pytest
import torch
from transformers import DynamicCache

import kvevict
from conftest import ROOT, greedy_loop
from kvevict.transformers import KVEvictCache, layer_seed


def doc_block(kind, name):
    text = (ROOT / "docs/transformers.md").read_text()
    m = re.search(rf"<!-- {kind}: {re.escape(name)} -->\n```[a-z]*\n(.*?)```", text, re.S)
    assert m, f"docs/transformers.md has no {kind} block {name}"
    return m.group(1)


@pytest.fixture(scope="module")
def example(smollm2_path):
    """Runs the docs' example as a script (sys.argv[1] = the model) and returns its globals and output."""
    code = doc_block("example", "transformers-keyformer")
    out = io.StringIO()
    ns = {"__name__": "__main__"}
    argv = sys.argv
    sys.argv = ["example", smollm2_path]
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/transformers.md", "exec"), ns)
    finally:
        sys.argv = argv
    return ns, out.getvalue()


def test_docs_example_runs_and_prints_what_the_docs_show(example):
    ns, printed = example
    assert len(code_lines := doc_block("example", "transformers-keyformer").splitlines()) <= 12, code_lines
    assert printed == doc_block("example-output", "transformers-keyformer")
    cache = ns["cache"]
    assert ns["ids"].shape == (1, 61)
    assert all(cache.layers[i].kv.lengths == [30, 30, 30] for i in range(30))


def test_full_is_dynamic_cache_on_smollm2(example):
    ns, _ = example
    model, ids = ns["model"], ns["ids"]
    want_ids, want = greedy_loop(model, ids, DynamicCache(config=model.config), 17)
    got_ids, got = greedy_loop(model, ids, KVEvictCache(model, policy="full"), 17)
    assert got_ids == want_ids
    assert float((got - want).abs().max()) <= 1e-6


def test_keyformer_half_holds_k_at_every_step_and_equals_replay_on_smollm2(example):
    ns, _ = example
    model, ids = ns["model"], ns["ids"]
    T = 12
    cache = KVEvictCache(model, policy="keyformer", budget=0.5, horizon=T, record=True)

    def check(s):
        for layer in range(30):
            assert cache.layers[layer].kv.lengths == [30, 30, 30]
    greedy_loop(model, ids, cache, T + 1, after_step=check)
    P, N = 61, 61 + T
    for layer in (0, 14, 29):
        records = cache.layers[layer].records
        x = np.zeros((9, N, N), np.float32)
        x[:, :P, :P] = records[0][1]
        for t, (_, logits, before, _) in enumerate(records[1:], start=P):
            for h in range(9):
                x[h, t, before[h // 3]] = logits[h]
        want = kvevict.replay(x, P, policy="keyformer", q_heads_per_kv=3, budget=30, gen_steps=T,
                              seed=layer_seed(42, layer))
        assert [r[3] for r in records] == [w["kept"] for w in want]

"""KVEvictCache on Gemma 3 270M (18 layers: 15 of a 512-token sliding window, 3 full-attention), loaded from its
GGUF by transformers ($KVEVICT_GEMMA3_GGUF, else scripts/get-models.sh gemma3-270m): with a prompt longer than the
window, policy 'full' gives transformers' own greedy ids and logits; at 50 % every full-attention layer holds k at
every step and the sliding layers before the first full-attention one equal DynamicCache's bit for bit."""
import os
import subprocess

import pytest
import torch
import transformers
from transformers import DynamicCache

from conftest import ROOT, greedy_loop
from kvevict.transformers import KVEvictCache

P, T = 640, 8  # P > the 512-token window


@pytest.fixture(scope="module")
def gemma3_270m():
    path = os.environ.get("KVEVICT_GEMMA3_GGUF")
    if not path:
        path = subprocess.run(["bash", str(ROOT / "scripts/get-models.sh"), "gemma3-270m"], check=True,
                              capture_output=True, text=True).stdout.strip()
    d, f = os.path.split(path)
    return transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()


def prompt(n):
    g = torch.Generator().manual_seed(55)
    return torch.randint(10, 20000, (1, n), generator=g)


def test_the_layout_is_gemma3s(gemma3_270m):
    cache = KVEvictCache(gemma3_270m, policy="h2o", budget=0.5)
    assert gemma3_270m.config.model_type == "gemma3_text" and gemma3_270m.config.sliding_window == 512
    assert cache.global_layers == [5, 11, 17]


def test_full_equals_transformers_own_cache(gemma3_270m):
    ids = prompt(P)
    want_ids, want = greedy_loop(gemma3_270m, ids, DynamicCache(config=gemma3_270m.config), T)
    got_ids, got = greedy_loop(gemma3_270m, ids, KVEvictCache(gemma3_270m, policy="full"), T)
    assert got_ids == want_ids
    assert float((got - want).abs().max()) <= 1e-5


def test_half_holds_k_in_the_global_layers_and_leaves_the_sliding_ones(gemma3_270m):
    ids = prompt(P + T)
    k = P // 2
    cache = KVEvictCache(gemma3_270m, policy="h2o", budget=0.5)
    ref = DynamicCache(config=gemma3_270m.config)
    with torch.no_grad():
        gemma3_270m(ids[:, :P], past_key_values=cache)
        gemma3_270m(ids[:, :P], past_key_values=ref)
        for t in range(P, P + T):
            for layer in cache.global_layers:
                assert cache.kept_length(layer) == k
                assert len(cache.retained_positions(layer, 0)) == k
            for layer in range(18):
                if not cache.is_global(layer):
                    assert cache.kept_length(layer) == ref.layers[layer].keys.shape[-2] == 511
            for layer in range(5):  # before the first full-attention layer: the same inputs, the same K/V
                assert torch.equal(cache.layers[layer].keys, ref.layers[layer].keys)
            gemma3_270m(ids[:, t:t + 1], past_key_values=cache)
            gemma3_270m(ids[:, t:t + 1], past_key_values=ref)

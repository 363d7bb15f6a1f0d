"""bench/quality/kvpress/ratios.py: kvpress's press at several compression ratios from one prefill gives, at each
ratio, exactly what side_by_side.kvpress_prefill gives from its own prefill (the last logits, every layer's K/V, the
masked keys of AdaKV and KVzip), and answers the same ids after a question, for every press the RULER runner uses;
an eager ObservedAttention prefill forgets the keys an earlier press masked."""
import pathlib
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench/quality/kvpress"))

kvpress = pytest.importorskip("kvpress")
import ratios as kr  # noqa: E402
import side_by_side as sbs  # noqa: E402

RATIOS = (0.25, 0.5, 0.75, 0.875)


@pytest.fixture(autouse=True)
def no_masks_left(llama):
    """The session's tiny model without the masked keys a test's last press left on it."""
    yield
    sbs.clear_masks(llama)


class Tok:
    """A stand-in tokenizer for the tiny model (vocabulary 96), as KVzipPress calls it."""
    chat_template = None

    def encode(self, text, add_special_tokens=False, return_tensors=None):
        ids = [3 + (b * 7) % 90 for b in text.encode()][:9]
        return torch.tensor([ids]) if return_tensors == "pt" else ids


def answer(model, cache, L, P, question, steps=4):
    """Greedy ids after feeding `question` at positions P.. (slots L..), as the RULER runner answers."""
    logits = sbs.append_at(model, cache, question, P, L)[-1]
    out = []
    for t in range(steps):
        out.append(int(logits.argmax()))
        logits = sbs.append_at(model, cache, torch.tensor([[out[-1]]]), P + question.shape[1] + t,
                               L + question.shape[1] + t)[-1]
    return out


@pytest.mark.parametrize("name", ["snapkv", "tova", "streaming_llm", "keydiff", "knorm", "expected_attention",
                                  "adakv_expected_attention", "observed_attention", "kvzip"])
def test_each_ratio_equals_its_own_prefill(llama, name):
    ids = torch.randint(0, 96, (1, 80), generator=torch.Generator().manual_seed(3))
    question = torch.tensor([[5, 17, 33, 2]])
    many = kr.kvpress_prefill_ratios(llama, ids, name, RATIOS, hf_tokenizer=Tok())
    assert sorted(many) == list(RATIOS)
    for r in RATIOS:
        cache, logits, L = sbs.kvpress_prefill(llama, ids, name, r, hf_tokenizer=Tok())
        masks = [layer.self_attn.masked_key_indices if hasattr(layer.self_attn, "masked_key_indices") else None
                 for layer in llama.model.layers]
        got = many[r]
        assert torch.equal(got.logits, logits)
        assert got.L == L
        mine = got.cache(llama)
        for a, b in zip(mine.layers, cache.layers):
            assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values), (name, r)
        for a, b in zip(got.masks, masks):
            assert (a is None) == (b is None), (name, r)
            if a is not None:
                assert all(torch.equal(x, y) for x, y in zip(a, b)), (name, r)
        if name in ("adakv_expected_attention", "kvzip"):  # these mask: every ratio masks something
            assert any(m is not None and m[0].numel() > 0 for m in got.masks), (name, r)
        want_ids = answer(llama, cache, L, ids.shape[1], question)
        got.use(llama)
        assert answer(llama, mine, got.L, ids.shape[1], question) == want_ids, (name, r)


def test_observed_attention_after_a_masking_press(llama):
    # ObservedAttention prefills with eager attention, which kvpress's patch does not wrap: the masks an AdaKV press
    # left on the modules must not reach its answers (they did: an IndexError past its shorter cache).
    ids = torch.randint(0, 96, (1, 80), generator=torch.Generator().manual_seed(4))
    question = torch.tensor([[5, 17, 33, 2]])
    cache, _, L = sbs.kvpress_prefill(llama, ids, "observed_attention", 0.875)
    want = answer(llama, cache, L, 80, question)
    sbs.kvpress_prefill(llama, ids, "adakv_expected_attention", 0.5)
    assert any(layer.self_attn.masked_key_indices is not None for layer in llama.model.layers)
    cache, _, L = sbs.kvpress_prefill(llama, ids, "observed_attention", 0.875)
    assert answer(llama, cache, L, 80, question) == want
    sbs.kvpress_prefill(llama, ids, "adakv_expected_attention", 0.5)
    got = kr.kvpress_prefill_ratios(llama, ids, "observed_attention", [0.875])[0.875]
    got.use(llama)
    assert answer(llama, got.cache(llama), got.L, 80, question) == want


@pytest.mark.parametrize("policy", ["h2o", "keyformer"])
def test_a_kvevict_row_after_a_masking_press(llama, policy):
    # kvpress's patched attention can apply the masked keys the modules hold to KVEvictCache's decode steps too
    # (whether it wraps the attention kvevict's decode steps take depends on the import order): the runners clear
    # them before a kvevict row, and a cleared model decodes as one that never saw a press.
    from kvevict.transformers import KVEvictCache
    ids = torch.randint(0, 96, (1, 60), generator=torch.Generator().manual_seed(1))
    opts = dict(horizon=8) if policy == "keyformer" else {}

    def step():
        cache = KVEvictCache(llama, policy=policy, budget=0.5, evict="prefill", **opts)
        with torch.no_grad():
            llama(ids, past_key_values=cache)
            return llama(torch.tensor([[5]]), past_key_values=cache).logits[0, -1]
    sbs.clear_masks(llama)
    clean = step()
    sbs.kvpress_prefill(llama, ids, "adakv_expected_attention", 0.5)
    assert any(layer.self_attn.masked_key_indices is not None for layer in llama.model.layers)
    sbs.run_kvevict(llama, ids, 40, policy, "prefill", 0.5)  # the NLL runner's kvevict row clears them first
    assert all(layer.self_attn.masked_key_indices is None for layer in llama.model.layers)
    assert torch.equal(step(), clean)


def test_refusals(llama):
    ids = torch.zeros((1, 8), dtype=torch.long)
    with pytest.raises(ValueError, match=r"ratios must be in \(0, 1\)"):
        kr.kvpress_prefill_ratios(llama, ids, "snapkv", [0.5, 1.0])
    with pytest.raises(ValueError, match="no pyramidkv"):
        kr.kvpress_prefill_ratios(llama, ids, "pyramidkv", [0.5])

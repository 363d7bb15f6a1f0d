"""KVEvictCache on batches: model.generate over 4 left-padded prompts of different lengths gives each sequence the ids
and logits (1e-5) it gets alone, and keeps the same positions in every layer and KV head; each sequence has its
own budget (a fraction of its own prompt) and its own per-head lengths."""
import pytest
import torch
from transformers import DynamicCache

from kvevict.transformers import KVEvictCache

from conftest import tiny_model

LENGTHS = (20, 26, 13, 31)
T = 6
PAD = 0


def prompts(seed=3):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 96, (1, n), generator=g) for n in LENGTHS]


def left_padded(seqs):
    P = max(s.shape[1] for s in seqs)
    ids = torch.full((len(seqs), P), PAD)
    mask = torch.zeros((len(seqs), P), dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, P - s.shape[1]:] = s[0]
        mask[b, P - s.shape[1]:] = 1
    return ids, mask


def run(model, ids, cache, mask=None):
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, past_key_values=cache, max_new_tokens=T, do_sample=False,
                             pad_token_id=PAD, output_logits=True, return_dict_in_generate=True)
    return out.sequences[:, ids.shape[1]:], torch.stack(out.logits, dim=1)  # [B, T], [B, T, vocab]


CASES = [
    ("llama", "h2o", dict(budget=0.5)),
    ("llama", "keyformer", dict(budget=0.5, horizon=T)),
    ("qwen3", "snapkv", dict(budget=0.5)),
    ("llama", "streaming", dict(budget=10)),
    ("mistral", "tova", dict(budget=0.5)),
    ("llama", "expected_attention", dict(budget=0.5)),
    ("llama", "h2o", dict(budget=0.5, head_budgets="adaptive")),
    ("qwen2", "h2o", dict(budget=0.5, evict="prefill")),
]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("arch, policy, options", CASES, ids=[f"{c[1]}-{c[0]}-{len(c[2])}" for c in CASES])
def test_each_sequence_of_a_batch_is_what_it_is_alone(arch, policy, options, attn):
    model = tiny_model(arch, attn=attn, seed=7)
    seqs = prompts()
    ids, mask = left_padded(seqs)
    batch = KVEvictCache(model, policy=policy, **options)
    got_ids, got_logits = run(model, ids, batch, mask)
    for b, s in enumerate(seqs):
        alone = KVEvictCache(model, policy=policy, **options)
        want_ids, want_logits = run(model, s, alone)
        assert torch.equal(got_ids[b], want_ids[0]), b
        torch.testing.assert_close(got_logits[b], want_logits[0], rtol=1e-5, atol=1e-5)
        if options.get("evict") != "prefill":
            for layer in range(2):
                for h in range(2):
                    assert batch.retained_positions(layer, h, seq=b) == alone.retained_positions(layer, h), (b, layer)
    if options.get("evict") != "prefill":
        lens = batch.layers[0].lens
        assert batch.kept_length(0) == lens.max()
        if isinstance(options["budget"], float):  # k = floor(r P_b): each sequence its own budget
            assert len(set(lens.sum(axis=1).tolist())) > 1


def test_full_policy_batch_equals_dynamic_cache():
    model = tiny_model("llama", seed=7)
    ids, mask = left_padded(prompts())
    a_ids, a = run(model, ids, KVEvictCache(model, policy="full"), mask)
    b_ids, b = run(model, ids, DynamicCache(config=model.config), mask)
    assert torch.equal(a_ids, b_ids)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_right_padding_and_wrong_positions_are_refused():
    model = tiny_model("llama", seed=7)
    seqs = prompts()
    ids, mask = left_padded(seqs)
    with pytest.raises(ValueError, match=r"^KVEvictCache: sequence 0 of the batch is not left-padded .*"
                                         r"padding_side = 'left'"):
        with torch.no_grad():
            model(ids.flip(1), attention_mask=mask.flip(1), past_key_values=KVEvictCache(model, policy="h2o"))
    cache = KVEvictCache(model, policy="h2o")
    with torch.no_grad():  # a hand-written loop must number each sequence from its own real tokens, as generate does
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        model(ids, attention_mask=mask, position_ids=position_ids, past_key_values=cache)
        nxt = torch.full((4, 1), 5)
        with pytest.raises(ValueError, match=r"^KVEvictCache: sequence 0 of the batch is at position 20 \(its real "
                                             r"tokens so far\), but the model was given position_ids \[31\]"):
            model(nxt, past_key_values=cache)
        model(nxt, position_ids=position_ids[:, -1:] + 1, past_key_values=cache)  # the right ones work


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_gemma3_batch_sliding_layers_stay_transformers_own(attn):
    """Gemma 3: its sliding-window layers are transformers' (batch-aware with the model's padding mask), its global
    layers kvevict's per sequence; each sequence still gets what it gets alone."""
    from test_gemma3 import GLOBAL, tiny_gemma3
    model = tiny_gemma3(attn=attn, seed=3)
    seqs = prompts(5)
    ids, mask = left_padded(seqs)
    batch = KVEvictCache(model, policy="h2o", budget=0.5)
    got_ids, got_logits = run(model, ids, batch, mask)
    for b, s in enumerate(seqs):
        alone = KVEvictCache(model, policy="h2o", budget=0.5)
        want_ids, want_logits = run(model, s, alone)
        n = want_ids.shape[1]  # alone, generation stops at Gemma's EOS (id 1); in the batch the sequence pads on
        assert torch.equal(got_ids[b, :n], want_ids[0]), b
        torch.testing.assert_close(got_logits[b, :n], want_logits[0], rtol=1e-5, atol=1e-5)
        if n == T:  # (a sequence stopped early alone has taken fewer steps)
            assert all(batch.retained_positions(layer, 0, seq=b) == alone.retained_positions(layer, 0)
                       for layer in GLOBAL)


def test_prompt_positions_and_short_prompts_are_checked():
    """The prompt's real tokens must be at 0 .. P_b - 1 (what the cache records); an empty row, a budget a short
    sequence cannot hold and an Expected Attention prompt within its sinks name the sequence."""
    model = tiny_model("llama", seed=7)
    seqs = prompts()
    ids, mask = left_padded(seqs)
    with torch.no_grad():
        with pytest.raises(ValueError, match=r"^KVEvictCache: the prompt's real tokens of sequence 0 of the batch are "
                                             r"at positions \[11, 12, 13, 14\]\.\.\., but the cache numbers them 0 \.\. "
                                             r"19: pass no position_ids \(one sequence\) or attention_mask.cumsum"):
            model(ids, attention_mask=mask, past_key_values=KVEvictCache(model, policy="h2o"))  # no position_ids
        with pytest.raises(ValueError, match=r"sequence 0 of the batch are at positions \[5, 6, 7, 8\]"):
            model(seqs[0], position_ids=torch.arange(20)[None] + 5, past_key_values=KVEvictCache(model, policy="h2o"))
        empty = mask.clone()
        empty[2] = 0
        with pytest.raises(ValueError, match=r"^KVEvictCache: sequence 2 of the batch has no real token"):
            model(ids, attention_mask=empty, position_ids=(empty.cumsum(-1) - 1).clamp(min=0),
                  past_key_values=KVEvictCache(model, policy="h2o"))
    with pytest.raises(ValueError, match=r"budget 16 tokens is larger than the prompt's 13 tokens.*\(sequence 2 of "
                                         r"the batch\)$"):
        run(model, ids, KVEvictCache(model, policy="h2o", budget=16), mask)
    short, short_mask = left_padded([seqs[0], seqs[0][:, :3]])
    with pytest.raises(ValueError, match=r"needs more prompt tokens than n_sink = 4 .* sequence 1 has 3: lower n_sink"):
        run(model, short, KVEvictCache(model, policy="expected_attention", budget=0.5), short_mask)
    with pytest.raises(ValueError, match=r"n_future_positions = 1000000000000 exceeds the model's "
                                         r"max_position_embeddings = 512"):
        KVEvictCache(model, policy="expected_attention", n_future_positions=10**12)

"""KVEvictCache with beam search (num_beams=2, reorder_cache): policy 'full' gives DynamicCache's beams; every evicting
policy gives the beams of a beam search written here by hand in which each beam runs its own batch-1 KVEvictCache
(a beam's cache is a function of its token history: fed its prompt and tokens afresh, it is what the beam's copied
cache must be); also a batch of 2 left-padded prompts x 2 beams. Sequences equal, scores within 1e-5."""
import pytest
import torch
from transformers import DynamicCache

from kvevict.transformers import KVEvictCache

from conftest import tiny_model

T = 5
BEAMS = 2
PAD = 0


def beam_model(arch="llama", attn="sdpa"):
    model = tiny_model(arch, attn=attn, seed=11)
    model.generation_config.eos_token_id = None  # no beam ends early: the reference below has no EOS
    model.generation_config.pad_token_id = PAD
    return model


def generate(model, ids, cache, mask=None):
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, past_key_values=cache, max_new_tokens=T, do_sample=False,
                             num_beams=BEAMS, num_return_sequences=BEAMS, pad_token_id=PAD,
                             output_scores=True, return_dict_in_generate=True)
    return out.sequences[:, ids.shape[1]:], out.sequences_scores


def last_log_probs(model, prompt, tokens, policy, options):
    """The log-probabilities after `prompt` + `tokens`, from a fresh batch-1 KVEvictCache fed them one by one."""
    cache = KVEvictCache(model, policy=policy, **options)
    with torch.no_grad():
        x = model(prompt, past_key_values=cache).logits[0, -1]
        for t in tokens:
            x = model(torch.tensor([[t]]), past_key_values=cache).logits[0, -1]
    return torch.log_softmax(x.float(), dim=-1)


def reference_beams(model, prompt, policy, options):
    """transformers' beam search (no EOS, length_penalty 1, num_beams 2) by hand, each beam with its own cache.
    Returns the BEAMS best sequences [BEAMS, T] and their scores (sum of log-probabilities / T)."""
    beams = [([], 0.0)]  # at the start only the first beam runs (the others score -1e9 in generate)
    for step in range(T):
        rows = torch.stack([last_log_probs(model, prompt, toks, policy, options) + score for toks, score in beams])
        vocab = rows.shape[1]
        top, flat = torch.topk(rows.reshape(-1), 2 * BEAMS)
        beams = [(beams[int(f) // vocab][0] + [int(f) % vocab], float(v)) for v, f in zip(top, flat)][:BEAMS]
    return torch.tensor([b[0] for b in beams]), torch.tensor([b[1] / T for b in beams])


def prompt_ids(n=14, seed=5):
    return torch.randint(1, 96, (1, n), generator=torch.Generator().manual_seed(seed))


CASES = [
    ("h2o", dict(budget=0.5)),
    ("keyformer", dict(budget=0.5, horizon=T)),
    ("tova", dict(budget=0.5)),
    ("snapkv", dict(budget=8, snap_window=4)),
    ("streaming", dict(budget=8)),
    ("h2o", dict(budget=0.5, head_budgets="adaptive")),
    ("h2o", dict(budget=0.5, mean_attention=True)),
]


@pytest.mark.parametrize("policy, options", CASES, ids=[c[0] + "".join(f"-{k}" for k in c[1] if k != "budget")
                                                        for c in CASES])
def test_beams_are_those_of_beams_with_their_own_caches(policy, options):
    model = beam_model()
    ids = prompt_ids()
    got, scores = generate(model, ids, KVEvictCache(model, policy=policy, **options))
    want, want_scores = reference_beams(model, ids, policy, options)
    assert got.tolist() == want.tolist()
    torch.testing.assert_close(scores, want_scores, rtol=0, atol=1e-5)


def test_full_gives_dynamic_cache_beams():
    model = beam_model()
    ids = prompt_ids()
    got, scores = generate(model, ids, KVEvictCache(model, policy="full"))
    want, want_scores = generate(model, ids, DynamicCache())
    assert got.tolist() == want.tolist()
    torch.testing.assert_close(scores, want_scores, rtol=0, atol=1e-5)


@pytest.mark.parametrize("policy, options", [("h2o", dict(budget=0.5)), ("keyformer", dict(budget=0.5, horizon=T)),
                                             ("h2o", dict(budget=0.5, evict="prefill"))],
                         ids=["h2o", "keyformer", "h2o-prefill"])
def test_a_left_padded_batch_of_two_prompts_times_two_beams(policy, options):
    model = beam_model()
    seqs = [prompt_ids(11, seed=1), prompt_ids(16, seed=2)]
    P = max(s.shape[1] for s in seqs)
    ids = torch.full((2, P), PAD)
    mask = torch.zeros((2, P), dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, P - s.shape[1]:] = s[0]
        mask[b, P - s.shape[1]:] = 1
    got, scores = generate(model, ids, KVEvictCache(model, policy=policy, **options), mask)
    for b, s in enumerate(seqs):
        if options.get("evict") == "prefill":  # the reference runs evict='step'; compare with the batch-1 generate
            want, want_scores = generate(model, s, KVEvictCache(model, policy=policy, **options))
        else:
            want, want_scores = reference_beams(model, s, policy, options)
        assert got[b * BEAMS:(b + 1) * BEAMS].tolist() == want.tolist()
        torch.testing.assert_close(scores[b * BEAMS:(b + 1) * BEAMS], want_scores, rtol=0, atol=1e-5)


def test_expected_attention_beams():
    model = beam_model()
    ids = prompt_ids()
    options = dict(budget=0.5)
    got, scores = generate(model, ids, KVEvictCache(model, policy="expected_attention", **options))
    want, want_scores = reference_beams(model, ids, "expected_attention", options)
    assert got.tolist() == want.tolist()
    torch.testing.assert_close(scores, want_scores, rtol=0, atol=1e-5)

"""The test's reference: SmolLM2 in Hugging Face transformers, greedy, with evicted tokens masked out.

Written apart from the plugin. Block eviction at position granularity is a mask: the token at position j,
computed in a step that had c_j tokens cached, attends to every earlier position except those in the
blocks evicted at that moment. Prompt tokens are computed together (c_j = 0, nothing evicted); a generated
token at position j is computed with c_j = j. The keys keep their own positions (RoPE), as in vLLM.

evicted(c) is kvevict's page-unit rule simulated token by token (not policy.py's closed form): the
sequence holds `live` tokens; after each token, while live - k >= page size, the oldest page that is not
a start page leaves.
"""

import torch


def evicted_pages_sim(c, budget, page, start_pages):
    """Logical pages evicted once c tokens went through kvevict's page-unit rule one at a time."""
    kept = []  # logical pages held, in order
    live = 0
    for pos in range(c):
        if pos % page == 0:
            kept.append(pos // page)
        live += 1
        if live - budget >= page:
            middle = [q for q in kept[start_pages:] if q != pos // page]  # never the page being filled
            victim = middle[0]  # position-only policies: the oldest
            kept.remove(victim)
            live -= page
    every = set(range(-(-c // page)))
    return sorted(every - set(kept))


def masked_greedy(model, prompt_ids, max_tokens, rule=None):
    """Greedy ids of `model` on `prompt_ids` (list of ints) with the mask above. rule = (evicted_at, page):
    evicted_at(c) -> the logical pages evicted with c tokens cached; None: plain causal attention.

    The prompt is one causal forward (its tokens are computed together, nothing evicted); each generated
    token then goes through transformers' own KV cache with a one-row mask over every cached position, the
    evicted pages of its moment set to -inf. O(max_tokens * (P + max_tokens)) attention work."""
    p = len(prompt_ids)
    out = []
    with torch.no_grad():
        res = model(input_ids=torch.tensor([prompt_ids]), position_ids=torch.arange(p)[None], use_cache=True)
        past, nxt = res.past_key_values, int(res.logits[0, -1].argmax())
        for j in range(p, p + max_tokens):  # position j: the token just chosen, computed with j tokens cached
            out.append(nxt)
            if len(out) == max_tokens:
                break
            mask = torch.zeros(1, 1, 1, j + 1, dtype=torch.float32)
            if rule is not None:
                evicted_at, page = rule
                for q in evicted_at(j):
                    mask[..., q * page:(q + 1) * page] = torch.finfo(torch.float32).min
            res = model(input_ids=torch.tensor([[nxt]]), position_ids=torch.tensor([[j]]), attention_mask=mask,
                        past_key_values=past, use_cache=True)
            past, nxt = res.past_key_values, int(res.logits[0, -1].argmax())
    return out

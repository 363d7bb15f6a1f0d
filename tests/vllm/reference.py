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
    """Greedy ids of `model` on `prompt_ids` (list of ints), recomputing the whole sequence each step with
    the mask above. rule(c) -> evicted logical pages, page size; None: plain causal attention."""
    ids = list(prompt_ids)
    p = len(prompt_ids)
    out = []
    with torch.no_grad():
        for _ in range(max_tokens):
            t = len(ids)
            allowed = torch.ones(t, t, dtype=torch.bool).tril()
            if rule is not None:
                evicted_at, page = rule
                for j in range(p, t):
                    for q in evicted_at(j):
                        allowed[j, q * page:(q + 1) * page] = False
            mask = torch.zeros(1, 1, t, t, dtype=torch.float32)
            mask.masked_fill_(~allowed, torch.finfo(torch.float32).min)
            logits = model(input_ids=torch.tensor([ids]), attention_mask=mask,
                           position_ids=torch.arange(t)[None]).logits
            nxt = int(logits[0, -1].argmax())
            ids.append(nxt)
            out.append(nxt)
    return out

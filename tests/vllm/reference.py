"""The tests' reference: the model in Hugging Face transformers, greedy, with evicted tokens masked out.

Written apart from the plugin. Block eviction at position granularity is a mask: the token at position j,
computed in a step that had c_j tokens cached, attends to every earlier position except those in the
blocks evicted at that moment. Prompt tokens are computed together (c_j = 0, nothing evicted); a generated
token at position j is computed with c_j = j. The keys keep their own positions (RoPE), as in vLLM.

evicted(c) is kvevict's page-unit rule simulated token by token (not policy.py's closed form): the
sequence holds `live` tokens; after each token, while live - k >= page size, the oldest page that is not
a start page leaves.

'knorm' (KnormRule) chooses from the keys: transformers' own cached keys (post-RoPE) of the masked run give each
position 1 / (1 + ||k||) per KV head, summed over KV heads and layers, and kvevict's page-unit rule runs over
them from scratch at every step (knorm_pages_sim), or, for a one-layer model, kvevict.PagedCache('knorm',
unit='page') itself is fed those keys and chooses.
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


def knorm_pages_sim(scores, prompt, c, budget, page, start_pages, recent):
    """Logical pages evicted after c tokens under kvevict's page-unit rule with token scores `scores`: at the
    prompt's end (prompt - k) // page lowest-scoring middle pages, then one per token once the held tokens
    reach k + page; the middle is the held pages but the first start_pages and those holding the last
    max(recent, 1) tokens; a page's score is the sum of its tokens'; ties to the older page."""
    evicted = []

    def evict(t, count):
        n = t - len(evicted) * page
        held = [b for b in range(-(-t // page)) if b not in evicted]
        middle = held[start_pages:(n - max(recent, 1)) // page]
        ranked = sorted(middle, key=lambda b: (sum(scores[b * page:(b + 1) * page]), b))
        evicted.extend(ranked[:count])

    if c < prompt:
        return []
    if prompt >= budget + page:
        evict(prompt, (prompt - budget) // page)
    for t in range(prompt + 1, c + 1):
        if t - len(evicted) * page >= budget + page:
            evict(t, 1)
    return sorted(evicted)


class KnormRule:
    """evicted_at(c) for masked_greedy under 'knorm'. masked_greedy calls observe(past) before each
    evicted_at(c): the cache then holds the keys of positions [0, c). paged=True: kvevict.PagedCache chooses
    (a one-layer model only); else knorm_pages_sim over the scores summed over layers."""

    def __init__(self, prompt, budget, page, sinks=4, recent=0, paged=False):
        self.prompt, self.budget, self.page, self.recent = prompt, budget, page, recent
        self.start = -(-sinks // page)
        self.scores = []  # by position
        self.keys = []  # by position: [KV heads, head_dim] of the one layer (paged=True)
        self.paged = paged
        self.cache = None
        self.history = {}  # c -> the pages evicted_at(c) returned

    def observe(self, past):
        layers = [layer.keys[0] for layer in past.layers]  # [KV heads, positions, head_dim] each
        for pos in range(len(self.scores), layers[0].shape[1]):
            k = torch.stack([keys[:, pos, :] for keys in layers]).to(torch.float64)  # [layers, heads, dim]
            self.scores.append(float((1.0 / (1.0 + k.norm(dim=-1))).sum()))
            self.keys.append(layers[0][:, pos, :].contiguous().numpy())

    def __call__(self, c):
        self.history[c] = self._evicted(c)
        return self.history[c]

    def _evicted(self, c):
        if not self.paged:
            return knorm_pages_sim(self.scores, self.prompt, c, self.budget, self.page, self.start, self.recent)
        import kvevict

        if self.cache is None:  # the prompt, at its end
            heads, dim = self.keys[0].shape
            self.pool = kvevict.PagePool(num_pages=4096 // self.page + 8, page_size=self.page, n_kv_heads=heads,
                                         head_dim=dim)
            self.cache = kvevict.PagedCache("knorm", self.pool, n_q_heads=heads, budget=self.budget,
                                            recent=self.recent, unit="page", start_pages=self.start)
            for pos in range(self.prompt):
                self.cache.append(pos, self.keys[pos], self.keys[pos])
            self.cache.prefill()
            self.seen = self.prompt
        for pos in range(self.seen, c):
            self.cache.append(pos, self.keys[pos], self.keys[pos])
            self.cache.decode_step()
        self.seen = max(self.seen, c)
        kept = {q // self.page for q in self.cache.retained_positions(0)}
        return [b for b in range(-(-c // self.page)) if b not in kept]


def masked_greedy(model, prompt_ids, max_tokens, rule=None):
    """Greedy ids of `model` on `prompt_ids` (list of ints) with the mask above. rule = (evicted_at, page):
    evicted_at(c) -> the logical pages evicted with c tokens cached (given the cached keys first through
    evicted_at.observe(past), when it has one: KnormRule); None: plain causal attention.

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
                if hasattr(evicted_at, "observe"):
                    evicted_at.observe(past)
                for q in evicted_at(j):
                    mask[..., q * page:(q + 1) * page] = torch.finfo(torch.float32).min
            res = model(input_ids=torch.tensor([[nxt]]), position_ids=torch.tensor([[j]]), attention_mask=mask,
                        past_key_values=past, use_cache=True)
            past, nxt = res.past_key_values, int(res.logits[0, -1].argmax())
    return out

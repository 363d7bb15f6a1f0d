"""Worker side of the score-based policy 'knorm': key scores, the page-unit selection, and what goes to the scheduler.

A score-based choice cannot be computed by the scheduler from token counts, as 'streaming' and 'window' are
(policy.py): it needs the keys, which only the worker holds. So the worker decides and tells the scheduler:

1. Every attention layer hands the keys it writes into the KV cache to `WorkerScores.add_keys`
   (backend.KVEvictCPUImpl.do_kv_cache_update): [tokens, KV heads, head_dim], post-RoPE, as cached. A token's
   score is kvevict's KeyNormScore (Devoto et al., EMNLP 2024, arXiv 2406.11430, §3; kvpress's KnormPress):
   1 / (1 + ||k||) on each KV head, summed over the KV heads and over the layers of the request's
   full-attention group (one selection per request, as kvevict's PagedCache shares one over KV heads). Under
   tensor parallelism each rank holds some KV heads; their sums are all-reduced over the TP group, so every
   rank holds the same scores and makes the same choice (with fewer KV heads than ranks vLLM replicates
   heads, each then counted once per replica: the same factor for every token, so the same ranking).
2. At the next metadata build (`WorkerScores.fold`) those scores join their requests, and `Selection.advance`
   applies kvevict's page-unit rule (include/kvevict/paged/page_eviction.hpp, PagedCache with unit='page'):
   at the prompt's end, (n - k) // bs middle pages leave at once when n >= k + bs; then, one token at a
   time, one page whenever n >= k + bs. The middle is every held page but the first `start_blocks` and those
   holding the last max(w, 1) tokens; the lowest page score (the sum of its tokens' scores) leaves first,
   ties to the older page. The worker cuts those blocks out of its block table at once (backend.py).
3. `WorkerScores.take_reports` hands the new evictions to the KV connector (connector.py), which carries them
   to the scheduler with the step's output; the scheduler's block manager then frees the blocks. The worker
   stopped reading a block before the scheduler can give it to another request: the report reaches the
   scheduler before it schedules the next step, which is why 'knorm' refuses pipeline parallelism and async
   scheduling (backend._check; vLLM's CPU platform turns async scheduling off anyway). Between the step that
   chose and its report a request may hold one block more than ceil(k / bs) + 1 (the next slot's block is
   allocated before the report frees).

A request is known on the worker by its first block's id: the worker's block table has no request ids, and a
running request's first block (a sink block, never evicted: 'knorm' needs sinks >= 1) belongs to no other
running request. A row with no cached token (a new request, or one preempted and recomputed) starts afresh.
"""

from dataclasses import dataclass, field

import torch


@dataclass
class Selection:
    """One request's page-unit selection (kvevict's PageEvictor rule), as the worker holds it.

    block_scores  {logical block: the sum of its tokens' scores (each summed over KV heads and layers), added
                  in position order} for the blocks held; an evicted block's entry is dropped, so a request
                  holds O(blocks held) floats however long it runs
    num_scored    positions scored so far (0 .. num_scored - 1)
    evicted       logical block indices evicted, in the order they left
    decided       tokens the rule has gone through (0 before the prompt's end)
    """

    block_scores: dict = field(default_factory=dict)
    num_scored: int = 0
    evicted: list = field(default_factory=list)
    decided: int = 0

    def add_scores(self, values, block_size):
        """Appends the scores of positions num_scored, num_scored + 1, ... O(len(values))."""
        for v in values:
            b = self.num_scored // block_size
            self.block_scores[b] = self.block_scores.get(b, 0.0) + v
            self.num_scored += 1

    def advance(self, num_cached, policy):
        """Runs the rule over the tokens cached since the last call (num_cached of them in all, every one
        scored). Returns the blocks evicted now (logical indices, sorted). O(blocks) per token gone through."""
        bs, k = policy.block_size, policy.budget
        new = []
        if self.decided == 0:  # the prompt's end: kvevict's prefill evicts (n - k) // bs pages at once
            self.decided = num_cached
            if num_cached >= k + bs:
                new += self._evict(num_cached, (num_cached - k) // bs, policy)
        while self.decided < num_cached:  # then one decode step per token
            self.decided += 1
            if self.decided - len(self.evicted) * bs >= k + bs:
                new += self._evict(self.decided, 1, policy)
        return sorted(new)

    def _evict(self, spanned, count, policy):
        """Evicts `count` middle blocks of a sequence spanning positions [0, spanned)."""
        bs = policy.block_size
        n = spanned - len(self.evicted) * bs  # tokens held
        gone = set(self.evicted)
        held = [b for b in range(-(-spanned // bs)) if b not in gone]  # logical blocks held, in order
        hi = (n - max(policy.recent, 1)) // bs  # the middle's end, as an index into `held`
        middle = held[policy.start_blocks:hi]
        out = []
        for _ in range(count):  # the lowest page score; ties: the older block
            out.append(min((b for b in middle if b not in out), key=lambda b: (self.block_scores[b], b)))
        for b in out:
            del self.block_scores[b]
        self.evicted += sorted(out)
        return out


@dataclass
class _Pending:
    """The last build's rows, waiting for their keys: (request key, tokens cached, new tokens) by row, the
    buffer of the new tokens' scores [tokens] (row after row, as vLLM lays the batch out), and the layers
    that added to it."""

    rows: list
    buffer: torch.Tensor
    layers: set
    expected: frozenset
    block_size: int


class WorkerScores:
    """This worker process's 'knorm' state: per request a Selection, the keys of the step in flight, and the
    evictions not yet reported to the scheduler. One engine per process, as vLLM's workers run."""

    def __init__(self):
        self.requests = {}  # request key (its first block's id) -> Selection
        self.pending = None
        self.reports = []  # [(request key, [logical blocks evicted])], oldest first

    def add_keys(self, layer_name, key):
        """A layer's keys of the step in flight, [tokens (maybe padded), KV heads, head_dim]: adds each
        token's sum over KV heads of 1 / (1 + ||k||) (computed in float32). Layers outside the pending build's
        group, and calls with no build pending (warm-up), are ignored."""
        p = self.pending
        if p is None or layer_name not in p.expected or layer_name in p.layers:
            return
        n = p.buffer.shape[0]
        k = key[:n].to(torch.float32)
        p.buffer += (1.0 / (1.0 + torch.linalg.vector_norm(k, dim=-1))).sum(dim=-1)
        p.layers.add(layer_name)

    def fold(self, all_reduce=None):
        """Joins the last step's scores to their requests, once every layer of the group added its keys
        (a build whose forward never ran adds nothing). all_reduce(tensor) sums over tensor-parallel ranks."""
        p, self.pending = self.pending, None
        if p is None or p.layers != p.expected:
            return
        buffer = p.buffer
        if all_reduce is not None:
            buffer = all_reduce(buffer)
        values = buffer.tolist()
        start = 0
        for key, cached, q in p.rows:
            sel = self.requests.get(key)
            if sel is not None and sel.num_scored == cached:
                sel.add_scores(values[start:start + q], p.block_size)
            start += q

    def begin(self, rows, num_tokens, layer_names, block_size):
        """Opens the step in flight: rows [(request key, tokens cached, new tokens)], num_tokens of them."""
        self.pending = _Pending(rows=rows, buffer=torch.zeros(num_tokens, dtype=torch.float32), layers=set(),
                                expected=frozenset(layer_names), block_size=block_size)

    def select(self, key, num_cached, prefilling, policy):
        """The request's evicted blocks after `num_cached` tokens (logical indices, sorted); a request with
        no cached token starts afresh. A request whose scores do not cover its cached tokens (its start was
        not seen) evicts nothing more. A request's entry stays until another request starts with the same
        first block (so its evicted blocks are cut as long as it runs, whatever it waits for): at most one
        entry per block of the pool, each O(blocks held) floats."""
        if num_cached == 0:
            self.requests[key] = Selection()
        sel = self.requests.get(key)
        if sel is None:
            return []
        if not prefilling and sel.num_scored == num_cached and num_cached > sel.decided:
            new = sel.advance(num_cached, policy)
            if new:
                self.reports.append((key, new))
        return sorted(sel.evicted)

    def take_reports(self):
        """The evictions since the last call, for the scheduler (connector.py)."""
        out, self.reports = self.reports, []
        return out


WORKER = WorkerScores()

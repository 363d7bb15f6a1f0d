"""Scheduler side: the KV cache spec that carries kvevict's policy and the block manager that frees evicted blocks.

vLLM's KV cache manager keeps, per request, a list of blocks indexed by logical block (block j holds
positions [j*bs, (j+1)*bs)). Before it allocates a request's new slots each step it calls
`remove_skipped_blocks(request_id, processed_computed_tokens)`; sliding-window layers use it to give blocks
behind the window back to the pool. KVEvictManager frees the blocks kvevict's policy evicts (policy.py) the
same way: each becomes vLLM's null block in the request's list (so the list keeps its logical indexing and
positions never change) and goes back to the BlockPool, where another request can take it at once. For a
scored policy ('knorm') the worker chooses the blocks and the KV connector hands them to `free_evicted`
(connector.py) after the step that chose them.
"""

from dataclasses import dataclass, fields

from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager
from vllm.v1.kv_cache_interface import FullAttentionSpec

from .policy import EvictionPolicy


@dataclass(frozen=True, kw_only=True)
class KVEvictAttentionSpec(FullAttentionSpec):
    """A full-attention layer's spec plus kvevict's policy; the scheduler builds KVEvictManager for it.

    kvevict_policy / kvevict_budget / kvevict_sinks / kvevict_recent: EvictionPolicy's fields (block_size is the
    spec's).
    Registered with uniform_type_base_spec=FullAttentionSpec, so every full-attention layer lands in one
    KV cache group, as without the plugin.
    """

    kvevict_policy: str = "full"
    kvevict_budget: int = 0
    kvevict_sinks: int = 0
    kvevict_recent: int = 0

    @property
    def eviction(self) -> EvictionPolicy:
        """The policy these fields and the spec's block size describe (policy.py)."""
        return EvictionPolicy(self.kvevict_policy, self.kvevict_budget, self.kvevict_sinks, self.block_size,
                              self.kvevict_recent)

    @classmethod
    def merge(cls, specs):
        """FullAttentionSpec.merge, keeping the policy (the same in every layer, or AssertionError)."""
        merged = super().merge(specs)
        own = {f.name for f in fields(cls)} - {f.name for f in fields(FullAttentionSpec)}
        values = {name: {getattr(s, name) for s in specs} for name in own}
        assert all(len(v) == 1 for v in values.values()), f"kvevict: layers disagree on the policy: {values}"
        return cls(**{f.name: getattr(merged, f.name) for f in fields(FullAttentionSpec)},
                   **{name: v.pop() for name, v in values.items()})


class KVEvictManager(FullAttentionManager):
    """FullAttentionManager whose remove_skipped_blocks frees the blocks kvevict's policy evicts.

    Each call frees the blocks of [S, S + e(c)) not freed yet, c = the request's processed (committed)
    tokens, once c reaches the prompt's length: O(blocks freed). Prefix caching is refused at start-up
    (backend.py), so no block is shared and every freed block goes back to the pool's free queue.
    """

    def __init__(self, kv_cache_spec, **kwargs):
        super().__init__(kv_cache_spec, **kwargs)
        self.eviction = kv_cache_spec.eviction
        self.blocks_freed = 0  # blocks this manager returned to the pool by eviction (tests, benches)

    def remove_skipped_blocks(self, request_id, processed_computed_tokens, num_prompt_tokens=None):
        """vLLM's hook before a request's slots are allocated (tokens counts, not blocks): frees the newly
        evicted blocks, replacing each by the null block in the request's list. A scored policy frees nothing
        here (free_evicted does, as the worker reports)."""
        if self.eviction.scored:
            return
        if num_prompt_tokens is not None and processed_computed_tokens < num_prompt_tokens:
            return  # the prompt is not all computed yet (chunked prefill): nothing leaves, as on the worker
        evicted = self.eviction.evicted_blocks(processed_computed_tokens)
        blocks = self.req_to_blocks.get(request_id)
        if not evicted or not blocks:
            return
        free_before = self.block_pool.get_num_free_blocks()
        self._remove_blocks_in_range(request_id, evicted.start, min(evicted.stop, len(blocks)))
        self.blocks_freed += self.block_pool.get_num_free_blocks() - free_before

    def free_evicted(self, first_block_id, blocks):
        """Frees the logical `blocks` the worker evicted from the running request whose first block is
        `first_block_id` (its key on the worker, scores.py: a running request's first block is no other
        running request's). The report comes with the output of the step that chose the blocks, before the
        next step is scheduled (pipeline parallelism and async scheduling are refused for a scored policy):
        a request that finished in that step has given its blocks back already, and no other request holds
        its first block yet, so its report frees nothing. Returns the blocks freed. O(running requests +
        blocks)."""
        for request_id, held in self.req_to_blocks.items():
            if held and not held[0].is_null and held[0].block_id == first_block_id:
                break
        else:
            return 0
        freed = [held[j] for j in blocks if j < len(held) and not held[j].is_null]
        for j in blocks:
            if j < len(held):
                held[j] = self._null_block
        if freed:
            self.block_pool.free_blocks(freed)
        self.blocks_freed += len(freed)
        return len(freed)

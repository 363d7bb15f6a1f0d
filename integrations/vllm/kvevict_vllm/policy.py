"""Which KV blocks (pages) a running vLLM request drops: kvevict's page-unit selection, and the plugin's settings.

kvevict's PagedCache with unit='page' (include/kvevict/paged/page_eviction.hpp, docs/paged.md) cuts a sequence only by
whole pages, once it holds k + page_size tokens: the oldest page that is not one of the first `start_pages`
(the attention sinks' pages) leaves the page table. For 'streaming' (StreamingLLM, Xiao et al. 2023, sinks +
recent window) and 'window' (recent window only) that choice depends on positions alone, so vLLM's scheduler
(which frees the blocks) and its worker (which must stop reading them) compute the same blocks from the same
count of cached tokens without exchanging anything.

With `c` tokens cached (positions 0 .. c-1, vLLM block j holding positions [j*bs, (j+1)*bs)), the evicted
blocks are [S, S + e(c)) with S = start blocks and e(c) = max(0, (c - k) // bs): the count after which
kvevict's PagedCache, fed the same tokens one decode step at a time (or a prompt of c tokens in one prefill),
holds c - e*bs <= k + bs - 1 tokens. A request therefore holds at most ceil(k / bs) + 1 blocks once its
prompt is processed (one more block while a new block is being filled).

'knorm' (the key-norm score, kvevict's KeyNormScore) ranks the middle blocks by their keys, which only the
worker holds: the same page-unit rule runs there (scores.py) and the evictions reach the scheduler through
kvevict's KV connector (connector.py). The budget bound above holds for it too.
"""

from dataclasses import dataclass

POLICIES = ("full", "streaming", "window", "knorm")
SCORED = ("knorm",)  # policies whose blocks the worker chooses from the keys (scores.py)


@dataclass(frozen=True)
class EvictionPolicy:
    """One request's eviction settings, the same for every request of an engine.

    policy        'full' (nothing evicted), 'streaming' (sinks + recent), 'window' (recent only) or 'knorm'
                  (sinks, recent, and the middle blocks whose keys have the largest norms leave first).
    budget        k, the tokens a request keeps besides the block being filled (an int; any value from
                  (start blocks + 1) * block_size up, not a multiple of the block size necessarily).
    sinks         attention-sink tokens kept at the start ('streaming' and 'knorm', at least 1 for 'knorm';
                  0 for 'window'); their blocks, ceil(sinks / block_size), are never evicted.
    block_size    vLLM's KV block size (tokens per page), 128 on the CPU backend by default.
    recent        'knorm' only: w, the blocks holding the last max(w, 1) tokens are never evicted (tokens).
    """

    policy: str = "full"
    budget: int = 0
    sinks: int = 0
    block_size: int = 128
    recent: int = 0

    @property
    def scored(self) -> bool:
        """True for a policy whose blocks the worker chooses from the keys (scores.py, connector.py)."""
        return self.policy in SCORED

    @property
    def start_blocks(self) -> int:
        """Blocks at the start that are never evicted: ceil(sinks / block_size)."""
        return -(-self.sinks // self.block_size)

    def num_evicted(self, num_cached: int) -> int:
        """e(c): blocks evicted once `num_cached` tokens are in the cache (every policy but 'full'). O(1)."""
        if self.policy == "full":
            return 0
        return max(0, (num_cached - self.budget) // self.block_size)

    def evicted_blocks(self, num_cached: int) -> range:
        """Logical block indices evicted with `num_cached` tokens cached: [S, S + e(c)), position-only
        policies; a scored policy's blocks are chosen on the worker (ValueError here). O(1)."""
        if self.scored:
            raise ValueError(f"kvevict: policy={self.policy!r} chooses its blocks from the keys, on the worker")
        s = self.start_blocks
        return range(s, s + self.num_evicted(num_cached))

    def max_blocks_held(self) -> int:
        """The most blocks a request holds after its prompt is processed: ceil(k / bs) + 1."""
        return -(-self.budget // self.block_size) + 1


def parse(config, block_size: int) -> EvictionPolicy:
    """The policy of vLLM's `additional_config["kvevict"]` (a dict), checked.

    Keys: policy ('full' | 'streaming' | 'window' | 'knorm'), budget (int tokens, required unless 'full'),
    sinks (int tokens, 'streaming' and 'knorm', default 4; 'knorm' needs >= 1: a request's first block names
    it on the worker), recent (int tokens, 'knorm' only, default 0). ValueError names the key and the value
    for an unknown key or policy, a budget below (start blocks + 1) * block_size (the recent block would go)
    or below start blocks * block_size + max(recent, 1) (kvevict's page-unit floor), sinks with 'window', or
    recent with another policy than 'knorm'.
    """
    if config is None:
        return EvictionPolicy(block_size=block_size)
    if not isinstance(config, dict):
        raise ValueError(f"kvevict: additional_config['kvevict'] must be a dict, got {type(config).__name__}")
    unknown = sorted(set(config) - {"policy", "budget", "sinks", "recent"})
    if unknown:
        raise ValueError(f"kvevict: unknown key {unknown[0]!r} in additional_config['kvevict'] "
                         "(keys: policy, budget, sinks, recent)")
    policy = config.get("policy", "full")
    if policy not in POLICIES:
        raise ValueError(f"kvevict: policy={policy!r} is not one of {', '.join(POLICIES)} "
                         "(the attention-score policies need a q·K side pass the plugin does not have)")
    if policy == "full":
        if "budget" in config or "sinks" in config or "recent" in config:
            raise ValueError("kvevict: policy='full' keeps every token; budget, sinks and recent are not taken")
        return EvictionPolicy(block_size=block_size)
    budget = config.get("budget")
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise ValueError(f"kvevict: budget={budget!r} must be an int (tokens per request)")
    if policy == "window":
        if "sinks" in config:
            raise ValueError("kvevict: policy='window' keeps no sinks; use policy='streaming' for sinks")
        sinks = 0
    else:
        sinks = config.get("sinks", 4)
        if isinstance(sinks, bool) or not isinstance(sinks, int) or sinks < 0:
            raise ValueError(f"kvevict: sinks={sinks!r} must be an int >= 0")
        if policy == "knorm" and sinks < 1:
            raise ValueError(f"kvevict: sinks={sinks} with policy='knorm': it needs sinks >= 1 (the worker knows a "
                             "request by its first block, which must stay)")
    recent = 0
    if "recent" in config:
        if policy != "knorm":
            raise ValueError(f"kvevict: recent is taken by policy='knorm' only, not {policy!r} (its recent "
                             "window is the budget's newest blocks)")
        recent = config["recent"]
        if isinstance(recent, bool) or not isinstance(recent, int) or recent < 0:
            raise ValueError(f"kvevict: recent={recent!r} must be an int >= 0")
    p = EvictionPolicy(policy=policy, budget=budget, sinks=sinks, block_size=block_size, recent=recent)
    floor = max((p.start_blocks + 1) * block_size, p.start_blocks * block_size + max(recent, 1))
    if budget < floor:
        raise ValueError(f"kvevict: budget={budget} is below {floor} tokens: the sinks' "
                         f"{p.start_blocks} block(s) plus one recent block of block_size={block_size}"
                         + (f" (or plus recent={recent})" if recent > block_size else ""))
    return p

"""Worker side: vLLM's CPU attention backend, reading only the blocks kvevict keeps.

vLLM's worker keeps its own copy of each request's block table, which only grows: a block the scheduler
freed is still listed there (and may already hold another request's tokens). KVEvictCPUMetadataBuilder
therefore removes the evicted blocks itself before the kernel runs: with c = seq_len - query_len tokens
cached, the row's blocks [S, S + e(c)) (policy.py, the same blocks the scheduler freed; none while the
request's prompt is not all computed, so a prompt prefilled in chunks attends to all of itself) are cut out
of the block table and seq_len shrinks by e(c) * block_size. The kernel then attends to the kept blocks in
their order, the new tokens last; their keys were stored with their original positions' RoPE, and the slots the
new tokens are written to were computed from positions before the cut, so positions never change.

With 'knorm' the worker chooses the blocks (scores.py): KVEvictCPUImpl.do_kv_cache_update hands each layer's
new keys to scores.WORKER, and the builder folds them into their requests, runs kvevict's page-unit rule and
cuts the chosen blocks the same way; the KV connector (connector.py) reports them to the scheduler.
"""

import dataclasses
import json
import os

import torch
from vllm.config import get_current_vllm_config
from vllm.v1.attention.backends.cpu_attn import (CPUAttentionBackend, CPUAttentionBackendImpl,
                                                 CPUAttentionMetadataBuilder)
from vllm.v1.kv_cache_interface import FullAttentionSpec

from .connector import is_ours
from .manager import KVEvictAttentionSpec
from .policy import parse
from .scores import WORKER


# The engine's config, seen by this process's attention layers while the model is built (vLLM sets it then;
# it is no longer set when the KV cache spec is asked for). One engine per process, as vLLM's workers run.
_ENGINE_CONFIG = None


class KVEvictCPUImpl(CPUAttentionBackendImpl):
    """vLLM's CPU attention, unchanged; its construction checks kvevict's settings against the engine's (so a
    bad setting stops the engine at start) and records the config for customize_spec."""

    def __init__(self, *args, **kwargs):
        global _ENGINE_CONFIG
        super().__init__(*args, **kwargs)
        config = get_current_vllm_config()
        policy = _check(config, block_size=config.cache_config.block_size or 128)
        if policy.policy != "full" and self.alibi_slopes is not None:
            raise ValueError("kvevict: ALiBi models are not served: cutting evicted blocks out shortens the "
                             "query-key distances ALiBi's biases are computed from (RoPE keys keep theirs)")
        _ENGINE_CONFIG = config

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping):
        """vLLM's write of the step's K/V into the cache; with 'knorm' the keys also go to scores.WORKER
        (ignored unless a build of this layer's group is pending)."""
        super().do_kv_cache_update(layer, key, value, kv_cache, slot_mapping)
        if WORKER.pending is not None:
            WORKER.add_keys(layer.layer_name, key)


def _check(config, block_size):
    """The engine's kvevict policy (policy.parse), refused with the reason where the engine cannot serve it."""
    extra = config.additional_config
    if not isinstance(extra, dict):
        extra = {}
    policy = parse(extra.get("kvevict"), block_size)
    if policy.policy != "full":
        if config.cache_config.enable_prefix_caching:
            raise ValueError("kvevict: prefix caching shares blocks between requests, and an evicted shared "
                             "block would leave the others; start vLLM with enable_prefix_caching=False")
        if config.speculative_config is not None:
            raise ValueError("kvevict: speculative decoding is not served (rejected draft tokens would "
                             "move the eviction point back); start vLLM without speculative_config")
        if config.kv_transfer_config is not None and not is_ours(config.kv_transfer_config):
            raise ValueError("kvevict: other KV connectors (kv_transfer_config) are not served: they would read "
                             "or save blocks the plugin has freed")
        if policy.scored and not is_ours(config.kv_transfer_config):
            raise ValueError(f"kvevict: policy={policy.policy!r} is chosen on the worker and reported to the "
                             "scheduler through kvevict's KV connector: start vLLM with "
                             "kv_transfer_config=kvevict_vllm.connector_config()")
        if policy.scored and config.parallel_config.pipeline_parallel_size > 1:
            raise ValueError(f"kvevict: policy={policy.policy!r} with pipeline_parallel_size="
                             f"{config.parallel_config.pipeline_parallel_size}: each stage would score its own "
                             "layers only, and a step's report would reach the scheduler after the next step "
                             "was scheduled; start vLLM without pipeline parallelism")
        if policy.scored and config.scheduler_config.async_scheduling:
            raise ValueError(f"kvevict: policy={policy.policy!r} with async_scheduling: a step's report must "
                             "reach the scheduler before it schedules the next step (a freed first block could "
                             "otherwise name another request); start vLLM with async_scheduling=False")
        max_len = config.model_config.max_model_len
        if policy.budget >= max_len:
            raise ValueError(f"kvevict: budget={policy.budget} is not below max_model_len={max_len}: "
                             "nothing would ever be evicted")
    return policy


def _engine_policy(block_size):
    config = _ENGINE_CONFIG
    if config is None:
        raise RuntimeError("kvevict: no attention layer of this process was built before its KV cache spec")
    return _check(config, block_size)


class KVEvictCPUMetadataBuilder(CPUAttentionMetadataBuilder):
    """CPUAttentionMetadataBuilder that cuts each row's evicted blocks out before building. O(rows * blocks)."""

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.eviction = kv_cache_spec.eviction if isinstance(kv_cache_spec, KVEvictAttentionSpec) else None
        # The layers that write keys (a layer sharing another's KV cache writes none): a 'knorm' step's scores
        # are complete when each of them has added its keys (scores.WorkerScores.fold).
        layers = vllm_config.compilation_config.static_forward_context
        self.key_layers = [n for n in layer_names
                           if getattr(layers.get(n), "kv_sharing_target_layer_name", None) is None]

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
        """vLLM's build on the metadata with the evicted blocks cut: block_table_tensor [rows, max blocks]
        (int block ids) gets each evicting row's kept blocks first, seq_lens [rows] (tokens) shrinks by
        e * block_size; the inputs are not modified (copies, only when a row evicts). O(rows * max blocks)."""
        p = self.eviction
        if p is not None and p.scored:
            common_attn_metadata = self._cut_scored(common_attn_metadata, p)
        elif p is not None and p.policy != "full":
            common_attn_metadata = self._cut(common_attn_metadata, p)
        return super().build(common_prefix_len, common_attn_metadata, fast_build)

    def _cut_scored(self, m, p):
        """'knorm': the last step's key scores join their requests (all-reduced over tensor-parallel ranks),
        each row's evicted blocks are chosen (scores.WORKER.select) and cut out (_apply_cuts), and this step's
        rows wait for their keys. A row is known by its first block id (scores.py). O(rows * max blocks)."""
        WORKER.fold(_tp_all_reduce())
        n = m.num_reqs
        q_lens = (m.query_start_loc_cpu[1:n + 1] - m.query_start_loc_cpu[:n]).to(torch.int64).tolist()
        seq_lens = m.seq_lens[:n].to("cpu", torch.int64).tolist()
        prefilling = m.is_prefilling[:n].to("cpu").tolist() if m.is_prefilling is not None else [False] * n
        first = m.block_table_tensor[:n, 0].to("cpu").tolist()
        rows, cuts = [], {}
        for r in range(n):
            cached = seq_lens[r] - q_lens[r]
            rows.append((int(first[r]), cached, q_lens[r]))
            evicted = WORKER.select(int(first[r]), cached, bool(prefilling[r]), p)
            if evicted:
                cuts[r] = evicted
        WORKER.begin(rows, sum(q_lens), self.key_layers, p.block_size)
        return _apply_cuts(m, seq_lens, cuts, p.block_size)

    @staticmethod
    def _cut(m, p):
        """Position-only policies: each row's blocks [S, S + e(c)) (policy.py), none while prefilling."""
        n = m.num_reqs
        q_lens = (m.query_start_loc_cpu[1:n + 1] - m.query_start_loc_cpu[:n]).to(torch.int64)
        seq_lens = m.seq_lens[:n].to("cpu", torch.int64)
        evicted = torch.clamp((seq_lens - q_lens - p.budget) // p.block_size, min=0)
        if m.is_prefilling is not None:  # nothing leaves before the whole prompt is in (manager.py, the same)
            evicted[m.is_prefilling[:n].to("cpu")] = 0
        s = p.start_blocks
        cuts = {row: list(range(s, s + int(evicted[row]))) for row in torch.nonzero(evicted).flatten().tolist()}
        return _apply_cuts(m, seq_lens.tolist(), cuts, p.block_size)


def _apply_cuts(m, seq_lens, cuts, block_size):
    """The metadata with each row's evicted logical blocks (cuts {row: sorted logical block indices}, every one
    full) cut out of block_table_tensor [rows, max blocks] (the kept blocks first, in order) and seq_lens
    [rows] (tokens) shortened by block_size each; m itself unchanged (copies, only when a row evicts).
    seq_lens: the rows' lengths before the cut, a list. O(rows * max blocks)."""
    if not cuts:
        return m
    table = m.block_table_tensor.clone()
    new_lens = m.seq_lens.clone()
    for r, evicted in cuts.items():
        gone = set(evicted)
        kept = [j for j in range(-(-seq_lens[r] // block_size)) if j not in gone]
        table[r, :len(kept)] = m.block_table_tensor[r, kept]
        new_lens[r] = seq_lens[r] - len(evicted) * block_size
    if os.environ.get("KVEVICT_VLLM_TRACE"):
        _trace(table, new_lens, cuts, m.num_reqs, block_size)
    return dataclasses.replace(m, block_table_tensor=table, seq_lens=new_lens,
                               max_seq_len=int(new_lens[:m.num_reqs].max()))


def _tp_all_reduce():
    """The sum over tensor-parallel ranks (vLLM's TP group), or None with one rank."""
    from vllm.distributed.parallel_state import get_tensor_model_parallel_world_size, get_tp_group

    if get_tensor_model_parallel_world_size() == 1:
        return None
    return get_tp_group().all_reduce


def _trace(table, seq_lens, cuts, n, block_size):
    """KVEVICT_VLLM_TRACE=DIR: appends this cut to DIR/rank<R>.jsonl, one line per build with an eviction:
    [[seq_len after the cut, blocks evicted, kept block ids, logical blocks evicted], ...] by row (tests compare
    tensor-parallel ranks and check the cuts against their references)."""
    from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

    rows = []
    for row in range(n):
        length = int(seq_lens[row])
        evicted = cuts.get(row, [])
        rows.append([length, len(evicted), table[row, :-(-length // block_size)].tolist(), evicted])
    path = os.path.join(os.environ["KVEVICT_VLLM_TRACE"], f"rank{get_tensor_model_parallel_rank()}.jsonl")
    with open(path, "a") as f:
        f.write(json.dumps(rows) + "\n")


class KVEvictCPUBackend(CPUAttentionBackend):
    """vLLM's CPU_ATTN backend with kvevict's eviction: the same kernels, KVEvictAttentionSpec for
    full-attention layers (so the scheduler frees evicted blocks) and a builder that skips them."""

    @classmethod
    def customize_spec(cls, spec):
        """A plain full-attention layer's spec becomes KVEvictAttentionSpec with the engine's policy (so the
        scheduler builds KVEvictManager); other specs are returned as vLLM's backend gives them. ValueError
        for a setting the engine cannot serve (_check)."""
        spec = super().customize_spec(spec)
        if type(spec) is not FullAttentionSpec or spec.sliding_window is not None:
            return spec  # sliding-window and other layers keep vLLM's own management
        p = _engine_policy(spec.block_size)
        fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(FullAttentionSpec)}
        return KVEvictAttentionSpec(**fields, kvevict_policy=p.policy, kvevict_budget=p.budget,
                                    kvevict_sinks=p.sinks, kvevict_recent=p.recent)

    @staticmethod
    def get_impl_cls():
        return KVEvictCPUImpl

    @staticmethod
    def get_builder_cls():
        return KVEvictCPUMetadataBuilder

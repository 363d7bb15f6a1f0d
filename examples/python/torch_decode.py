#!/usr/bin/env python3
"""torch_decode.py - a PyTorch Llama-2 decode loop whose KV cache lives in kvevict caches.

The integration pattern a PyTorch user would copy: one kvevict cache per layer owns that
layer's K/V storage, [n_kv_heads, capacity, head_dim] float32; torch reads it without copying
(torch.from_numpy(cache.k)); each step appends the new token's RoPE'd K/V (cache.append),
attends over the live slots [0, n) and hands the same pre-softmax logits to the cache
(cache.prefill / cache.decode_step), which evicts down to its budget in place.

The model is a llama2.c checkpoint (legacy .bin, e.g. ../shared/models/stories260K), loaded
with NumPy, or a llama-architecture GGUF file (e.g. SmolLM2-135M from scripts/get-models.sh), read
and dequantized to float32 by kvevict.read_gguf; the format comes from the file's magic. The forward pass is llama2.c's run.c (RMSNorm, RoPE on interleaved pairs, GQA,
SwiGLU) in the order tools/llama2/engine_step.cpp runs it, so greedy decoding reproduces
kvevict-generate's ids: with --policy full (no eviction: a window as long as the context)
the 345 reference ids of stories260K from BOS; with the eviction policies those of
`kvevict-generate --temperature 0` with the same options (budget, recent window, sinks, tau,
seed; tests/python/test_torch_decode.py checks all six).

  PYTHONPATH=build/python /usr/bin/python3 examples/python/torch_decode.py \
      --model ../shared/models/stories260K/stories260K.bin --policy keyformer --budget 50% \
      --recent 30% --no-noise --steps 80 --prompt-ids 1,403,407,261
"""
import argparse
import os
import pathlib
import sys

import numpy as np
import torch

import kvevict


def load_llama2c(path):
    """Config dict and float32 weights (torch tensors over NumPy memory) of a llama2.c .bin."""
    raw = np.fromfile(path, dtype=np.float32)
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = np.frombuffer(raw[:7].tobytes(), np.int32).tolist()
    shared, vocab, hd = vocab > 0, abs(vocab), dim // n_heads
    cfg = dict(dim=dim, hidden=hidden, n_layers=n_layers, n_heads=n_heads, n_kv=n_kv, vocab=vocab, seq_len=seq_len)
    at, w = 7, {}
    for name, shape in [("emb", (vocab, dim)), ("rms_att", (n_layers, dim)), ("wq", (n_layers, dim, dim)),
                        ("wk", (n_layers, n_kv * hd, dim)), ("wv", (n_layers, n_kv * hd, dim)),
                        ("wo", (n_layers, dim, dim)), ("rms_ffn", (n_layers, dim)), ("w1", (n_layers, hidden, dim)),
                        ("w2", (n_layers, dim, hidden)), ("w3", (n_layers, hidden, dim)), ("rms_final", (dim,)),
                        ("freq_cis", (seq_len, hd))] + ([] if shared else [("cls", (vocab, dim))]):
        size = int(np.prod(shape))
        w[name] = torch.from_numpy(raw[at:at + size].reshape(shape))
        at += size
    if at != raw.size:
        raise ValueError(f"{path}: the header implies {at} floats, the file has {raw.size}")
    w.setdefault("cls", w["emb"])
    return cfg, w


def load_gguf(path):
    """Config dict and float32 weights of a llama-architecture GGUF file (kvevict.read_gguf), named as
    load_llama2c names them; theta (rope.freq_base), eps (RMS epsilon) and eos come from the file."""
    g = kvevict.read_gguf(path)
    md, t = g["metadata"], {k: torch.from_numpy(v) for k, v in g["tensors"].items()}
    if md.get("general.architecture") != "llama":
        raise ValueError(f"{path}: general.architecture is {md.get('general.architecture')!r}, not 'llama'")
    n_layers, n_heads = md["llama.block_count"], md["llama.attention.head_count"]
    cfg = dict(dim=md["llama.embedding_length"], hidden=md["llama.feed_forward_length"], n_layers=n_layers,
               n_heads=n_heads, n_kv=md.get("llama.attention.head_count_kv", n_heads),
               vocab=t["token_embd.weight"].shape[0], seq_len=md["llama.context_length"],
               theta=float(md.get("llama.rope.freq_base", 10000.0)),
               eps=float(md["llama.attention.layer_norm_rms_epsilon"]), eos=md.get("tokenizer.ggml.eos_token_id", -1))

    def stack(name):
        return torch.stack([t[f"blk.{l}.{name}.weight"] for l in range(n_layers)])
    w = dict(emb=t["token_embd.weight"], rms_att=stack("attn_norm"), wq=stack("attn_q"), wk=stack("attn_k"),
             wv=stack("attn_v"), wo=stack("attn_output"), rms_ffn=stack("ffn_norm"), w1=stack("ffn_gate"),
             w2=stack("ffn_down"), w3=stack("ffn_up"), rms_final=t["output_norm.weight"])
    w["cls"] = t.get("output.weight", w["emb"])
    return cfg, w


def load_model(path):
    """load_gguf for a file that starts with the GGUF magic, else load_llama2c."""
    with open(path, "rb") as f:
        return load_gguf(path) if f.read(4) == b"GGUF" else load_llama2c(path)


def rmsnorm(x, weight, eps=1e-5):
    return weight * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps))


class Llama2:
    """Llama-2 forward pass over per-layer kvevict caches (`make_cache(layer)` builds one)."""

    def __init__(self, cfg, w, make_cache):
        self.cfg, self.w = cfg, w
        self.hd = cfg["dim"] // cfg["n_heads"]
        self.g = cfg["n_heads"] // cfg["n_kv"]
        self.scale = float(np.float32(1.0) / np.sqrt(np.float32(self.hd)))  # 1 / sqrt(hd) in float32, as C++
        theta = np.float32(cfg.get("theta", 10000.0))
        self.eps = float(np.float32(cfg.get("eps", 1e-5)))
        freq = 1.0 / np.power(theta, np.arange(0, self.hd, 2, dtype=np.float32) / np.float32(self.hd))
        angle = np.arange(cfg["seq_len"], dtype=np.float32)[:, None] * freq[None, :]
        self.cos, self.sin = torch.from_numpy(np.cos(angle)), torch.from_numpy(np.sin(angle))
        self.caches = [make_cache(layer) for layer in range(cfg["n_layers"])]
        # The caches' storage as torch tensors: no copy, evictions show through.
        self.K = [torch.from_numpy(c.k) for c in self.caches]
        self.V = [torch.from_numpy(c.v) for c in self.caches]

    def rope(self, x, pos):  # x [T, heads, hd], pos [T]: rotate interleaved pairs (2i, 2i+1)
        cos, sin = self.cos[pos][:, None, :], self.sin[pos][:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)

    def forward(self, tokens, start):
        """Runs `tokens` at positions start.. (all of the prompt at once when start == 0, then one
        token per call) and returns the next-token logits of the last one."""
        c, w, hd, g = self.cfg, self.w, self.hd, self.g
        T, H, nkv = len(tokens), c["n_heads"], c["n_kv"]
        pos = torch.arange(start, start + T)
        x = w["emb"][torch.tensor(tokens)]
        for l, cache in enumerate(self.caches):
            xb = rmsnorm(x, w["rms_att"][l], self.eps)
            q = self.rope((xb @ w["wq"][l].T).view(T, H, hd), pos)
            k = self.rope((xb @ w["wk"][l].T).view(T, nkv, hd), pos)
            v = (xb @ w["wv"][l].T).view(T, nkv, hd)
            for t in range(T):  # K/V join the cache once, RoPE'd at their position
                cache.append(start + t, k[t].contiguous().numpy(), v[t].contiguous().numpy())
            n = cache.lengths[0]
            K, V = self.K[l][:, :n], self.V[l][:, :n]  # [n_kv, n, hd], slot order
            # logits[h, t, s] = q_t . k_s / sqrt(hd), query head h reading KV head h // g
            logits = (q.view(T, nkv, g, hd).permute(1, 2, 0, 3) @ K.transpose(1, 2)[:, None]) * self.scale
            if start == 0:  # prefill: causal mask over the prompt (the cache reads only s <= t)
                logits = logits.masked_fill(torch.ones(T, n, dtype=torch.bool).triu(1), float("-inf"))
            att = torch.softmax(logits, dim=-1) @ V[:, None]  # [n_kv, g, T, hd]
            x = x + att.permute(2, 0, 1, 3).reshape(T, c["dim"]) @ w["wo"][l].T
            scores = logits.reshape(H, T, n).numpy()
            if start == 0:
                cache.prefill(scores)  # evicts each KV head to min(k, P) tokens
            else:
                cache.decode_step(scores[:, 0, :])  # evicts at most one slot per KV head
            xb = rmsnorm(x, w["rms_ffn"][l], self.eps)
            x = x + (torch.nn.functional.silu(xb @ w["w1"][l].T) * (xb @ w["w3"][l].T)) @ w["w2"][l].T
        return (rmsnorm(x[-1], w["rms_final"], self.eps) @ w["cls"].T).numpy()


def generate(cfg, w, prompt, steps, policy, budget="50%", recent=None, sinks=4, tau_init=1.0, tau_end=2.0,
             noise=True, seed=42):
    """Greedy ids after `prompt`, as kvevict-generate --temperature 0 produces them."""
    steps = min(steps, cfg["seq_len"] - len(prompt))
    if recent is None:  # TOVA keeps none by default; streaming and window keep the last k - sinks
        recent = 0 if policy in ("tova", "streaming", "window") else "30%"
    # One slot beyond the context, as the C++ engine: a decode step appends before it evicts.
    common = dict(n_q_heads=cfg["n_heads"], n_kv_heads=cfg["n_kv"], capacity=cfg["seq_len"] + 1,
                  head_dim=cfg["dim"] // cfg["n_heads"])
    if policy == "full":  # nothing is ever evicted: a window as long as the context
        opts = dict(budget=cfg["seq_len"])
        policy = "window"
    else:
        # Strings go as typed: kvevict takes the tools' grammar ('64', '0.5', '50%').
        opts = dict(budget=budget, recent=recent)
        if policy == "streaming":
            opts["sinks"] = sinks
        if policy == "keyformer":
            opts.update(tau_init=tau_init, tau_end=tau_end, horizon=max(steps, 1), noise=noise)

    def make_cache(layer):  # per-layer seeds as kvevict-generate draws them (only Keyformer draws noise)
        seeded = dict(seed=(seed + 0x9E3779B97F4A7C15 * layer) % 2**64) if policy == "keyformer" else {}
        return kvevict.Cache(policy, **seeded, **common, **opts)

    model = Llama2(cfg, w, make_cache)
    with torch.no_grad():
        logits = model.forward(prompt, 0)
        out = []
        while len(out) < steps:
            nxt = int(np.argmax(logits))  # the first maximum, as std::max_element
            if nxt == cfg.get("eos", 1):  # llama2.c: BOS ends the story; GGUF: the vocabulary's EOS
                break
            out.append(nxt)
            if len(out) < steps:
                logits = model.forward([nxt], len(prompt) + len(out) - 1)
    return out, model


def default_model():
    """Where the tools look: $KVEVICT_MODEL_DIR, else $KVEVICT_SHARED_DIR/models/stories260K, else
    ../shared/models/stories260K (relative to the working directory)."""
    shared = os.environ.get("KVEVICT_SHARED_DIR") or "../shared"
    return os.environ.get("KVEVICT_MODEL_DIR") or os.path.join(shared, "models", "stories260K")


def find_checkpoint(path, flag):
    """The model file of `path`: a file, or a folder holding exactly one llama2.c .bin that is not tok*.bin
    (or, with none, exactly one .gguf), as the tools choose."""
    p = pathlib.Path(path)
    if p.is_dir():
        found = sorted(f for f in p.glob("*.bin") if not f.name.startswith("tok")) or sorted(p.glob("*.gguf"))
        if len(found) != 1:
            raise FileNotFoundError(f"{flag}: the folder '{p}' holds {len(found)} model files "
                                    f"({', '.join(f.name for f in found) or 'none'}); expected exactly one")
        return str(found[0])
    if not p.is_file():
        raise FileNotFoundError(f"{flag}: '{p}' does not exist; pass --model FILE.bin, or set KVEVICT_MODEL_DIR or "
                                "KVEVICT_SHARED_DIR (stories260K: Hugging Face karpathy/tinyllamas)")
    return str(p)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None,
                    help="llama2.c .bin checkpoint or llama-architecture GGUF file (the format from its magic), or a "
                         "folder holding exactly one (default: $KVEVICT_MODEL_DIR, else "
                         "$KVEVICT_SHARED_DIR/models/stories260K, else ../shared/models/stories260K)")
    ap.add_argument("--prompt-ids", default="1", help="prompt token ids, comma-separated (BOS = 1 included)")
    ap.add_argument("--steps", type=int, default=256, help="tokens to generate at most")
    ap.add_argument("--policy", default="full",
                    choices=["full", "keyformer", "h2o", "streaming", "window", "tova", "snapkv"])
    ap.add_argument("--budget", default="50%", help="tokens (64), or a fraction (0.5) or percent (50%%) of the prompt")
    ap.add_argument("--recent", default=None,
                    help="tokens (8), or a fraction (0.3) or percent (30%%) of the budget; default 30%%; 0 for tova "
                         "unless given (1: kvpress's TOVAPress); 0 for streaming and window")
    ap.add_argument("--sinks", type=int, default=4, help="StreamingLLM attention sinks")
    ap.add_argument("--tau-init", type=float, default=1.0, help="Keyformer temperature at prefill")
    ap.add_argument("--tau-end", type=float, default=2.0, help="Keyformer temperature after the last step")
    ap.add_argument("--no-noise", action="store_true", help="Keyformer without Gumbel noise")
    ap.add_argument("--seed", type=int, default=42, help="seed of Keyformer's Gumbel noise (layer l: seed + l * phi)")
    a = ap.parse_args(argv)
    try:
        prompt = [int(t) for t in a.prompt_ids.split(",")]
    except ValueError:
        ap.error(f"--prompt-ids: expected comma-separated integers such as 1,403,261, got '{a.prompt_ids}'")
    try:
        model_path = find_checkpoint(a.model, "--model") if a.model else find_checkpoint(
            default_model(), "$KVEVICT_MODEL_DIR" if os.environ.get("KVEVICT_MODEL_DIR") else "--model (default)")
    except FileNotFoundError as e:
        print(f"torch_decode.py: {e}", file=sys.stderr)
        sys.exit(2)
    cfg, w = load_model(model_path)
    try:
        ids, model = generate(cfg, w, prompt, a.steps, a.policy, a.budget, a.recent, a.sinks, a.tau_init, a.tau_end,
                              not a.no_noise, a.seed)
    except (ValueError, OverflowError) as e:  # the caches' messages name the bad value
        sys.exit(f"torch_decode.py: {e}")
    print("\n".join(map(str, ids)))
    print(f"[{a.policy}] prompt {len(prompt)} tok, generated {len(ids)} tok | retained per layer: "
          + " ".join(str(c.lengths[0]) for c in model.caches), file=sys.stderr)


if __name__ == "__main__":
    main()

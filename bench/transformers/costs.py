#!/usr/bin/env python3
"""What KVEvictCache costs in model.generate: prompt forward time, decode tokens/s and peak resident memory against
DynamicCache and kvpress, per prompt length and batch, each configuration in a fresh process.

SmolLM2-135M-Instruct (the project's GGUF through transformers' GGUF loader, float32, sdpa; saved once as
safetensors under --work so that every child loads it in about a second). The prompts are the start of Python's
HOWTOs (../shared/data/python-howto, concatenated, no BOS): batch 1 takes P tokens; batch 2 takes P tokens and
3P/4 tokens of another document, left-padded as transformers pads for generation. Each child runs one
configuration: greedy generate of --new tokens, a streamer timestamping every step. Reported: the prompt's
forward (time to the first token), decode tokens/s over the other steps (the batch's tokens per second), and the
peak resident set (VmHWM) and its rise over the loaded model. kvpress's presses compress the prompt during
generate's prefill (batch 1 only: they do not handle padding). With --repeats N every variant runs N times, the
variants interleaved round by round, and each column is the median of its N values (the ratios: of the medians).

  PY=$(bash scripts/get-hf-venv.sh); $PY bench/transformers/costs.py --prompts 2048,4096,8192 --batches 1,2
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("KVEVICT_SHARED_DIR", os.path.join(ROOT, "..", "shared"))
DOCS = ["howto-logging.rst", "howto-regex.rst", "howto-descriptor.rst", "howto-functional.rst", "howto-unicode.rst",
        "howto-sockets.rst", "howto-urllib2.rst", "howto-argparse.rst"]

VARIANTS = {  # name: (kind, policy, KV kept)
    "DynamicCache": ("dynamic", None, 1.0),
    "KVEvictCache h2o 50%": ("kvevict", "h2o", 0.5),
    "KVEvictCache h2o 20%": ("kvevict", "h2o", 0.2),
    "KVEvictCache keyformer 20%": ("kvevict", "keyformer", 0.2),
    "kvpress SnapKV 50%": ("kvpress", "SnapKVPress", 0.5),
    "kvpress SnapKV 20%": ("kvpress", "SnapKVPress", 0.2),
}


def _positive(text):
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {n})")
    return n


def vm(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024  # kB -> bytes
    raise RuntimeError(key)


def prompts(tok, P, batch):
    import torch
    text = ""
    for name in DOCS:
        with open(os.path.join(SHARED, "data/python-howto", name), encoding="utf-8") as f:
            text += f.read() + "\n"
    ids = tok(text, add_special_tokens=False, return_tensors="pt").input_ids[0]
    if ids.numel() < P + 3 * P // 4:
        sys.exit(f"costs.py: the HOWTOs hold {ids.numel()} tokens, fewer than {P + 3 * P // 4}")
    seqs = [ids[:P]] + ([ids[P:P + 3 * P // 4]] if batch == 2 else [])
    if batch not in (1, 2):
        sys.exit("costs.py: --batches takes 1 and 2")
    out = torch.full((batch, P), tok.pad_token_id or 0)
    mask = torch.zeros((batch, P), dtype=torch.long)
    for b, s in enumerate(seqs):
        out[b, P - s.numel():] = s
        mask[b, P - s.numel():] = 1
    return out, mask


def child(args):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from speed import Clock  # the streamer that timestamps each token
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
    torch.set_num_threads(args.threads)
    transformers.utils.logging.set_verbosity_error()
    model = AutoModelForCausalLM.from_pretrained(args.saved, dtype=torch.float32, attn_implementation="sdpa").eval()
    tok = AutoTokenizer.from_pretrained(args.saved)
    ids, mask = prompts(tok, args.prompt, args.batch)
    kind, policy, kept = VARIANTS[args.variant]
    base = vm("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # VmHWM from here on
        f.write("5")
    clock = Clock()
    gen = dict(attention_mask=mask, max_new_tokens=args.new, min_new_tokens=args.new, do_sample=False,
               pad_token_id=tok.pad_token_id or 0, streamer=clock)
    with torch.no_grad():
        if kind == "dynamic":
            model.generate(ids, past_key_values=DynamicCache(config=model.config), **gen)
        elif kind == "kvevict":
            from kvevict.transformers import KVEvictCache
            opts = dict(horizon=args.new) if policy == "keyformer" else {}
            model.generate(ids, past_key_values=KVEvictCache(model, policy=policy, budget=kept, **opts), **gen)
        else:
            import kvpress
            press = getattr(kvpress, policy)(compression_ratio=1.0 - kept)
            with press(model):
                model.generate(ids, past_key_values=DynamicCache(config=model.config), **gen)
    t = clock.times  # [prompt put, token 1, ..., token new]
    json.dump(dict(prefill_s=t[1] - t[0], decode_tok_s=args.batch * (len(t) - 2) / (t[-1] - t[1]),
                   peak=vm("VmHWM"), base=base), sys.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="SmolLM2 .gguf (default: bash scripts/get-models.sh)")
    ap.add_argument("--work", default="/tmp/kvevict-costs", help="where the safetensors copy goes")
    ap.add_argument("--prompts", default="2048,4096,8192")
    ap.add_argument("--batches", default="1,2")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=_positive, default=1,
                    help="rounds per prompt and batch, the variants interleaved in each; the medians are reported")
    ap.add_argument("--out", help="write the table here too (Markdown)")
    # one configuration (the child)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--saved", help=argparse.SUPPRESS)
    ap.add_argument("--prompt", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        return child(args)
    variants = args.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            sys.exit(f"costs.py: --variants: unknown '{v}' (expected {', '.join(VARIANTS)})")
    saved = os.path.join(args.work, "smollm2-135m")
    if not os.path.exists(os.path.join(saved, "config.json")):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        path = args.model or subprocess.run(["bash", os.path.join(ROOT, "scripts/get-models.sh")], check=True,
                                            capture_output=True, text=True).stdout.strip()
        folder, gguf = os.path.split(path)
        AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=torch.float32).save_pretrained(saved)
        AutoTokenizer.from_pretrained(folder, gguf_file=gguf).save_pretrained(saved)
    import kvevict
    import torch
    import transformers
    lines = [f"SmolLM2-135M-Instruct (float32, sdpa), {args.new} generated tokens, {args.threads} torch threads, "
             f"median of {args.repeats} interleaved round(s); "
             f"torch {torch.__version__}, transformers {transformers.__version__}, kvevict {kvevict.__version__}; "
             "each row a fresh process", "",
             "| P | batch | cache | prompt forward (s) | × Dynamic | decode (tok/s) | × Dynamic | peak RSS (GB) | "
             "rise over the model (GB) | × Dynamic |", "|---|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for P in [int(p) for p in args.prompts.split(",")]:
        for batch in [int(b) for b in args.batches.split(",")]:
            runs = {v: [] for v in variants if VARIANTS[v][0] != "kvpress" or batch == 1}
            failed = {}
            for _ in range(args.repeats):  # interleaved: a slow spell of the machine hits every variant alike
                for v in runs:
                    if v in failed:
                        continue
                    cmd = [sys.executable, os.path.abspath(__file__), "--one", "--saved", saved, "--prompt", str(P),
                           "--batch", str(batch), "--variant", v, "--new", str(args.new), "--threads",
                           str(args.threads)]
                    r = subprocess.run(cmd, capture_output=True, text=True)
                    if r.returncode != 0:
                        failed[v] = r.stderr.strip().splitlines()[-1][:120]
                    else:
                        runs[v].append(json.loads(r.stdout))
            med = {v: {k: statistics.median(m[k] for m in ms) for k in ("prefill_s", "decode_tok_s", "peak")}
                   for v, ms in runs.items() if ms and v not in failed}
            for v in med:  # the rise over the model: per run, then its median
                med[v]["rise"] = statistics.median(m["peak"] - m["base"] for m in runs[v])
            ref = med.get("DynamicCache")  # None when it failed in some round: no ratios then
            for v in runs:
                if v in failed:
                    line = f"| {P} | {batch} | {v} | failed: {failed[v]} |||||||"
                else:
                    m = med[v]
                    rise = m["rise"]
                    x = (lambda a, b: f"{a / b:.2f}") if ref else (lambda a, b: "")
                    line = (f"| {P} | {batch} | {v} | {m['prefill_s']:.2f} | {x(m['prefill_s'], ref['prefill_s']) if ref else ''} | "
                            f"{m['decode_tok_s']:.2f} | {x(m['decode_tok_s'], ref['decode_tok_s']) if ref else ''} | "
                            f"{m['peak'] / 1e9:.2f} | {rise / 1e9:.2f} | "
                            f"{x(rise, ref['rise']) if ref else ''} |")
                lines.append(line)
                print(line, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

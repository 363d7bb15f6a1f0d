"""Fixtures of the kvevict.transformers tests (run by scripts/transformers-test.sh, in the venv of
scripts/get-hf-venv.sh): tiny random Llama / Mistral / Qwen2 / Qwen3 models (seeded, float32, CPU), and
SmolLM2-135M-Instruct through transformers' GGUF loader ($KVEVICT_SMOLLM2_GGUF, as .ci/run exports it, else scripts/get-models.sh)."""
import os
import pathlib
import subprocess

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
import transformers

ROOT = pathlib.Path(__file__).resolve().parents[2]
transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
torch.set_num_threads(min(2, os.cpu_count() or 1))

TINY = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, rope_theta=10000.0, tie_word_embeddings=False)
ARCHS = ("llama", "mistral", "qwen2", "qwen3")


def tiny_model(arch, attn="sdpa", seed=0, **extra):
    torch.manual_seed(seed)
    kw = dict(TINY, **extra)
    if arch == "llama":
        cfg = transformers.LlamaConfig(**kw)
    elif arch == "mistral":
        cfg = transformers.MistralConfig(sliding_window=None, **kw)
    elif arch == "qwen2":
        cfg = transformers.Qwen2Config(use_sliding_window=False, **kw)
    elif arch == "qwen3":
        cfg = transformers.Qwen3Config(head_dim=16, use_sliding_window=False, **kw)
    else:
        raise ValueError(arch)
    cfg._attn_implementation = attn
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn).eval()
    return model


@pytest.fixture(scope="session", params=ARCHS)
def arch_model(request):
    return tiny_model(request.param)


@pytest.fixture(scope="session")
def llama():
    return tiny_model("llama")


@pytest.fixture(scope="session")
def smollm2_path():
    path = os.environ.get("KVEVICT_SMOLLM2_GGUF")
    if not path:
        path = subprocess.run(["bash", str(ROOT / "scripts/get-models.sh")], check=True, capture_output=True,
                              text=True).stdout.strip()
    return path


@pytest.fixture(scope="session")
def smollm2(smollm2_path):
    d, f = os.path.split(smollm2_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    return model


def records_trace(records, P, T, n_q_heads, q_per_kv):
    """The logits a KVEvictLayer recorded (record=True: a prefill, then T decode steps) as kvevict.replay's trace
    [n_q_heads, P + T, P + T]: the prompt's rows, then each step's row over the positions held before it (0
    elsewhere; a policy that scores from positions or keys records none)."""
    import numpy as np
    N = P + T
    x = np.zeros((n_q_heads, N, N), np.float32)
    if records[0][1] is not None:
        x[:, :P, :P] = records[0][1]
    for t, (_, logits, before, _) in enumerate(records[1:], start=P):
        if logits is not None:
            for h in range(n_q_heads):
                held = before[h // q_per_kv]  # head-adaptive budgets: the row's tail past it is -inf
                x[h, t, held] = logits[h, :len(held)]
    return x


def greedy_loop(model, ids, cache, steps, after_step=None, position_ids=None):
    """Greedy, by hand: the prompt in one forward, then one token per forward (no position_ids unless given:
    the cache numbers them). Returns (generated ids, the logits of every forward's last position)."""
    out, logits = [], []
    with torch.no_grad():
        x = model(ids, past_key_values=cache).logits[0, -1]
        for s in range(steps):
            logits.append(x)
            out.append(int(x.argmax()))
            if s + 1 == steps:
                break
            kw = {} if position_ids is None else dict(position_ids=position_ids(ids.shape[1] + s))
            x = model(torch.tensor([[out[-1]]]), past_key_values=cache, **kw).logits[0, -1]
            if after_step is not None:
                after_step(s)
    return out, torch.stack(logits)

"""kvevict.read_gguf (the C++ GGUF reader and dequantizers in the module) and examples/python/torch_decode.py
on GGUF models: stories260K.gguf holds exactly stories260K.bin's weights and decodes to llama2.c's 345 ids;
SmolLM2-135M's greedy ids from the oracle's prompt are transformers' (tests/llama2/reference/smollm2)."""
import importlib.util
import json
import os
import subprocess

import numpy as np
import pytest

import kvevict
from conftest import ROOT


def test_read_gguf_of_stories260k(shared_dir):
    g = kvevict.read_gguf(str(shared_dir / "models/stories260K/stories260K.gguf"))
    md, t = g["metadata"], g["tensors"]
    assert md["general.architecture"] == "llama"
    assert md["llama.block_count"] == 5 and md["llama.attention.head_count_kv"] == 4
    assert md["tokenizer.ggml.model"] == "llama" and len(md["tokenizer.ggml.tokens"]) == 512
    assert md["tokenizer.ggml.padding_token_id"] == 2**32 - 1
    assert len(t) == 48 and set(g["types"].values()) == {"f32"}
    assert t["token_embd.weight"].shape == (512, 64) and t["token_embd.weight"].dtype == np.float32
    assert t["blk.0.attn_k.weight"].shape == (32, 64)
    assert t["blk.4.ffn_down.weight"].shape == (64, 172)


def test_read_gguf_rejects_a_truncated_file_naming_it(shared_dir, tmp_path):
    data = (shared_dir / "models/stories260K/stories260K.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:100000])
    with pytest.raises(ValueError,
                       match=r"cut\.gguf': truncated: tensor 'token_embd.weight' \(131072 bytes at data offset 0\) ends"):
        kvevict.read_gguf(str(cut))
    with pytest.raises(ValueError, match="not a GGUF file"):
        kvevict.read_gguf(str(ROOT / "README.md"))


@pytest.fixture(scope="module")
def torch_decode():
    """The PyTorch example (examples/python/torch_decode.py); only its tests need torch."""
    pytest.importorskip("torch", reason="PyTorch is not installed (Debian python3-torch); the example needs it")
    spec = importlib.util.spec_from_file_location("torch_decode", ROOT / "examples/python/torch_decode.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stories260k_gguf_equals_its_bin_and_reproduces_llama2c(shared_dir, torch_decode):
    import torch
    cfg_b, wb = torch_decode.load_llama2c(str(shared_dir / "models/stories260K/stories260K.bin"))
    cfg_g, wg = torch_decode.load_model(str(shared_dir / "models/stories260K/stories260K.gguf"))
    assert (cfg_b["seq_len"], cfg_g["seq_len"]) == (512, 2048)  # the GGUF export says 2048 positions
    for key in ("dim", "hidden", "n_layers", "n_heads", "n_kv", "vocab"):
        assert cfg_b[key] == cfg_g[key], key
    for name in ("emb", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3", "rms_final"):
        assert torch.equal(wb[name], wg[name]), name
    reference = [int(x) for x in (shared_dir / "reference/stories260K_greedy_from_bos.ids").read_text().split()]
    ids, _ = torch_decode.generate(cfg_g, wg, [1], 400, "full")
    assert ids[:345] == reference


def smollm2_path():
    env = os.environ.get("KVEVICT_SMOLLM2_GGUF")
    if env:
        return env
    run = subprocess.run(["bash", str(ROOT / "scripts/get-models.sh")], capture_output=True, text=True)
    if run.returncode != 0 or not os.path.isfile(run.stdout.strip()):
        if os.environ.get("KVEVICT_REQUIRE_MODELS") == "1":
            pytest.fail(f"scripts/get-models.sh failed: {run.stderr}")
        pytest.skip("SmolLM2 GGUF not available (scripts/get-models.sh failed)")
    return run.stdout.strip()


def test_smollm2_greedy_ids_are_transformers(torch_decode):
    ref = json.loads((ROOT / "tests/llama2/reference/smollm2/greedy_128.json").read_text())
    cfg, w = torch_decode.load_model(smollm2_path())
    assert (cfg["n_layers"], cfg["n_heads"], cfg["n_kv"], cfg["theta"], cfg["eos"]) == (30, 9, 3, 100000.0, 2)
    ids, _ = torch_decode.generate(cfg, w, ref["prompt_ids"], 32, "full")
    assert ids == ref["greedy_ids"][:32]

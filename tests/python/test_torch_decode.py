"""examples/python/torch_decode.py reproduces the C++ engine's greedy ids: with the full cache the
345 reference ids of stories260K from BOS (llama2.c), with keyformer (no noise, and with noise),
h2o, streaming, window and tova at 50% budget the ids of kvevict-generate on the same prompt."""
import importlib.util
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian python3-torch); the example needs it")

from conftest import ROOT  # noqa: E402

spec = importlib.util.spec_from_file_location("torch_decode", ROOT / "examples/python/torch_decode.py")
torch_decode = importlib.util.module_from_spec(spec)
spec.loader.exec_module(torch_decode)

STEPS = 200


@pytest.fixture(scope="module")
def model(shared_dir):
    path = shared_dir / "models/stories260K/stories260K.bin"
    cfg, w = torch_decode.load_llama2c(str(path))
    reference = [int(line) for line in (shared_dir / "reference/stories260K_greedy_from_bos.ids").read_text().split()]
    return str(path), cfg, w, reference


def test_full_cache_reproduces_llama2c(model):
    _, cfg, w, reference = model
    assert len(reference) == 345
    ids, engine = torch_decode.generate(cfg, w, [1], cfg["seq_len"] - 1, "full")
    assert ids == reference
    assert engine.caches[0].lengths == [346] * cfg["n_kv"]  # nothing evicted


# (policy, recent, kvevict-generate flags beyond the common ones, example options)
POLICIES = [
    ("keyformer", "30%", ["--no-noise"], dict(noise=False)),
    ("keyformer", "30%", [], dict(noise=True)),
    ("h2o", "30%", [], {}),
    ("streaming", "0", [], {}),  # streaming and window keep the most recent k - sinks: no separate window
    ("window", "0", [], {}),
    ("tova", "0", [], {}),
]


@pytest.mark.parametrize("policy, recent, flags, opts", POLICIES,
                         ids=["keyformer-no-noise", "keyformer-noise", "h2o", "streaming", "window", "tova"])
def test_policies_match_kvevict_generate(model, generate_bin, policy, recent, flags, opts):
    path, cfg, w, reference = model
    prompt = [1] + reference[:40]  # a real 41-token story opening: k = 20 at 50%
    cmd = [generate_bin, "--model", path, "--tokenizer", "/nonexistent.model", "--prompt-ids",
           ",".join(map(str, prompt)), "--print-ids", "--temperature", "0", "--steps", str(STEPS), "--policy", policy,
           "--budget", "50%", "--recent", recent, "--sinks", "4", "--tau-init", "1", "--tau-end", "2", "--seed", "42"]
    want = [int(t) for t in subprocess.run(cmd + flags, check=True, capture_output=True, text=True).stdout.split()]
    got, engine = torch_decode.generate(cfg, w, prompt, STEPS, policy, budget="50%", recent=recent, sinks=4,
                                        tau_init=1.0, tau_end=2.0, seed=42, **opts)
    assert got == want
    assert len(got) > 50
    assert all(c.lengths == [20] * cfg["n_kv"] for c in engine.caches)  # evicted to k = floor(0.5 * 41)


def test_command_line(model, build_dir):
    path, _, _, reference = model
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(build_dir / "python"),
                                                                      os.environ.get("PYTHONPATH")])))
    script = str(ROOT / "examples/python/torch_decode.py")
    run = subprocess.run([sys.executable, script, "--model", path, "--prompt-ids", "1", "--steps", "12"],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    assert [int(t) for t in run.stdout.split()] == reference[:12]
    assert "[full] prompt 1 tok, generated 12 tok" in run.stderr
    bad = subprocess.run([sys.executable, script, "--model", path, "--prompt-ids", "1,x"], capture_output=True,
                         text=True, env=env)
    assert bad.returncode == 2 and "--prompt-ids: expected comma-separated integers" in bad.stderr
    bad = subprocess.run([sys.executable, script, "--model", path, "--prompt-ids", "1", "--policy", "tova",
                          "--budget", "2", "--recent", "3"], capture_output=True, text=True, env=env)
    assert bad.returncode == 1
    assert "torch_decode.py: kvevict::RecentTopKSelection: recent window w = 3 exceeds budget k = 2" in bad.stderr


def test_model_is_found_as_the_tools_find_it(shared_dir, monkeypatch, tmp_path, capsys):
    # $KVEVICT_MODEL_DIR (a folder with one checkpoint), else $KVEVICT_SHARED_DIR/models/stories260K.
    monkeypatch.setenv("KVEVICT_MODEL_DIR", str(shared_dir / "models/stories260K"))
    assert torch_decode.find_checkpoint(torch_decode.default_model(), "x") == str(
        shared_dir / "models/stories260K/stories260K.bin")
    monkeypatch.delenv("KVEVICT_MODEL_DIR")
    monkeypatch.setenv("KVEVICT_SHARED_DIR", str(tmp_path))
    assert torch_decode.default_model() == str(tmp_path / "models" / "stories260K")
    # Missing: exit 2 and one line naming where it looked, not a FileNotFoundError traceback.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        torch_decode.main(["--prompt-ids", "1", "--steps", "1"])
    assert e.value.code == 2
    assert capsys.readouterr().err == (f"torch_decode.py: --model (default): '{tmp_path}/models/stories260K' does not "
                                       "exist; pass --model FILE.bin, or set KVEVICT_MODEL_DIR or KVEVICT_SHARED_DIR "
                                       "(stories260K: Hugging Face karpathy/tinyllamas)\n")

"""bench/quality/kvpress/side_by_side.py reads the same token ids as kvevict-quality: its tokenizer gives the
C++ tokenizer's ids on the 40 reference strings (tests/llama2/reference/smollm2, the ids the realmodel tests
pin the C++ tokenizer to), and its windows are the documents and offsets of kvevict-quality's SmolLM2 report
(bench/quality/results/smollm2/smollm2_windows.csv)."""
import csv
import importlib.util
import json
import os

import pytest

from conftest import ROOT


@pytest.fixture(scope="module")
def sbs():
    spec = importlib.util.spec_from_file_location("side_by_side", ROOT / "bench/quality/kvpress/side_by_side.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tokenizer(sbs, smollm2_path):
    return sbs.smollm2_tokenizer(*os.path.split(smollm2_path))


def test_tokenizer_gives_the_cpp_tokenizers_ids(tokenizer):
    ref = json.loads((ROOT / "tests/llama2/reference/smollm2/tokenizer_strings.json").read_text())
    assert len(ref["strings"]) == 40
    for s in ref["strings"]:
        assert tokenizer.encode(s["text"], add_special_tokens=False).ids == s["ids"], s["text"]


def test_windows_are_kvevict_qualitys(sbs, tokenizer):
    shared = os.environ.get("KVEVICT_SHARED_DIR") or str(ROOT.parent / "shared")
    wins = sbs.windows(os.path.join(shared, "data/python-howto"), tokenizer, 2304, 12)
    with open(ROOT / "bench/quality/results/smollm2/smollm2_windows.csv") as f:
        want = list(csv.DictReader(f))
    assert [(str(i), doc, "0", str(len(ids))) for i, (doc, ids) in enumerate(wins)] == \
        [(r["window"], r["document"], r["offset"], r["tokens"]) for r in want]


def test_kvevict_row_syntax(sbs):
    """The row names the RULER, retrieval and side-by-side runners take, to KVEvictCache's policy and options."""
    assert sbs.kvevict_row("keyformer") == ("keyformer", {})
    assert sbs.kvevict_row("h2o+mean@recent=0") == ("h2o", {"mean_attention": True, "recent": "0%"})
    assert sbs.kvevict_row("snapkv@kernel=15@recent=64t") == ("snapkv", {"snap_kernel": 15, "recent": 64})
    assert sbs.kvevict_row("kvzip+adakv@layers=shared") == ("kvzip", {"head_budgets": "adaptive", "layers": "shared"})
    assert sbs.kvevict_row("kvzip@layers=shared@heads=shared") == ("kvzip", {"layers": "shared", "heads": "shared"})
    assert sbs.kvevict_row("tova+shared@recent=1t") == ("tova", {"shared_heads": True, "recent": 1})
    for bad in ("kvzip+adakv@heads=shared", "kvzip@heads=uniform", "keyformer@heads=shared", "tova+mean",
                "snapkv@kernel=x", "tova+shared+adakv", "h2o+adakv+shared", "kvzip+shared", "streaming+shared",
                "tova+shared+shared"):
        with pytest.raises(SystemExit, match="unknown"):
            sbs.kvevict_row(bad)

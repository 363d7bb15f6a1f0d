"""The Python examples of the manual (docs/python.md, once the README's) run as printed (with made-up K/V,
logits and queries)."""
import re

import numpy as np

from conftest import ROOT


PAGE = ROOT / "docs" / "python.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)


def test_every_python_block_of_the_page_is_run():
    assert len(python_blocks()) == 3, "docs/python.md has a new python block: run it in a test here"


def test_readme_python_example_runs(capsys):
    code = python_blocks()[0]
    assert len(code.strip().splitlines()) <= 16
    rng = np.random.default_rng(0)
    P, T = 12, 6
    env = dict(P=P, T=T, k_rows=rng.standard_normal((P, 4, 64)).astype(np.float32),
               v_rows=rng.standard_normal((P, 4, 64)).astype(np.float32),
               prompt_logits=rng.standard_normal((8, P, P)).astype(np.float32),
               k_new=np.ones((4, 64), np.float32), v_new=np.ones((4, 64), np.float32),
               q=rng.standard_normal((8, 64)).astype(np.float32))
    exec(compile(code, str(PAGE), "exec"), env)
    cache = env["cache"]
    assert cache.lengths == [6, 6, 6, 6] and cache.step == T and cache.budget == 6 and cache.recent_window == 1
    assert cache.temperature == 2.0  # tau_end after T = horizon steps
    kept = cache.retained_positions(0)
    assert len(kept) == 6 and kept[-1] == P + T - 1
    assert str(kept) in capsys.readouterr().out


def test_expected_attention_example_runs():
    code = python_blocks()[1]
    rng = np.random.default_rng(2)
    P, T = 12, 6
    env = dict(kvevict=__import__("kvevict"), P=P, T=T,
               k_rows=rng.standard_normal((P, 4, 64)).astype(np.float32),
               v_rows=rng.standard_normal((P, 4, 64)).astype(np.float32),
               q_prerope=rng.standard_normal((P, 8, 64)).astype(np.float32),
               q_new_prerope=rng.standard_normal((8, 64)).astype(np.float32),
               k_new=rng.standard_normal((4, 64)).astype(np.float32),
               v_new=rng.standard_normal((4, 64)).astype(np.float32))
    exec(compile(code, str(PAGE), "exec"), env)
    cache, stats = env["cache"], env["stats"]
    assert cache.lengths == [6, 6, 6, 6] and cache.step == T and stats.count == P - 4 + T
    assert all(cache.retained_positions(j)[:4] == [0, 1, 2, 3] for j in range(4))  # the sinks stay


def test_readme_paged_example_runs(capsys):
    code = python_blocks()[2]
    rng = np.random.default_rng(1)
    P, T = 12, 6
    env = dict(kvevict=__import__("kvevict"), P=P, T=T,
               k_rows=rng.standard_normal((P, 4, 64)).astype(np.float32),
               v_rows=rng.standard_normal((P, 4, 64)).astype(np.float32),
               prompt_logits=rng.standard_normal((8, P, P)).astype(np.float32),
               k_new=np.ones((4, 64), np.float32), v_new=np.ones((4, 64), np.float32),
               q=rng.standard_normal((8, 64)).astype(np.float32))
    exec(compile(code, str(PAGE), "exec"), env)
    seq, pool = env["seq"], env["pool"]
    assert seq.length == 10 and seq.step == T and seq.budget == 10 and seq.recent_window == 2
    assert seq.pages_in_use == 3 and pool.used_pages == 3
    kept = seq.retained_positions(0)
    assert len(kept) == 10 and kept[-2:] == [P + T - 2, P + T - 1]
    assert str(kept) in capsys.readouterr().out

"""Each policy, driven from Python (kvevict.Cache) and through kvevict.replay, against the
kvevict-replay CLI on the same random trace: identical kept sets, scores within 1e-6 relative.

Every option is passed to kvevict-replay explicitly (its defaults may change)."""
import json
import subprocess

import numpy as np
import pytest

import kvevict

H_Q, G, N, P = 4, 2, 40, 16  # 4 query heads over 2 KV heads, 40 tokens, 16 of them the prompt
N_KV = H_Q // G


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    rng = np.random.default_rng(2024)
    logits = (rng.standard_normal((H_Q, N, N)) * 3.0).astype(np.float32)
    logits[:, 20, 3] = -np.inf  # a masked entry inside the causal part
    gumbel = (-np.log(-np.log(rng.uniform(1e-6, 1 - 1e-6, (H_Q, N, N))))).astype(np.float32)
    folder = tmp_path_factory.mktemp("trace")
    np.save(folder / "logits.npy", logits)
    np.save(folder / "gumbel.npy", gumbel)
    return dict(logits=logits, gumbel=gumbel, logits_path=str(folder / "logits.npy"),
                gumbel_path=str(folder / "gumbel.npy"))


# (id, policy, budget, recent, extra options); budget/recent as kvevict takes them.
CASES = [
    ("keyformer-none", "keyformer", 7, 2, dict(noise="none")),
    ("keyformer-trace", "keyformer", 7, 2, dict(noise="trace")),
    ("keyformer-gumbel", "keyformer", 7, 2, dict(noise="gumbel", seed=5, tau_init=0.5, tau_end=3.0)),
    ("keyformer-ratio", "keyformer", 0.5, 0.25, dict(noise="none", gen_steps=10)),
    ("h2o", "h2o", 7, 2, {}),
    ("h2o-shared", "h2o", 6, 1, dict(shared_heads=True)),
    ("streaming", "streaming", 7, 0, dict(sinks=3)),
    ("window", "window", 5, 0, {}),
    ("tova", "tova", 7, 0, {}),
    ("tova-recent", "tova", 7, 1, {}),  # kvpress's TOVAPress rule: the newest token stays
]


def cli_records(replay_bin, trace, policy, budget, recent, o):
    args = [replay_bin, "--logits", trace["logits_path"], "--prompt-len", str(P), "--q-heads-per-kv", str(G),
            "--policy", policy, "--sinks", str(o.get("sinks", 4))]
    if policy == "keyformer":  # Keyformer's own flags are errors with another policy
        args += ["--tau-init", str(o.get("tau_init", 1.0)), "--tau-end", str(o.get("tau_end", 2.0)),
                 "--gen-steps", str(o.get("gen_steps", N - P)), "--noise", o.get("noise", "none"),
                 "--seed", str(o.get("seed", 0))]
    args += ["--budget", str(budget)] if isinstance(budget, int) else ["--budget-ratio", str(budget)]
    args += ["--recent", str(recent)] if isinstance(recent, int) else ["--recent-ratio", str(recent)]
    if o.get("noise") == "trace":
        args += ["--gumbel", trace["gumbel_path"]]
    if o.get("shared_heads"):
        args.append("--shared-heads")
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def cache_records(trace, policy, budget, recent, o):
    """The replay driver of tools/replay/replay.cpp, written against the Python Cache."""
    logits, gumbel = trace["logits"], trace["gumbel"]
    opts = dict(budget=budget, recent=recent, shared_heads=o.get("shared_heads", False))
    if policy == "streaming":
        opts["sinks"] = o.get("sinks", 4)
    noise = o.get("noise", "none")
    if policy == "keyformer":
        opts.update(tau_init=o.get("tau_init", 1.0), tau_end=o.get("tau_end", 2.0),
                    horizon=o.get("gen_steps", N - P), noise=noise != "none", seed=o.get("seed", 0))
    inject = policy == "keyformer" and noise == "trace"
    cache = kvevict.Cache(policy, n_q_heads=H_Q, n_kv_heads=N_KV, capacity=N, head_dim=1, **opts)
    zero = np.zeros((N_KV, 1), np.float32)

    def record(t):
        kept, scores = [], []
        for h in range(N_KV):
            pos, sc = cache.positions(h), cache.scores(h)
            order = np.argsort(pos, kind="stable")
            kept.append(pos[order].tolist())
            scores.append(sc[order].tolist())
        return {"t": t, "tau": cache.temperature, "kept": kept, "scores": scores}

    for p in range(P):
        cache.append(p, zero, zero)
    causal = np.tril(np.ones((P, P), bool))
    x = np.where(causal, logits[:, :P, :P], 0).astype(np.float32)
    z = np.where(causal, gumbel[:, :P, :P], 0).astype(np.float32) if inject else None
    cache.prefill(x, gumbel=z)
    records = [record(P - 1)]
    for t in range(P, N):
        cache.append(t, zero, zero)
        x = np.stack([logits[h, t, cache.positions(h // G)] for h in range(H_Q)])
        z = np.stack([gumbel[h, t, cache.positions(h // G)] for h in range(H_Q)]) if inject else None
        cache.decode_step(x, gumbel=z)
        records.append(record(t))
    return records


def binding_records(trace, policy, budget, recent, o):
    kw = dict(policy=policy, q_heads_per_kv=G, budget=budget, recent=recent, sinks=o.get("sinks", 4),
              shared_heads=o.get("shared_heads", False))
    if policy == "keyformer":
        kw.update(tau_init=o.get("tau_init", 1.0), tau_end=o.get("tau_end", 2.0), gen_steps=o.get("gen_steps", N - P),
                  noise=o.get("noise", "none"), seed=o.get("seed", 0))
    if o.get("noise") == "trace":
        kw["gumbel"] = trace["gumbel"]
    return kvevict.replay(trace["logits"], P, **kw)


def assert_same(got, want):
    assert len(got) == len(want) == N - P + 1
    for g, w in zip(got, want):
        assert g["t"] == w["t"]
        assert g["tau"] == pytest.approx(w["tau"], rel=1e-6)
        assert g["kept"] == w["kept"]
        for gs, ws in zip(g["scores"], w["scores"]):
            np.testing.assert_allclose(gs, ws, rtol=1e-6, atol=0)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_cache_matches_cli(replay_bin, trace, case):
    _, policy, budget, recent, o = case
    want = cli_records(replay_bin, trace, policy, budget, recent, o)
    got = cache_records(trace, policy, budget, recent, o)
    assert_same(got, want)
    # The run evicted: every KV head ends at the budget (k = 8 for the ratio case).
    k = budget if isinstance(budget, int) else int(budget * P)
    assert all(len(kept) == k for kept in want[-1]["kept"])


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_replay_binding_matches_cli(replay_bin, trace, case):
    _, policy, budget, recent, o = case
    assert_same(binding_records(trace, policy, budget, recent, o), cli_records(replay_bin, trace, policy, budget, recent, o))


def test_replay_percent_strings_and_defaults(replay_bin, trace):
    # budget '50%' is --budget-ratio 0.5 and '0.5'; the defaults are the tool's: budget 50%, recent 30%,
    # noise 'auto' (the generator), seed 42.
    got = kvevict.replay(trace["logits"], P, policy="h2o", q_heads_per_kv=G, budget="50%", recent="25%")
    assert_same(got, cli_records(replay_bin, trace, "h2o", 0.5, 0.25, {}))
    assert_same(kvevict.replay(trace["logits"], P, policy="h2o", q_heads_per_kv=G, budget="0.5", recent="0.25"), got)
    got = kvevict.replay(trace["logits"], P, q_heads_per_kv=G, gen_steps=N - P)
    assert_same(got, cli_records(replay_bin, trace, "keyformer", 0.5, 0.3, dict(noise="gumbel", seed=42)))


@pytest.mark.parametrize("policy", ["keyformer", "h2o", "streaming", "window", "tova", "snapkv"])
def test_replay_defaults_are_the_tools_defaults(replay_bin, trace, policy):
    # No option but the policy on either side: the same records (budget 50%, recent 30% where the policy has a
    # recent window, 4 sinks, tau 1 -> 2, seed 42, snap_window min(32, k)).
    args = [replay_bin, "--logits", trace["logits_path"], "--prompt-len", str(P), "--q-heads-per-kv", str(G),
            "--policy", policy]
    want = [json.loads(line) for line in subprocess.run(args, check=True, capture_output=True, text=True)
            .stdout.splitlines()]
    assert_same(kvevict.replay(trace["logits"], P, policy=policy, q_heads_per_kv=G), want)


def test_replay_options_of_another_policy_are_errors():
    x = np.zeros((G, 4, 4), np.float32)
    for key, value in [("seed", 3), ("noise", "none"), ("tau_end", 3.0), ("gen_steps", 2)]:
        with pytest.raises(ValueError, match=f"^{key} is used only by policy 'keyformer' \\(got policy 'h2o'\\)$"):
            kvevict.replay(x, 2, policy="h2o", q_heads_per_kv=G, **{key: value})

"""The reference of kvevict-llama's model-wide key norm (--policy knorm), from the keys it recorded.

python3 check_key_norm.py KEYS.npy KEPT.jsonl P K W

KEYS.npy (--keys-out): float32 [H][N][d], H = n_layer * n_head_kv, the keys after RoPE the cache was given.
KEPT.jsonl (--kept-out): the kept positions after the prompt (t = P - 1) and after every decode step.
The rule (KeyNorm with one selection over the H heads): a position's score is the sum over the heads of
1 / (1 + ||k||); the prompt keeps its last W positions plus the K - W best scores of the others; each step
adds the new position and, above K, drops the lowest score outside the W most recent. Scores are computed
here in double, so a choice between two positions whose scores differ by less than TOL (relative) is
accepted either way; everything else must match exactly. The scores kvevict-llama wrote (KV head 0's)
must equal float32's 1 / (1 + sqrt(sum k^2)) of the recorded keys within 1e-6. Standard library only.
"""
import ast
import json
import math
import struct
import sys
from array import array

TOL = 1e-5


def read_npy(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY", "not an .npy file"
    major = data[6]
    if major == 1:
        (hlen,) = struct.unpack("<H", data[8:10])
        start = 10
    else:
        (hlen,) = struct.unpack("<I", data[8:12])
        start = 12
    header = ast.literal_eval(data[start:start + hlen].decode("latin1"))
    assert header["descr"] == "<f4" and not header["fortran_order"], header
    values = array("f")
    values.frombytes(data[start + hlen:])
    assert sys.byteorder == "little"
    return header["shape"], values


def close(a, b):
    return abs(a - b) <= TOL * max(abs(a), abs(b))


def check_cuts(lines, P, K, W, scores_of):
    """Checks every cut of KEPT.jsonl's `lines` against `scores_of(held)` (a position's summed score, indexable by
    position, for the positions `held` at the cut): the prompt keeps its last W plus the best others; each step, above
    K, drops the lowest score outside the W most recent. Choices within TOL (relative) pass either way; returns how
    many were taken so."""
    first = lines[0]
    assert first["t"] == P - 1, first["t"]
    kept = first["kept"][0]
    assert len(kept) == min(K, P) and kept == sorted(kept), len(kept)
    score = scores_of(list(range(P)))
    recent = set(range(P - W, P))
    assert recent <= set(kept), sorted(recent - set(kept))
    others_kept = [p for p in kept if p not in recent]
    dropped = [p for p in range(P) if p not in set(kept)]
    if others_kept and dropped:
        worst_kept = min(others_kept, key=lambda p: score[p])
        best_dropped = max(dropped, key=lambda p: score[p])
        assert score[worst_kept] >= score[best_dropped] or close(score[worst_kept], score[best_dropped]), (
            f"prefill: kept {worst_kept} ({score[worst_kept]}) below dropped {best_dropped} ({score[best_dropped]})")
    ties = 0
    for prev, line in zip(lines, lines[1:]):  # every decode step, from the kept set before it
        t = line["t"]
        assert t == prev["t"] + 1, t
        cand = sorted(prev["kept"][0] + [t])
        now = line["kept"][0]
        if len(cand) <= K:
            assert now == cand, t
            continue
        score = scores_of(cand)
        gone = sorted(set(cand) - set(now))
        assert len(gone) == 1 and set(now) <= set(cand), (t, gone)
        v = gone[0]
        rec = set(cand[-W:]) if W else set()
        assert v not in rec, f"step {t}: evicted {v} from the recent window"
        want = min((p for p in cand if p not in rec), key=lambda p: (score[p], p))
        if v != want:
            assert close(score[v], score[want]), f"step {t}: evicted {v} ({score[v]}), the lowest is {want} ({score[want]})"
            ties += 1
    return ties


def main():
    keys_path, kept_path, P, K, W = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    (H, N, d), keys = read_npy(keys_path)
    lines = [json.loads(line) for line in open(kept_path)]
    n_pos = lines[-1]["t"] + 1
    score = [0.0] * n_pos
    head0 = [0.0] * n_pos
    for j in range(H):
        for p in range(n_pos):
            row = keys[(j * N + p) * d:(j * N + p + 1) * d]
            sq = math.fsum(float(x) * float(x) for x in row)
            assert sq > 0.0, f"head {j}, position {p}: the key is all zeros (not recorded?)"
            score[p] += 1.0 / (1.0 + math.sqrt(sq))
            if j == 0:
                head0[p] = 1.0 / (1.0 + math.sqrt(sq))

    ties = check_cuts(lines, P, K, W, lambda held: score)
    # The scores the cache holds (KV head 0) are the recorded keys' float32 key norms.
    for line in lines:
        for p, s in zip(line["kept"][0], line["scores"][0]):
            assert abs(s - head0[p]) <= 1e-6 * head0[p], (line["t"], p, s, head0[p])
    print(f"key norm reference ok: {len(lines)} lines, H = {H}, d = {d}, k = {K}, w = {W}, near-ties {ties}")


if __name__ == "__main__":
    main()

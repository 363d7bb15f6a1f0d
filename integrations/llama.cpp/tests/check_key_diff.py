"""The reference of kvevict-llama's model-wide KeyDiff (--policy keydiff), from the keys it recorded.

python3 check_key_diff.py KEYS.npy KEPT.jsonl P K W

KEYS.npy (--keys-out): float32 [H][N][d], H = n_layer * n_head_kv, the keys after RoPE the cache was given.
KEPT.jsonl (--kept-out): the kept positions after the prompt (t = P - 1) and after every decode step.
The rule (KeyDiff with one selection over the H heads): over the positions S held at a cut (the whole prompt; then
the kept set before a step plus the step's new position), head j's anchor is the mean of its unit keys over S,
normalized, and a position's score is the sum over the heads of 1 - cos(its key, the anchor). The prompt keeps its
last W positions plus the K - W best scores of the others; each step, above K, drops the lowest score outside the W
most recent. Scores are computed here in double, so a choice between two positions whose scores differ by less than
TOL (relative) is accepted either way; everything else must match exactly. The scores kvevict-llama wrote (KV head
0's, against the anchor of the positions held before the cut) must equal this file's within 1e-4. Standard
library only.
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_key_norm import check_cuts, read_npy  # noqa: E402  (the same reader and cut rule)


def main():
    keys_path, kept_path, P, K, W = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    (H, N, d), keys = read_npy(keys_path)
    lines = [json.loads(line) for line in open(kept_path)]
    n_pos = lines[-1]["t"] + 1
    unit = []  # [j][p] -> the unit key (double); a zero key is refused (not recorded)
    for j in range(H):
        row_units = []
        for p in range(n_pos):
            row = [float(x) for x in keys[(j * N + p) * d:(j * N + p + 1) * d]]
            norm = math.sqrt(math.fsum(x * x for x in row))
            assert norm > 0.0, f"head {j}, position {p}: the key is all zeros (not recorded?)"
            row_units.append([x / norm for x in row])
        unit.append(row_units)

    def scores(held):
        """{position: (summed score, head 0's score)} against the anchors of `held`."""
        out = {p: [0.0, 0.0] for p in held}
        for j in range(H):
            a = [math.fsum(unit[j][p][i] for p in held) / len(held) for i in range(d)]
            na = math.sqrt(math.fsum(x * x for x in a))
            for p in held:
                s = 1.0 - math.fsum(unit[j][p][i] * a[i] for i in range(d)) / na
                out[p][0] += s
                if j == 0:
                    out[p][1] = s
        return out

    ties = check_cuts(lines, P, K, W, lambda held: {p: v[0] for p, v in scores(held).items()})
    # The scores the cache holds (KV head 0), against the anchor of the positions held at each cut.
    for prev, line in zip([None] + lines, lines):
        held = list(range(P)) if prev is None else sorted(prev["kept"][0] + [line["t"]])
        sc = scores(held)
        for p, s in zip(line["kept"][0], line["scores"][0]):
            assert abs(s - sc[p][1]) <= 1e-4, (line["t"], p, s, sc[p][1])
    print(f"KeyDiff reference ok: {len(lines)} lines, H = {H}, d = {d}, k = {K}, w = {W}, near-ties {ties}")


if __name__ == "__main__":
    main()

"""fuzz/seeds/replay.py — the seeds of the replay readers and driver: JSON traces (fuzz_trace_json), replay
options over a trace (fuzz_replay_run) and .npy files (fuzz_npy_reader)."""
import json
import struct

from .encoder import SIZE_MAX, Encoder, write


# ---------------------------------------------------------------- trace_json / replay_run
def trace(H=1, N=3, P=2, g=None, gumbel=False, meta=False):
    logits = [[[(0.25 * (t + j + h)) if j <= t else None for j in range(N)] for t in range(N)] for h in range(H)]
    d = {"prompt_len": P, "logits": logits}
    if g is not None:
        d["q_heads_per_kv"] = g
    if gumbel:
        d["gumbel"] = [[[(0.5 - 0.125 * j) if j <= t else None for j in range(N)] for t in range(N)] for h in range(H)]
    if meta:
        d["meta"] = {"model": "synthetic", "layer": 0, "tokens": list(range(N))}
    return json.dumps(d).encode()


def trace_json_seeds():
    write("trace_json", "valid-1x3", trace())
    write("trace_json", "valid-gqa-gumbel-meta", trace(H=4, N=4, P=2, g=2, gumbel=True, meta=True))
    # Regression: a number beyond float range, and a small file claiming H = N = 1000.
    write("trace_json", "regression-1e400", b'{"logits":[[[1e400]]],"prompt_len":1}')
    write("trace_json", "regression-1e39", b'{"logits":[[[0, null], [1e39, 0]]],"prompt_len":1}')
    claim = b'{"prompt_len": 1, "logits": [[' + b",".join([b"[]"] * 1000) + b"]" + b",0" * 999 + b"]}"
    write("trace_json", "regression-claims-H-N-1000", claim)
    write("trace_json", "ragged", b'{"prompt_len": 1, "logits": [[[0, null], [1]]]}')


def replay_tail(policy=0, budget=None, recent_ratio=None, sinks=2, tau=(0, 1), noise=0, shared=False):
    """Options of replay_run.cpp, in its call order; P and g from the trace."""
    e = Encoder().pick(policy, 8)

    def count(v):
        if v == SIZE_MAX:
            e.int_in(0, 0, 7)
        else:
            e.int_in(3, 0, 7).int_in(v, 0, 12)

    if budget is None:
        e.int_in(0, 0, 3)
    else:
        e.int_in(1, 0, 3)
        count(budget)
    if recent_ratio is None:
        e.int_in(0, 0, 3)
    else:
        e.int_in(2, 0, 3).boolean(True).pick(6, 8)  # odd[6] = 1.0
    count(sinks)
    e.pick(tau[0], 13).pick(tau[1], 13).boolean(False).pick(noise, 4).u64(0).boolean(shared)
    e.int_in(1, 0, 3)
    count(0)
    e.int_in(1, 0, 3)
    count(0)
    return e


def replay_seeds():
    t = trace(H=2, N=5, P=3)
    for policy in range(5):
        write("replay_run", "policy%d" % policy, replay_tail(policy=policy, budget=2).bytes(t))
    write("replay_run", "keyformer-trace-noise", replay_tail(policy=0, budget=3, noise=3).bytes(trace(H=2, N=4, P=2, gumbel=True)))
    # The SIZE_MAX budget regression through the replay: --policy h2o --budget 18446744073709551615 --recent-ratio 1.
    write("replay_run", "regression-h2o-huge-budget-recent-ratio-1",
          replay_tail(policy=1, budget=SIZE_MAX, recent_ratio=1.0).bytes(trace(H=1, N=2, P=1)))


# ---------------------------------------------------------------- npy_reader
def npy(shape, values, descr="<f4", fortran=False, version=1):
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (
        descr, "True" if fortran else "False", ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else ""))
    pre = 6 + 2 + (2 if version == 1 else 4)
    d += " " * ((64 - (pre + len(d) + 1) % 64) % 64) + "\n"
    ln = struct.pack("<H", len(d)) if version == 1 else struct.pack("<I", len(d))
    return b"\x93NUMPY" + bytes([version, 0]) + ln + d.encode() + struct.pack("<%df" % len(values), *values)


def npy_seeds():
    cube = npy((1, 3, 3), [0.5 * i for i in range(9)])
    write("npy_reader", "valid-1x3x3", b"\x01" + cube)
    write("npy_reader", "valid-v2", b"\x00" + npy((2, 2), [1, 2, 3, 4], version=2))
    write("npy_reader", "two-files", b"\x02" + bytes([len(cube) + 1]) + cube[1:] + cube)
    write("npy_reader", "truncated", b"\x01" + cube[:-3])
    write("npy_reader", "huge-shape", b"\x00" + npy((2**40, 2**40, 2**40), []))
    write("npy_reader", "fortran", b"\x00" + npy((2, 2), [1, 2, 3, 4], fortran=True))


def trace_json_duplicate_seeds():
    write("trace_json", "regression-duplicate-key", b'{"prompt_len": 1, "logits": [[[0]]], "prompt_len": 2}')
    write("trace_json", "regression-duplicate-meta-key",
          b'{"prompt_len": 1, "meta": {"a": 1, "a": 2}, "logits": [[[0]]]}')

"""fuzz/seeds/causal_attention.py — the seeds of fuzz_causal_attention: random bytes of several lengths (the
harness draws shapes, strides, options and every element from them; long inputs reach P up to 70 with finite
values)."""
from .encoder import write


def causal_attention_seeds():
    import random
    rng = random.Random(5)
    for i, n in enumerate([64, 400, 2000, 6000, 12000]):
        write("causal_attention", "random-%d" % i, bytes(rng.randrange(256) for _ in range(n)))

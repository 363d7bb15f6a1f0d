"""fuzz/seeds/select_keep.py — the seeds of fuzz_select_keep: random bytes and the quickstart example."""
from .encoder import Encoder, write


def select_keep_seeds():
    import random
    rng = random.Random(8)
    for i, n in enumerate([0, 1, 5, 40, 200]):
        write("select_keep", "random-%d" % i, bytes(rng.randrange(256) for _ in range(n + 8)))
    # Quickstart example: scores [0.40, 0.20, 0.10, 0.05, 0.25] ~ bytes 240.. are specials; plain
    # bytes b give (b % 16) / 8. k = 3, w = 1, n = 5, then the scores (front bytes are unused).
    e = Encoder().int_in(3, 0, 70).int_in(1, 0, 70).int_in(1, 0, 15).int_in(1, 0, 15).int_in(5, 0, 300)
    for b in [3, 2, 1, 0, 2]:
        e.u8(b)
    write("select_keep", "quickstart-k3-w1", e.int_in(0, 0, 4).bytes())

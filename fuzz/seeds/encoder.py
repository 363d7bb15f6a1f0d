"""fuzz/seeds/encoder.py — the byte layout the harnesses read: `Encoder` records their integer choices (as
FuzzedDataProvider draws them, from the END of the input) and `write` stores a seed under fuzz/corpus/<target>/;
the huge sizes of issue 51."""
import os

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # fuzz/: the corpora are fuzz/corpus/<target>/
SIZE_MAX = 2**64 - 1
# kvfuzz::kHugeSizes and kHugeStrides (fuzz_util.hpp), the sizes no array can have (issue 51).
HUGE_SIZES = [2**62, 2**62 + 1, 2**63, 2**63 + 1, SIZE_MAX // 3, SIZE_MAX // 2, SIZE_MAX - 1, SIZE_MAX]
HUGE_STRIDES = [2**63, 2**63 + 1, 2**63 + 2**62, SIZE_MAX - 1, SIZE_MAX]


class Encoder:
    """Records the integer choices a harness makes, in call order."""

    def __init__(self):
        self.tail = []  # consumption order

    def int_in(self, v, lo, hi):
        r, val = hi - lo, v - lo
        assert 0 <= val <= r, (v, lo, hi)
        n = 0
        while n < 8 and (r >> (8 * n)) > 0:
            n += 1
        for i in reversed(range(n)):
            self.tail.append((val >> (8 * i)) & 0xFF)
        return self

    def boolean(self, b):
        return self.int_in(1 if b else 0, 0, 255)

    def u8(self, v):
        return self.int_in(v, 0, 255)

    def u64(self, v):
        return self.int_in(v, 0, 2**64 - 1)

    def pick(self, index, size):
        return self.int_in(index, 0, size - 1)

    def bytes(self, front=b""):
        return front + bytes(reversed(self.tail))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

"""kvevict.select_keep: the selection rule, against the README example and a reference."""
import numpy as np
import pytest

import kvevict


def test_readme_example():
    assert kvevict.select_keep([0.40, 0.20, 0.10, 0.05, 0.25], 3, 1) == [0, 1, 4]


def test_float32_array_and_numpy_ints():
    scores = np.array([0.40, 0.20, 0.10, 0.05, 0.25], dtype=np.float32)
    assert kvevict.select_keep(scores, np.int64(3), np.int32(1)) == [0, 1, 4]
    assert kvevict.select_keep(scores[::-1], 2, 0) == [0, 4]  # strided input is read as given


def test_edge_cases():
    assert kvevict.select_keep([], 3, 1) == []
    assert kvevict.select_keep([1.0, 2.0], 5, 1) == [0, 1]  # n <= k keeps everything
    assert kvevict.select_keep([3.0, 1.0, 2.0], 2, 2) == [1, 2]  # the recent window only
    assert kvevict.select_keep([1.0, 1.0, 1.0, 0.0], 2, 0) == [0, 1]  # ties keep the older
    assert kvevict.select_keep([float("-inf"), float("inf"), 0.0], 1, 0) == [1]


def reference(scores, k, w):
    n = len(scores)
    m, r = min(k, n), min(w, n)
    pool = sorted(range(n - r), key=lambda i: (-scores[i], i))[: m - r]
    return sorted(pool + list(range(n - r, n)))


def test_random_against_reference():
    rng = np.random.default_rng(12)
    for _ in range(300):
        n = int(rng.integers(0, 30))
        k = int(rng.integers(1, 12))
        w = int(rng.integers(0, k + 1))
        scores = rng.integers(0, 5, n).astype(np.float32)  # many ties
        assert kvevict.select_keep(scores, k, w) == reference(scores.tolist(), k, w)


@pytest.mark.parametrize(
    "args, error, message",
    [
        (([1.0], 0, 0), ValueError, r"kvevict::select_keep: k must be >= 1 \(got 0\)"),
        (([1.0], 2, 3), ValueError, r"kvevict::select_keep: w must be <= k \(got w = 3, k = 2\)"),
        (([1.0, float("nan")], 1, 0), ValueError, r"kvevict::select_keep: scores\[1\] is NaN"),
        (([1.0], -1, 0), ValueError, r"k must be >= 0 \(got -1\)"),
        (([1.0], 2**64, 0), OverflowError, "k = 18446744073709551616 does not fit in 64 bits"),
        (([1.0], 1.5, 0), TypeError, "k must be an int, got float 1.5"),
        (([1.0], True, 0), TypeError, "k must be an int, got bool True"),
        ((np.zeros(3, np.float64), 1, 0), ValueError, r"scores must be a 1-D float32 array of shape \[n\].*float64"),
        ((np.zeros((2, 2), np.float32), 1, 0), ValueError, r"scores must be a 1-D float32 array.*shape \[2, 2\]"),
        (("abc", 1, 0), TypeError, "scores must be a sequence of numbers or a 1-D float32 array, got str"),
        (([1.0, "x"], 1, 0), TypeError, r"scores\[1\] must be a number, got str 'x'"),
    ],
)
def test_errors(args, error, message):
    with pytest.raises(error, match=message):
        kvevict.select_keep(*args)

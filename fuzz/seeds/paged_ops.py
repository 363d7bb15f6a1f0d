"""fuzz/seeds/paged_ops.py — the issue-51 seeds of fuzz_paged_ops (paged_ops.cpp's draws in its call order); its
other seeds are the units of a fuzzing run (fuzz/README.md)."""
from .encoder import HUGE_SIZES, SIZE_MAX, Encoder, write


# ---------------------------------------------------------------- paged_ops (see paged_ops.cpp)
def paged_ops_issue51_seeds():
    """Issue 51: a page-unit window cache (one float sequence of 10 pages of 2 slots, 1 KV head, head_dim 2, the
    pool's own free list, k = 8, w = 0) whose start_pages is huge: start_pages * page_size wrapped, so the rule
    k >= start_pages * page_size + max(w, 1) held and the cache was built; and one whose view is given
    max_pages = 2^62 (its position IDs overflow), refused before any allocation."""
    for name, start_pages, hostile, ratio in (("issue51-page-unit-start-pages-2pow63", 2**63, None, False),
                                              ("issue51-page-unit-start-pages-size-max", SIZE_MAX, None, False),
                                              ("issue51-view-max-pages-2pow62", 1, (4, 2**62), False)):
        e = Encoder().int_in(1, 0, 3)  # float
        e.int_in(16, 1, 24).int_in(1, 0, 15).int_in(2, 1, 6).int_in(1, 1, 3).int_in(2, 1, 4).boolean(False)
        e.int_in(1, 0, 2).int_in(1, 1, 3).int_in(10, 1, 10)  # own free list; one sequence of 10 pages
        e.int_in(1, 1, 3)  # n_q_heads = 1
        if hostile is None:
            e.int_in(1, 0, 31)
        else:
            e.int_in(0, 0, 31).int_in(8 + hostile[0], 0, 15).pick(HUGE_SIZES.index(hostile[1]), 8)
        e.int_in(0 if ratio else 1, 0, 3).boolean(True)  # a ratio (0.5) or token budget; a token window
        e.int_in(2, 0, 15).int_in(8, 0, 22).int_in(2, 0, 15).int_in(0, 0, 22)  # k = 8, w = 0
        e.int_in(32, 0, 80).int_in(0, 0, 70).int_in(1, 0, 31).u64(0)  # (ratios unused), shared heads, seed
        e.boolean(True)  # the page unit
        if start_pages in HUGE_SIZES:
            e.int_in(0, 0, 3).int_in(3, 0, 7).pick(HUGE_SIZES.index(start_pages), 8)
        else:
            e.int_in(0, 0, 3).int_in(start_pages, 0, 7)
        e.int_in(1, 0, 3).pick(0, 6).pick(0, 6).int_in(0, 0, 6).boolean(False).int_in(0, 0, 5)
        e.pick(3, 8).int_in(1, 0, 3).pick(0, 5)  # Policy::window, no mean attention, 1 worker
        write("paged_ops", name, e.bytes())

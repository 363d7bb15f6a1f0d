"""bench/ruler/ruler.py, the RULER-style generator: every expected answer is in the context where the task puts it,
prompts fill their token length (and one more haystack unit would not fit), the same seed gives the same prompt,
and RULER's string_match_all scores exactly. Checked with a whitespace tokenizer (independent of any model) and
with SmolLM2's own tokenizer (the lengths the benchmark runs at)."""
import collections
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench/ruler"))  # ruler.py, report.py
sys.path.insert(0, str(ROOT / "bench/quality/kvpress"))
ruler = pytest.importorskip("ruler")

ESSAY = ("Tom had a red ball. He liked to throw it high! Did the dog want it? The dog ran fast. "
         "Mia saw the sun and smiled. The end came soon. ") * 3


def words_split(text):
    return text.split()


@pytest.fixture(scope="module")
def lists():
    return ruler.word_lists()


@pytest.fixture(scope="module")
def sentences():
    return ruler.essay_sentences(ESSAY)


def total(sample, encode, q=0):
    question, prefix, _ = sample["questions"][q]
    return len(encode(sample["context"])) + len(encode(question + prefix))


def test_essay_sentences_split_on_terminal_punctuation():
    assert ruler.essay_sentences("A b.  C d!\n\nE f? G") == ["A b.", "C d!", "E f?", "G"]


@pytest.mark.parametrize("task", list(ruler.TASKS))
def test_every_task_fits_its_length_and_is_deterministic(task, lists, sentences):
    a = ruler.make_sample(task, 3, 1500, words_split, lists, sentences)
    b = ruler.make_sample(task, 3, 1500, words_split, lists, sentences)
    c = ruler.make_sample(task, 4, 1500, words_split, lists, sentences)
    assert a == b
    assert a["context"] != c["context"]
    n = total(a, words_split)
    assert n <= 1500
    assert n >= 1500 - 60  # within a haystack unit (the longest, a UUID needle line or ten coded words, < 60 words)
    assert a["max_new_tokens"] == ruler.MAX_NEW_TOKENS[ruler.TASKS[task]["kind"]]


@pytest.mark.parametrize("task", [t for t, c in ruler.TASKS.items() if c["kind"] == "niah"])
def test_niah_needles_hold_every_answer_under_its_key(task, lists, sentences):
    s = ruler.make_sample(task, 7, 800, words_split, lists, sentences)
    cfg = ruler.TASKS[task]
    type_v = cfg["value"]
    needles = re.findall(rf"One of the special magic {type_v} for (\S+) is: (\S+)\.", s["context"])
    by_key = collections.defaultdict(list)
    for k, v in needles:
        by_key[k].append(v)
    for question, prefix, answers in s["followups"]:
        key = re.search(r"for (\S+) mentioned", question).group(1)
        assert sorted(by_key[key]) == sorted(answers), (key, by_key[key], answers)
        assert len(answers) == cfg.get("num_v", 1)
    q, p, answers = s["questions"][0]
    assert len(answers) == cfg.get("num_v", 1) * cfg.get("num_q", 1)
    for key in s["info"]["keys"]:
        assert key in q and key in p
    value_re = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}" if type_v == "uuids" else r"[0-9]{7}"
    assert all(re.fullmatch(value_re, a) for a in answers)
    if cfg["haystack"] != "needle":  # only the sample's own needles, one per (key, value)
        assert len(needles) == max(cfg.get("num_k", 1), cfg.get("num_q", 1)) * cfg.get("num_v", 1)
    else:  # a haystack of needles: every other key differs from the asked one
        assert len(needles) > 20 and len(by_key[s["info"]["keys"][0]]) == 1


def test_niah_needle_sits_at_its_depth(lists, sentences):
    for seed in range(6):
        s = ruler.make_sample("niah_single_1", seed, 1000, words_split, lists, sentences)
        body = s["context"].split("\n")[1]
        before = body[:body.index("One of the special magic")]
        depth = s["info"]["depths"][0]
        units = body.count(ruler.NOISE)
        assert abs(before.count(ruler.NOISE) - depth * units // 100) <= 1


def test_multiquery_followups_ask_one_key_each(lists, sentences):
    s = ruler.make_sample("niah_multiquery", 1, 800, words_split, lists, sentences)
    assert len(s["questions"]) == 1 and len(s["followups"]) == 4
    assert [a for _, _, ans in s["followups"] for a in ans] == s["questions"][0][2]
    assert ", and " in s["questions"][0][0]


def test_vt_chain_is_in_order_and_complete(lists, sentences):
    s = ruler.make_sample("vt", 2, 700, words_split, lists, sentences)
    _, prefix, names = s["questions"][0]
    value = s["info"]["value"]
    assert f"VAR {names[0]} = {value}." in s["context"]
    at = [s["context"].index(f"VAR {names[0]} = {value}.")]
    for a, b in zip(names, names[1:]):
        stmt = f"VAR {b} = VAR {a}."
        assert s["context"].count(stmt) == 1
        at.append(s["context"].index(stmt))
    assert at == sorted(at) and len(names) == 5
    assert f"5 variables are assgined the value {value}" in prefix


def test_cwe_counts_by_an_independent_recount(lists, sentences):
    s = ruler.make_sample("cwe", 5, 900, words_split, lists, sentences)
    listed = re.findall(r"(\d+)\. (\S+)", s["context"])
    assert [int(i) for i, _ in listed] == list(range(1, len(listed) + 1))
    counts = collections.Counter(w for _, w in listed)
    common = s["questions"][0][2]
    assert len(common) == 10 and all(counts[w] == 30 for w in common)
    assert all(c == 3 for w, c in counts.items() if w not in common)


def test_fwe_top_three_by_an_independent_recount(lists, sentences):
    s = ruler.make_sample("fwe", 6, 900, words_split, lists, sentences)
    body = s["context"][s["context"].index("coded words. ") + len("coded words. "):]
    counts = collections.Counter(w for w in body.split() if w != "....")
    top = s["questions"][0][2]
    assert [counts[w] for w in top] == s["info"]["counts"]
    assert sorted(counts.values(), reverse=True)[:3] == s["info"]["counts"]
    assert all(re.fullmatch(r"[a-z]{6}", w) for w in counts)


def test_score_is_string_match_all():
    assert ruler.score("The numbers are 1234567 and 7654321.", ["1234567", "7654321"]) == 1.0
    assert ruler.score("only 1234567", ["1234567", "7654321"]) == 0.5
    assert ruler.score("APPLE pie", ["apple", "pear", "plum", "fig"]) == 0.25
    assert ruler.score("", ["x"]) == 0.0


def test_refusals(lists, sentences):
    with pytest.raises(ValueError, match="unknown task 'niah'"):
        ruler.make_sample("niah", 0, 600, words_split, lists, sentences)
    with pytest.raises(ValueError, match="length 20 tokens leaves no room"):
        ruler.make_sample("niah_single_1", 0, 20, words_split, lists, sentences)
    with pytest.raises(ValueError, match="length 600 tokens leaves no room"):  # 10 words x 30 are 600 words
        ruler.make_sample("cwe", 0, 600, words_split, lists, sentences)
    with pytest.raises(ValueError, match="length 200000 tokens is more than this task's 16384 haystack units fill"):
        ruler.make_sample("fwe", 0, 200000, words_split, lists, sentences)  # never a shorter prompt than asked
    with pytest.raises(ValueError, match="no sentences"):
        ruler.make_sample("niah_single_2", 0, 600, words_split, lists, [])


def test_smollm2_prompts_fill_4k(smollm2_path, lists):
    import side_by_side as sbs
    import os
    folder, gguf = os.path.split(smollm2_path)
    tok = sbs.smollm2_tokenizer(folder, gguf)

    def encode(text):
        return tok.encode(text).ids
    text = (ROOT.parent / "shared/data/tinystories-val/tinystories_val.txt")
    sents = ruler.essay_sentences(text.read_text(encoding="utf-8")[:200000]) if text.is_file() else \
        ruler.essay_sentences(ESSAY * 40)
    for task in ("niah_single_2", "niah_multikey_3", "cwe"):
        s = ruler.make_sample(task, 0, 4096, encode, lists, sents)
        assert 4096 - 120 <= total(s, encode) <= 4096


def test_report_means_pairs_and_skips():
    import report

    def row(task, seed, protocol, ratio, source, name, score, error=""):
        return dict(task=task, seed=str(seed), protocol=protocol, ratio=str(ratio), source=source, row=name,
                    score="" if error else str(score), error=error)
    rows = [row("a", 0, "aware", 0, "full", "full", 1.0), row("b", 0, "aware", 0, "full", "full", 0.5),
            row("c", 0, "aware", 0, "full", "full", 0.0),
            row("a", 0, "aware", 0.5, "kvevict", "x", 1.0), row("b", 0, "aware", 0.5, "kvevict", "x", 0.5),
            row("c", 0, "aware", 0.5, "kvevict", "x", 0, error="skipped: full scored 0"),
            row("a", 0, "aware", 0.5, "kvpress", "y", 0.0), row("b", 0, "aware", 0.5, "kvpress", "y", 0.25),
            row("b", 0, "aware", 0.5, "kvpress", "z", 0, error="RuntimeError: boom")]
    text = report.tables(rows)
    assert "Full cache: 50.0 ± 28.9 over 3 samples; 75.0 ± 25.0 over the 2 the rows ran" in text
    assert "| kvevict:x | 75.0 ± 25.0 (n=2) |" in text
    assert "| kvpress:y | 12.5 ± 12.5 (n=2) |" in text
    assert "| kvpress:z | — (n=0), 1 failed |" in text
    assert "| 0.5 | kvevict:x | +62.5 ± 37.5 (n=2) |  |" in text  # z: no sample answered
    # Per task, one table per ratio: the full cache, then each row that answered some task (z answered none).
    assert "c = 0.5:\n\n| row | a | b | c |\n|---|---|---|---|\n| full | 100 | 50 | 0 |\n| kvevict:x | 100 | 50 |  |\n" \
        "| kvpress:y | 0 | 25 |  |\n" in text
    # The best kvevict row is ranked on the samples every press answered: v has more samples (an earlier grid's)
    # and the better mean over all of them, x the better one on a and b, which both presses answered.
    rows = [row(t, 0, "aware", 0.5, "kvevict", "x", 1.0) for t in "ab"] + \
        [row(t, 0, "aware", 0.5, "kvevict", "v", s) for t, s in zip("abcd", (0.0, 1.0, 1.0, 1.0))] + \
        [row(t, 0, "aware", 0.5, "kvpress", "y", 0.0) for t in "ab"] + \
        [row(t, 0, "aware", 0.5, "kvpress", "u", 0.0) for t in "abcd"]
    assert "| 0.5 | kvevict:x | +100.0 ± 0.0 (n=2) | +100.0 ± 0.0 (n=2) |" in report.tables(rows)


def test_kept_sets_spans_and_coverage():
    import kept_sets

    def encode(text):  # one token per word
        return text.split()
    context = "a b needle-1 c d needle-2 e"
    # "needle-1" is word 2: the prefix "a b " has 2 tokens, with one token of slack each side -> [1, 4)
    assert kept_sets.value_spans(encode, context, ["needle-1", "needle-2"]) == [(1, 4), (4, 7)]
    with pytest.raises(SystemExit, match="'zzz' is not in the context verbatim"):
        kept_sets.value_spans(encode, context, ["zzz"])
    kept = {(0, 0): {1, 2, 3}, (0, 1): {2}, (1, 0): set(), (1, 1): {1, 2, 3, 9}}
    whole, share = kept_sets.coverage(kept, [(1, 4)], 2, 2)
    assert whole == 2 and share == pytest.approx((1 + 1 / 3 + 0 + 1) / 4)

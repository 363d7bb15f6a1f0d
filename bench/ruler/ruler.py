"""RULER-style synthetic long-context tasks, generated locally and deterministically (no downloaded benchmark data).

Follows the task definitions of RULER (Hsieh et al., "RULER: What's the Real Context Size of Your Long-Context
Language Models?", COLM 2024, arXiv 2404.06654; NVIDIA/RULER scripts/data/synthetic and its synthetic.yaml):

  niah_single_1   noise haystack, key a word pair, value a 7-digit number
  niah_single_2   essay haystack, word key, 7-digit value
  niah_single_3   essay haystack, word key, UUID value
  niah_multikey_1 essay haystack, 4 needles (3 distractor keys), word keys, numbers
  niah_multikey_2 a haystack of needles (every line a needle with another key), word keys, numbers
  niah_multikey_3 a haystack of needles, UUID keys, UUID values
  niah_multivalue essay haystack, one key with 4 values (all to be found)
  niah_multiquery essay haystack, 4 keys asked for in one question
  vt              variable tracking: 1 chain of 4 hops (VAR X = 12345, VAR Y = VAR X, ...) in the noise haystack
  cwe             common words extraction: 10 words x 30 among uncommon words x 3, a numbered list
  fwe             frequent words extraction: coded words drawn from a Zipf law (alpha 2), the 3 most frequent

What differs from RULER (this is version 1; the results in bench/ruler/results were made with it):
  * the "essay" haystack is TinyStories' validation text (../shared/data/tinystories-val; RULER downloads Paul
    Graham's essays), whole sentences from a seeded offset;
  * word keys and the CWE words come from the `wonderwords` package's lists, as RULER's (adjective-noun pairs for
    keys; nouns, adjectives and verbs for CWE);
  * no in-context example for CWE and VT (RULER puts a worked example before each: it shows the answer's form);
  * the needle templates stay plural ("What are all the special magic numbers for ...") where RULER turns them
    singular for one needle ("What is the special magic number for ...");
  * every haystack is joined with spaces and needles go at DEPTHS (RULER: "\n" between the noise and needle
    haystacks' lines, needles at random lines there; DEPTHS only in the essay);
  * FWE: the answer is the 3 most frequent coded words by count, drawn from Zipf's law, rank 1 included, a " .... "
    between groups of ten; RULER's counts are floor(N k^-alpha / zeta(alpha)), its rank-1 word is the "..." noise
    and the answer is ranks 2-4;
  * CWE keeps RULER's 4K frequencies (30 / 3) at every length (RULER uses 6 / 1 below 4,096);
  * the prompt (context + question + answer prefix) fills `length`; RULER keeps room for the answer's tokens;
  * the prompts are plain completion text (no chat template), each question closed by RULER's answer prefix;
  * niah_multiquery also carries one question per key (`followups`): the query-agnostic protocol asks them one
    after another against one compressed context (issue 54).

A sample is made from (task, seed, length, encode): `encode(text) -> list of token ids` is the model's tokenizer;
the haystack is grown (binary search over its units) to the longest context whose context + question + answer
prefix fits `length` tokens. Same (task, seed, length, encode, essay text) -> the same sample, on any machine
(random.Random seeded with a string is stable across Python versions).

Scoring (score): RULER's string_match_all, the fraction of expected strings found (case-insensitive) in the
answer.
"""
import bisect
import importlib.resources
import random
import re
import string
import uuid
import warnings

TASKS = {
    "niah_single_1": dict(kind="niah", haystack="noise", key="words", value="numbers"),
    "niah_single_2": dict(kind="niah", haystack="essay", key="words", value="numbers"),
    "niah_single_3": dict(kind="niah", haystack="essay", key="words", value="uuids"),
    "niah_multikey_1": dict(kind="niah", haystack="essay", key="words", value="numbers", num_k=4),
    "niah_multikey_2": dict(kind="niah", haystack="needle", key="words", value="numbers"),
    "niah_multikey_3": dict(kind="niah", haystack="needle", key="uuids", value="uuids"),
    "niah_multivalue": dict(kind="niah", haystack="essay", key="words", value="numbers", num_v=4),
    "niah_multiquery": dict(kind="niah", haystack="essay", key="words", value="numbers", num_q=4),
    "vt": dict(kind="vt", num_chains=1, num_hops=4),
    "cwe": dict(kind="cwe", freq_cw=30, freq_ucw=3, num_cw=10),
    "fwe": dict(kind="fwe", alpha=2.0),
}
# Answer caps per task family: RULER's tokens_to_generate (synthetic.yaml: niah 128, vt 30, cwe 120, fwe 50) cut
# to what the longest expected answer needs here (4 seven-digit numbers or a UUID with digits split, ~40 tokens;
# 10 numbered words ~60), since a small model that misses rambles to the cap and the cap is most of a row's time.
MAX_NEW_TOKENS = {"niah": 48, "vt": 30, "cwe": 64, "fwe": 32}

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NIAH_TEMPLATE = ("Some special magic {type_v} are hidden within the following text. Make sure to memorize it. I will "
                 "quiz you about the {type_v} afterwards.\n{context}\n")
NIAH_QUESTION = "What are all the special magic {type_v} for {query} mentioned in the provided text?"
NIAH_PREFIX = " The special magic {type_v} for {query} mentioned in the provided text are"
NEEDLE = "One of the special magic {type_v} for {key} is: {value}."
VT_TEMPLATE = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n"
VT_QUESTION = "Question: Find all variables that are assigned the value {query} in the text above."
VT_PREFIX = (" Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are "
             "assgined the value {query}, they are: ")  # sic: RULER's spelling
CWE_TEMPLATE = ("Below is a numbered list of words. In these words, some appear more often than others. Memorize the "
                "ones that appear most often.\n{context}\n")
CWE_QUESTION = "Question: What are the {num_cw} most common words in the above list?"
CWE_PREFIX = " Answer: The top {num_cw} words that appear most often in the list are:"
FWE_TEMPLATE = ("Read the following coded text and track the frequency of each coded word. Find the three most "
                "frequently appeared coded words. {context}\n")
FWE_QUESTION = ("Question: Do not provide any explanation. Please ignore the dots '....'. What are the three most "
                "frequently appeared words in the above coded text?")
FWE_PREFIX = " Answer: According to the coded text above, the three most frequently appeared words are:"
DEPTHS = [round(100 * i / 39) for i in range(40)]  # RULER: np.linspace(0, 100, 40), rounded


def word_lists():
    """wonderwords' nouns, adjectives and verbs (RULER's word lists), in file order."""
    try:
        with warnings.catch_warnings():  # wonderwords 2.2 loads its lists at import through a deprecated API
            warnings.simplefilter("ignore", DeprecationWarning)
            from wonderwords import assets
    except ImportError as e:
        raise ImportError("bench/ruler needs the wonderwords package (RULER's word lists): it is pinned in "
                          "scripts/get-hf-venv.sh's venv") from e
    out = {}
    for name in ("noun", "adjective", "verb"):
        text = importlib.resources.files(assets).joinpath(f"{name}list.txt").read_text(encoding="utf-8")
        out[name] = [w.strip() for w in text.splitlines() if w.strip()]
    return out


def essay_sentences(text):
    """The essay haystack's units: the text's sentences, whitespace collapsed."""
    flat = re.sub(r"\s+", " ", text).strip()
    return [s for s in re.split(r"(?<=[.!?])\s+", flat) if s]


class _Maker:
    def __init__(self, task, seed, words, sentences):
        self.cfg = TASKS[task]
        self.rng = random.Random(f"{task}:{seed}")
        self.words, self.sentences = words, sentences

    def key(self, kind):
        if kind == "uuids":
            return self.uuid()
        return f"{self.rng.choice(self.words['adjective'])}-{self.rng.choice(self.words['noun'])}"

    def value(self, kind):
        return self.uuid() if kind == "uuids" else str(self.rng.randint(1000000, 9999999))

    def uuid(self):
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))


def _fit(build, encode, length, lo=1, hi=1 << 16):
    """The largest n in [lo, hi] whose build(n) (text, ...) encodes to at most `length` tokens, and its result:
    doubling from lo, then bisection (O(log n) encodes of at most twice the final text)."""
    def fits(n):
        return len(encode(build(n)[0])) <= length
    if not fits(lo):
        raise ValueError(f"ruler: length {length} tokens leaves no room for a haystack")
    bad = None
    while bad is None:
        nxt = min(2 * lo, hi)
        if nxt == lo:
            raise ValueError(f"ruler: length {length} tokens is more than this task's {hi} haystack units fill "
                             "(its word pool or stream is too small for it)")
        if fits(nxt):
            lo = nxt
        else:
            bad = nxt
    while bad - lo > 1:
        mid = (lo + bad) // 2
        if fits(mid):
            lo = mid
        else:
            bad = mid
    return lo, build(lo)


def _niah(m, encode, length):
    c = m.cfg
    num_k, num_v, num_q = c.get("num_k", 1), c.get("num_v", 1), c.get("num_q", 1)
    type_v = c["value"]
    keys = []
    while len(keys) < max(num_k, num_q):
        k = m.key(c["key"])
        if k not in keys:
            keys.append(k)
    values = [[m.value(type_v) for _ in range(num_v)] for _ in keys]
    needles = [NEEDLE.format(type_v=type_v, key=k, value=v) for k, vs in zip(keys, values) for v in vs]
    m.rng.shuffle(needles)
    depths = sorted(m.rng.sample(DEPTHS, len(needles)))
    asked = list(range(num_q))
    query = keys[0] if num_q == 1 else ", ".join(keys[:num_q - 1]) + ", and " + keys[num_q - 1]
    answers = [v for i in asked for v in values[i]]
    start = m.rng.randrange(len(m.sentences))
    distract = m.rng.getrandbits(64)  # unit i of the needle haystack: its own stream, whatever the haystack's size

    made = {}

    def unit(i):
        if i not in made:
            made[i] = make_unit(i)
        return made[i]

    def make_unit(i):
        if c["haystack"] == "noise":
            return NOISE
        if c["haystack"] == "essay":
            return m.sentences[(start + i) % len(m.sentences)]
        r = random.Random(f"{distract}:{i}")
        while True:  # another key (never one of the sample's)
            k = (str(uuid.UUID(int=r.getrandbits(128), version=4)) if c["key"] == "uuids"
                 else f"{r.choice(m.words['adjective'])}-{r.choice(m.words['noun'])}")
            if k not in keys:
                break
        v = str(uuid.UUID(int=r.getrandbits(128), version=4)) if type_v == "uuids" else str(r.randint(1000000, 9999999))
        return NEEDLE.format(type_v=type_v, key=k, value=v)

    tail = NIAH_QUESTION.format(type_v=type_v, query=query) + NIAH_PREFIX.format(type_v=type_v, query=query)

    def build(n):
        units = [unit(i) for i in range(n)]
        for j, (needle, depth) in enumerate(zip(needles, depths)):  # depths ascending: later needles after earlier
            units.insert(min(len(units), depth * n // 100 + j), needle)
        context = NIAH_TEMPLATE.format(type_v=type_v, context=" ".join(units))
        return context + tail, context

    _, (_, context) = _fit(build, encode, length)
    questions = [(NIAH_QUESTION.format(type_v=type_v, query=query), NIAH_PREFIX.format(type_v=type_v, query=query),
                  answers)]
    followups = [(NIAH_QUESTION.format(type_v=type_v, query=keys[i]), NIAH_PREFIX.format(type_v=type_v, query=keys[i]),
                  values[i]) for i in asked] if num_q > 1 else questions
    return context, questions, followups, dict(keys=keys[:num_q], depths=depths)


def _vt(m, encode, length):
    c = m.cfg
    names = set()

    def name():
        while True:
            n = "".join(m.rng.choice(string.ascii_uppercase) for _ in range(5))
            if n not in names:
                names.add(n)
                return n
    chains, answers = [], []
    for _ in range(c["num_chains"]):
        value = str(m.rng.randint(10000, 99999))
        chain = [name() for _ in range(c["num_hops"] + 1)]
        stmts = [f"VAR {chain[0]} = {value}."] + [f"VAR {chain[i + 1]} = VAR {chain[i]}." for i in range(c["num_hops"])]
        chains.append((value, chain, stmts))
    value, chain, _ = chains[0]
    answers = chain
    stmts = [s for _, _, st in chains for s in st]
    fractions = sorted(m.rng.random() for _ in stmts)
    question = VT_QUESTION.format(query=value)
    prefix = VT_PREFIX.format(num_v=len(chain), query=value)

    def build(n):
        units = [NOISE] * n
        for j, (s, f) in enumerate(zip(stmts, fractions)):  # in chain order
            units.insert(min(len(units), int(f * n) + j), s)
        context = VT_TEMPLATE.format(context=" ".join(units))
        return context + question + prefix, context

    _, (_, context) = _fit(build, encode, length)
    questions = [(question, prefix, answers)]
    return context, questions, questions, dict(value=value)


def _cwe(m, encode, length):
    c = m.cfg
    pool = sorted(set(m.words["noun"] + m.words["adjective"] + m.words["verb"]))
    m.rng.shuffle(pool)
    common, rest = pool[:c["num_cw"]], pool[c["num_cw"]:]
    order = random.Random(m.rng.getrandbits(64)).random()
    question = CWE_QUESTION.format(num_cw=c["num_cw"])
    prefix = CWE_PREFIX.format(num_cw=c["num_cw"])

    def build(n):
        listed = common * c["freq_cw"] + rest[:n] * c["freq_ucw"]
        random.Random(order).shuffle(listed)
        context = CWE_TEMPLATE.format(context=" ".join(f"{i + 1}. {w}" for i, w in enumerate(listed)))
        return context + question + prefix, context

    _, (_, context) = _fit(build, encode, length, lo=1, hi=len(rest))
    questions = [(question, prefix, list(common))]
    return context, questions, questions, {}


def _fwe(m, encode, length):
    c = m.cfg
    vocab = []
    while len(vocab) < 2000:  # coded words: 6 lowercase letters, distinct (RULER: coded_wordlen 6)
        w = "".join(m.rng.choice(string.ascii_lowercase) for _ in range(6))
        if w not in vocab:
            vocab.append(w)
    # Zipf's law over ranks 1.. (numpy.random.zipf's distribution, truncated at the vocabulary): P(r) ~ r^-alpha.
    weights = [r ** -c["alpha"] for r in range(1, len(vocab) + 1)]
    cum, total = [], 0.0
    for w in weights:
        total += w
        cum.append(total)
    draw = random.Random(m.rng.getrandbits(64))
    stream = [vocab[bisect.bisect_left(cum, draw.random() * total)] for _ in range(1 << 14)]
    question, prefix = FWE_QUESTION, FWE_PREFIX

    def build(n):
        words = stream[:n]
        context = FWE_TEMPLATE.format(context=" .... ".join(" ".join(words[i:i + 10]) for i in range(0, n, 10)))
        return context + question + prefix, (context, words)

    n, (_, (context, words)) = _fit(build, encode, length, lo=30, hi=len(stream))
    counts = {}
    for w in words:
        counts[w] = counts.get(w, 0) + 1
    top = sorted(counts, key=lambda w: (-counts[w], vocab.index(w)))[:3]
    questions = [(question, prefix, top)]
    return context, questions, questions, dict(counts=[counts[w] for w in top], fourth=sorted(counts.values())[-4])


def make_sample(task, seed, length, encode, words, sentences):
    """One sample of `task` (a key of TASKS) for `seed` (an int), at most `length` tokens of context + question +
    answer prefix under `encode`. `words`: word_lists(); `sentences`: essay_sentences(text) (the essay haystack).

    Returns a dict: task, seed, context (text), questions ([(question, answer_prefix, answers)]: RULER's, one per
    sample), followups (the same, or niah_multiquery's one question per key), max_new_tokens, info (the sample's
    hidden facts: keys and needle depths, the VT value, FWE's counts). Raises ValueError for an unknown task or a
    length too small for the task's frame."""
    if task not in TASKS:
        raise ValueError(f"ruler: unknown task {task!r}; expected one of {', '.join(TASKS)}")
    if not sentences:
        raise ValueError("ruler: the essay haystack has no sentences")
    m = _Maker(task, seed, words, sentences)
    kind = TASKS[task]["kind"]
    context, questions, followups, info = {"niah": _niah, "vt": _vt, "cwe": _cwe, "fwe": _fwe}[kind](m, encode, length)
    return dict(task=task, seed=seed, context=context, questions=questions, followups=followups,
                max_new_tokens=MAX_NEW_TOKENS[kind], info=info)


def score(answer, expected):
    """RULER's string_match_all: the fraction of `expected` strings found in `answer`, case-insensitive."""
    low = answer.lower()
    return sum(e.lower() in low for e in expected) / len(expected)

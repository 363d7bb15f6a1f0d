"""Relative links of a Markdown file that lead nowhere, for check_readme_snippets.py and check_readme_outputs.py.

A link `[text](target)` or image `![alt](target)` outside code (fenced blocks and `inline code`) whose target
has no scheme (`https:`, `mailto:`, ...) is relative: its path, taken from the file's folder, must exist
(a file or a folder), and its `#anchor`, if any, must be a heading of the Markdown file it names (the file
itself for a bare `#anchor`), spelt as GitHub spells heading anchors: lower case, punctuation other than
`-` and `_` dropped, spaces turned into `-`, a repeated heading suffixed `-1`, `-2`, ... An explicit
`<a id="...">` / `<a name="...">` counts as an anchor too. Anchors into files other than Markdown are not
checked.

Also the root of the repository a Markdown file belongs to, for the commands and snippet paths of its
markers: its folder, or the parent of that folder when it is `docs/`.
"""
import pathlib
import re

FENCE = re.compile(r"^\s{0,3}(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"""<a\s+(?:id|name)\s*=\s*["']([^"']+)["']""")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]*(?:\([^()\s]*\)[^()\s<>]*)*)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def repo_root(markdown: pathlib.Path) -> pathlib.Path:
    """The folder the markers of `markdown` are relative to: the repository root."""
    folder = markdown.resolve().parent
    return folder.parent if folder.name == "docs" else folder


def outside_fences(text: str):
    """Yields (line number, line) for every line outside fenced code blocks (the fences left out too)."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            continue
        yield number, line


def prose_lines(text: str):
    """Yields (line number, line) for every line outside fenced code blocks, inline code blanked."""
    for number, line in outside_fences(text):
        yield number, INLINE_CODE.sub(lambda c: " " * len(c.group(0)), line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors by its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set:
    """Every anchor a Markdown text defines."""
    found, seen = set(), {}
    for _, line in outside_fences(text):
        found.update(HTML_ANCHOR.findall(line))
        h = HEADING.match(line)
        if h:
            base = slug(h.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(markdown: pathlib.Path) -> list:
    """(line number, target, why) for every relative link of `markdown` that leads nowhere."""
    text = markdown.read_text(encoding="utf-8")
    cache = {}

    def anchors_of(path):
        if path not in cache:
            cache[path] = anchors(path.read_text(encoding="utf-8"))
        return cache[path]

    broken = []
    for number, line in prose_lines(text):
        for m in LINK.finditer(line):
            target = m.group(1)
            if not target or SCHEME.match(target) or target.startswith("//"):
                continue
            path_part, _, anchor = target.partition("#")
            path = (markdown.parent / path_part).resolve() if path_part else markdown.resolve()
            if not path.exists():
                broken.append((number, target, f"{path_part} does not exist"))
                continue
            if anchor and path.is_file() and path.suffix.lower() == ".md" and anchor not in anchors_of(path):
                broken.append((number, target, f"no heading with the anchor #{anchor} in {path.name}"))
    return broken


def report(markdown: pathlib.Path) -> int:
    """Prints each broken link of `markdown`; returns how many there are."""
    broken = broken_links(markdown)
    for number, target, why in broken:
        print(f"{markdown}:{number}: broken link ({target}): {why}")
    return len(broken)

#!/usr/bin/env python3
"""Fails when a code block of the README or the manual (docs/*.md) drifts from the file it shows.

A block is tied to a file by a marker line right above its opening fence:

    <!-- snippet: examples/api_tour.cpp -->
    ```cpp
    ...the file's exact content...
    ```

The path is relative to the repository root (--root; by default the Markdown file's folder, or its parent
for a page in docs/), so a page keeps the spelling `examples/...` wherever it lives. Every Markdown file
given is also checked for relative links to a file or `#anchor` that does not exist (md_links.py).

Usage: check_readme_snippets.py [--root DIR] [README.md docs/PAGE.md ...] (default: README.md at the
repository root). Exit 0 when every marked block equals its file byte for byte, every relative link
leads somewhere and at least one block is marked in all the files together; 1 otherwise, printing a
unified diff per drifted block and a line per broken link.
"""
import argparse
import difflib
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import md_links  # noqa: E402

MARKER = re.compile(r"^<!-- snippet: (\S+) -->$")


def check(readme: pathlib.Path, root: pathlib.Path):
    """(failures, checked blocks) of one Markdown file."""
    lines = readme.read_text(encoding="utf-8").split("\n")
    checked = failures = 0
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if not m:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            print(f"{readme}:{i + 1}: snippet marker for {m.group(1)} is not followed by a code fence")
            failures += 1
            continue
        end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            print(f"{readme}:{i + 2}: unterminated code block for {m.group(1)}")
            failures += 1
            continue
        shown = "\n".join(lines[i + 2:end]) + "\n"
        path = root / m.group(1)
        actual = path.read_text(encoding="utf-8") if path.exists() else ""
        checked += 1
        if shown != actual:
            failures += 1
            print(f"{readme}:{i + 3}: the block differs from {m.group(1)}:")
            sys.stdout.writelines(difflib.unified_diff(actual.splitlines(True), shown.splitlines(True),
                                                       str(m.group(1)), f"{readme.name} block"))
    failures += md_links.report(readme)
    if failures == 0:
        print(f"{readme}: {checked} snippet(s) match their files, relative links resolve")
    return failures, checked


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=pathlib.Path,
                        help="the repository root (default: each file's folder, or its parent for docs/)")
    parser.add_argument("readmes", nargs="*", type=pathlib.Path)
    args = parser.parse_args(argv[1:])
    readmes = args.readmes or [pathlib.Path(__file__).resolve().parent.parent / "README.md"]
    failures = checked = 0
    for readme in readmes:
        f, c = check(readme, args.root.resolve() if args.root else md_links.repo_root(readme))
        failures, checked = failures + f, checked + c
    if checked == 0:
        print("no <!-- snippet: ... --> marker found in " + ", ".join(map(str, readmes)))
        failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""Fails when a README code block drifts from the file it shows.

A block is tied to a file by a marker line right above its opening fence:

    <!-- snippet: examples/api_tour.cpp -->
    ```cpp
    ...the file's exact content...
    ```

Usage: check_readme_snippets.py [README.md ...] (default: README.md at the repository root).
Exit 0 when every marked block equals its file byte for byte (and at least one is marked),
1 otherwise, printing a unified diff per drifted block.
"""
import difflib
import pathlib
import re
import sys

MARKER = re.compile(r"^<!-- snippet: (\S+) -->$")


def check(readme: pathlib.Path) -> int:
    root = readme.parent
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
    if checked == 0:
        print(f"{readme}: no <!-- snippet: ... --> marker found")
        failures += 1
    if failures == 0:
        print(f"{readme}: {checked} snippet(s) match their files")
    return failures


def main(argv):
    readmes = [pathlib.Path(a) for a in argv[1:]] or [pathlib.Path(__file__).resolve().parent.parent / "README.md"]
    return 1 if sum(check(r) for r in readmes) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

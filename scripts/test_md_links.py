#!/usr/bin/env python3
"""md_links.py finds exactly the dead relative links: a tiny README and docs/ page with good and bad links,
links inside code that must be ignored, GitHub's anchor spelling (punctuation dropped, `-1` for a repeated
heading), and check_readme_snippets.py failing on a dead link and passing once it is fixed.

Usage: test_md_links.py (run by ctest as markdown_link_check_self_test). Exit 0 on success, 1 with a message."""
import pathlib
import subprocess
import sys
import tempfile

SCRIPTS = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))
import md_links  # noqa: E402

README = """# Demo

## Quick start: `bash`, then go!

## Notes
## Notes

[page](docs/page.md) [its part](docs/page.md#the-engines-loop) [self](#quick-start-bash-then-go)
[second notes](#notes-1) [a folder](docs/) [web](https://example.org/missing.md) [mail](mailto:a@b.c)
![missing image](docs/missing.png) [no part](docs/page.md#nowhere) [no notes](#notes-2)
`[in inline code](nope.md)`

```sh
[in a fence](nope.md)
```

<!-- snippet: docs/code.txt -->
```
x
```
"""

PAGE = """# Page

## The engine's loop

[back](../README.md#notes) [up and wrong](../README.md#demo-1) [file](code.txt) [gone](gone.md)
"""


def fail(message):
    print(f"test_md_links.py: {message}")
    sys.exit(1)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "docs").mkdir()
        (root / "README.md").write_text(README)
        (root / "docs" / "page.md").write_text(PAGE)
        (root / "docs" / "code.txt").write_text("x\n")

        got = {(n, t) for n, t, _ in md_links.broken_links(root / "README.md")}
        want = {(10, "docs/missing.png"), (10, "docs/page.md#nowhere"), (10, "#notes-2")}
        if got != want:
            fail(f"README.md: broken links {sorted(got)}, expected {sorted(want)}")
        got = {(n, t) for n, t, _ in md_links.broken_links(root / "docs" / "page.md")}
        want = {(5, "../README.md#demo-1"), (5, "gone.md")}
        if got != want:
            fail(f"docs/page.md: broken links {sorted(got)}, expected {sorted(want)}")
        if md_links.repo_root(root / "docs" / "page.md") != root.resolve():
            fail("the root of a docs/ page is not the parent of docs/")

        check = [sys.executable, str(SCRIPTS / "check_readme_snippets.py"), str(root / "README.md")]
        run = subprocess.run(check, capture_output=True, text=True)
        if run.returncode != 1 or "broken link (docs/missing.png)" not in run.stdout:
            fail(f"check_readme_snippets.py should fail on the dead links (exit {run.returncode}):\n{run.stdout}")
        (root / "README.md").write_text(README.replace("![missing image](docs/missing.png) ", "")
                                        .replace("[no part](docs/page.md#nowhere) [no notes](#notes-2)", ""))
        run = subprocess.run(check, capture_output=True, text=True)
        if run.returncode != 0:
            fail(f"check_readme_snippets.py should pass once the links are fixed (exit {run.returncode}):\n"
                 f"{run.stdout}")
    print("test_md_links.py: ok")


if __name__ == "__main__":
    main()

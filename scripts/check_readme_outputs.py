#!/usr/bin/env python3
"""Fails when an output block of the README or the manual (docs/*.md) differs from what its command prints.

How a block is tied to its command (the counterpart of check_readme_snippets.py, which ties code blocks
to files): a marker comment right above the block's opening fence names the command that prints it,

    <!-- output: ./build/examples/quickstart -->
    ```
    ...what the command prints...
    ```

- The command is run with `bash -c` from the repository root (--root; by default the Markdown file's
  folder, or its parent for a page in docs/, so a page's commands read as typed at the root), stdout and stderr
  together in one pipe (add `2>/dev/null` to the command to leave stderr out). `./build/` at the start
  of a word is replaced by the build folder given with --build-dir, so the marker keeps the README's
  spelling of the command. The marker may span several lines (up to the first `-->`); a line that ends
  in a backslash continues the command, as in a shell.
- Optional lines between the marker and the fence refine the comparison:
    <!-- vary: REGEX -->     text matching REGEX (Python syntax; e.g. timings, `[0-9.]+ tok/s`) is
                             replaced by one placeholder in both the block and the output before comparing;
    <!-- needs: PATH -->     the command reads PATH, relative to $KVEVICT_SHARED_DIR (default: --shared-dir):
                             without it the block is reported as skipped, or fails when KVEVICT_REQUIRE_MODELS=1;
    <!-- exit: N -->         the command's expected exit status (default 0).
- Inside the block, `[...]` stands for any text within one line, and a line that is exactly `...`
  for any number of whole lines (zero or more). Everything else must match exactly, line by line;
  trailing blank lines of the output are ignored.

Every Markdown file given is also checked for relative links to a file or `#anchor` that does not exist
(md_links.py).

Usage: check_readme_outputs.py --build-dir DIR [--shared-dir DIR] [--root DIR] README.md [docs/PAGE.md ...]
Exit 0 when every marked block matches, every relative link leads somewhere and at least one block is
marked in all the files together; 1 otherwise, printing each failing block with the command's output
and a line per broken link.
"""
import argparse
import os
import pathlib
import re
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import md_links  # noqa: E402

OPEN = "<!-- output:"
OPTION = re.compile(r"^<!-- (vary|needs|exit): (.+) -->$")
PLACEHOLDER = "\x00"


def block_regex(block_lines):
    """A regex matching the output a block shows: `[...]` any text in a line, a `...` line any lines."""
    parts = []
    for line in block_lines:
        if line == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(piece) for piece in line.split("[...]")) + r"\n")
    return re.compile("".join(parts))


def parse(readme):
    """Yields (line number, command, options, block lines) for every output marker of `readme`."""
    lines = readme.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        if not lines[i].startswith(OPEN):
            i += 1
            continue
        start = i
        text = lines[i][len(OPEN):]
        while "-->" not in text and i + 1 < len(lines):
            i += 1
            text += "\n" + lines[i]
        command = text.split("-->", 1)[0].replace("\\\n", " ").strip()
        options = {"vary": [], "needs": [], "exit": ["0"]}
        i += 1
        while i < len(lines) and OPTION.match(lines[i]):
            key, value = OPTION.match(lines[i]).groups()
            if key == "exit":
                options["exit"] = [value]
            else:
                options[key].append(value)
            i += 1
        if i >= len(lines) or not lines[i].startswith("```"):
            yield start + 1, command, options, None
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        yield start + 1, command, options, (lines[i + 1:end] if end is not None else None)
        i = (end if end is not None else len(lines)) + 1


def check(readme, root, build_dir, shared_dir, require_models):
    """(failures, blocks checked or skipped) of one Markdown file."""
    checked = failures = skipped = 0
    for lineno, command, options, block in parse(readme):
        where = f"{readme}:{lineno}"
        if block is None:
            print(f"{where}: output marker is not followed by a complete code block")
            failures += 1
            continue
        missing = [p for p in options["needs"] if not (shared_dir / p).exists()]
        if missing:
            if require_models:
                print(f"{where}: needs {shared_dir / missing[0]}, which is missing (KVEVICT_REQUIRE_MODELS=1)")
                failures += 1
            else:
                print(f"{where}: skipped, {shared_dir / missing[0]} is missing")
                skipped += 1
            continue
        run = re.sub(r"(^|(?<=[\s;&|(]))\./build/", lambda m: m.group(1) + str(build_dir) + "/", command)
        proc = subprocess.run(["bash", "-c", run], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=dict(os.environ, KVEVICT_SHARED_DIR=str(shared_dir)))
        output = proc.stdout.decode("utf-8", "replace").rstrip("\n") + "\n"
        shown = list(block)
        for pattern in options["vary"]:
            output = re.sub(pattern, PLACEHOLDER, output)
            shown = [re.sub(pattern, PLACEHOLDER, line) for line in shown]
        checked += 1
        status_ok = proc.returncode == int(options["exit"][0])
        if status_ok and block_regex(shown).fullmatch(output):
            continue
        failures += 1
        print(f"{where}: the block differs from what `{command}` prints (exit {proc.returncode}):")
        print("--- the README block")
        print("\n".join(block))
        print("--- the command's output")
        print(proc.stdout.decode("utf-8", "replace"), end="")
    failures += md_links.report(readme)
    if failures == 0:
        print(f"{readme}: {checked} output block(s) match their commands" +
              (f", {skipped} skipped" if skipped else "") + ", relative links resolve")
    return failures, checked + skipped


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", required=True, type=pathlib.Path, help="the CMake build folder")
    parser.add_argument("--shared-dir", type=pathlib.Path, help="models and data (default $KVEVICT_SHARED_DIR)")
    parser.add_argument("--root", type=pathlib.Path,
                        help="the repository root (default: each file's folder, or its parent for docs/)")
    parser.add_argument("readmes", nargs="+", type=pathlib.Path)
    args = parser.parse_args(argv[1:])
    shared = os.environ.get("KVEVICT_SHARED_DIR") or args.shared_dir
    if shared is None:
        parser.error("--shared-dir or $KVEVICT_SHARED_DIR is required")
    require = os.environ.get("KVEVICT_REQUIRE_MODELS") == "1"
    build_dir = args.build_dir.resolve()
    failures = marked = 0
    for readme in args.readmes:
        root = args.root.resolve() if args.root else md_links.repo_root(readme)
        f, m = check(readme.resolve(), root, build_dir, pathlib.Path(shared).resolve(), require)
        failures, marked = failures + f, marked + m
    if marked == 0:
        print("no <!-- output: ... --> marker found in " + ", ".join(map(str, args.readmes)))
        failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

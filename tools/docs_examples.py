"""The docs' example outputs, made by running their commands.

A fenced block of the docs (or the README) whose first line starts with
`$ irshard` is an example: its `$` lines are the commands (a trailing `\\`
continues one), the rest their output. This runs each example's commands,
in order, from a scratch folder where `examples/`, `tests/` and
`benchmarks/` are the repository's (so `-o set.json` writes there), with
`irshard` this Python's, and

  - by default, says which blocks differ from what the commands print
    today, and exits 1 if any does;
  - `--write` puts what they print in place of each block's output.

What a block shows is the commands' standard output, then each standard
error line that begins `irshard:` (notes, the error line) with the
indented lines under it. A comment on the
line before the block says more:

    <!-- example: keep 1-12,40-44 -->   only those lines, "..." between
    <!-- example: not run: WHY -->      leave the block as it is (it needs
                                        what this machine may lack)

A line that reports a wall-clock measurement (`timing: 20 runs after a
warm-up: median ...`, the simulated step against that median, `searched
in 4.9 s`) is compared with its numbers left out: it says the same today
if only the measurement moved. The examples are made with the oldest JAX
the project supports (the README's install), whose XLA keeps every
collective's source line.

    python tools/docs_examples.py [--write] [--only FILE,...] [--match TEXT]
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINKED = ("examples", "tests", "benchmarks")
DIRECTIVE = re.compile(r"<!--\s*example:\s*(.*?)\s*-->")
# Lines whose numbers are measured on the machine at hand.
MEASURED = re.compile(r"^(timing: \d+ runs after a warm-up: |  simulated step .* against "
                      r"the median$|irshard: note: searched in )")
NUMBER = re.compile(r"[+-]?[0-9][0-9.,]*")


def same(documented: list[str], today: list[str]) -> bool:
    """Whether the block says today what it documents, measured numbers
    aside."""
    def masked(line: str) -> str:
        return NUMBER.sub("#", line) if MEASURED.match(line) else line
    return len(documented) == len(today) and all(
        masked(a) == masked(b) for a, b in zip(documented, today))


@dataclass
class Example:
    path: str
    start: int                 # the index of the block's first line (after ```)
    end: int                   # the index of its closing ```
    commands: list[str]
    output: list[str]
    keep: list[tuple[int, int]] | None
    skip: str | None

    @property
    def where(self) -> str:
        return f"{os.path.relpath(self.path, ROOT)}:{self.start}"


def examples_of(path: str) -> list[Example]:
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```") and i + 1 < len(lines) \
                and lines[i + 1].startswith("$ irshard"):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            body = lines[i + 1:end]
            commands, k = [], 0
            while k < len(body) and body[k].startswith("$ "):
                command = body[k][2:]
                while command.endswith("\\") and k + 1 < len(body):
                    k += 1
                    command = command[:-1] + " " + body[k].strip()
                commands.append(command)
                k += 1
            directive = DIRECTIVE.search(lines[i - 1]) if i else None
            keep = skip = None
            if directive:
                text = directive.group(1)
                if text.startswith("not run"):
                    skip = text
                elif text.startswith("keep "):
                    keep = [tuple(int(x) for x in part.split("-")) if "-" in part
                            else (int(part), int(part))
                            for part in text[5:].split(",")]
            found.append(Example(path, i + 1, end, commands, body[k:], keep, skip))
            i = end
        i += 1
    return found


def run(example: Example, work: str) -> list[str]:
    shown: list[str] = []
    for command in example.commands:
        argv = shlex.split(command)
        if argv[0] == "irshard":
            argv = [sys.executable, "-m", "irshard", *argv[1:]]
        done = subprocess.run(argv, cwd=work, capture_output=True, text=True,
                              env=dict(os.environ, COLUMNS="200"))
        shown += done.stdout.rstrip("\n").split("\n") if done.stdout.strip() else []
        said = False
        for line in done.stderr.split("\n"):
            # An `irshard:` line and the indented lines under it (a hint,
            # the user's code's or JAX's own message).
            said = line.startswith("irshard:") or (said and line[:1].isspace())
            if said:
                shown.append(line)
    if example.keep is None:
        return shown
    kept: list[str] = []
    for n, (first, last) in enumerate(example.keep):
        if n or first > 1:
            kept.append("...")
        kept += shown[first - 1:last]
    if example.keep and example.keep[-1][1] < len(shown):
        kept.append("...")
    return kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--only", default=None, help="files, comma separated")
    parser.add_argument("--match", default=None,
                        help="only the examples whose command contains TEXT")
    options = parser.parse_args()
    paths = [os.path.join(ROOT, "README.md")]
    for folder, _, names in os.walk(os.path.join(ROOT, "docs")):
        paths += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".md")]
    if options.only:
        wanted = {os.path.abspath(p) for p in options.only.split(",")}
        paths = [p for p in paths if p in wanted]
    differ = 0
    with tempfile.TemporaryDirectory(prefix="irshard-docs-") as work:
        for name in LINKED:
            os.symlink(os.path.join(ROOT, name), os.path.join(work, name))
        for path in sorted(paths):
            examples = [e for e in examples_of(path)
                        if options.match is None
                        or any(options.match in c for c in e.commands)]
            if not examples:
                continue
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
            for example in reversed(examples):
                if example.skip:
                    print(f"{example.where}: {example.skip}")
                    continue
                shown = run(example, work)
                if same(example.output, shown):
                    print(f"{example.where}: as documented")
                    continue
                differ += 1
                print(f"{example.where}: differs")
                sys.stdout.writelines(
                    "  " + line + "\n" for line in difflib.unified_diff(
                        example.output, shown, "documented", "today", lineterm="", n=1))
                if options.write:
                    # After the commands' own lines (and their continuations).
                    k = example.start
                    while k < example.end and (lines[k].startswith("$ ")
                                               or lines[k - 1].endswith("\\")):
                        k += 1
                    lines[k:example.end] = shown
            if options.write:
                with open(path, "w", encoding="utf-8") as f:
                    f.write("\n".join(lines))
    print(f"{differ} example(s) differ" + (", rewritten" if options.write and differ else ""))
    return 1 if differ and not options.write else 0


if __name__ == "__main__":
    sys.exit(main())

"""Shardy's own lit tests, run with `irshard opt` in place of `sdy_opt`.

    python benchmarks/shardy_lit.py --shardy SHARDY_GIT [--commit REV]
        [--filecheck PATH] [--tool CMD] [--jobs N] [--only SUBSTRING]

SHARDY_GIT is a clone of openxla/shardy (a work tree or a bare git
directory); REV the commit whose tests to run (default: the one the
installed jaxlib carries, as far as this script knows it). Every RUN line of
`shardy/dialect/sdy/**/test/**.mlir` that calls `sdy_opt` and pipes only into
FileCheck is run with `sdy_opt` replaced by TOOL (default: this
environment's `irshard-opt`) and `FileCheck` by LLVM's, under `bash -o
pipefail` as lit runs it. It prints how many pass, and each failure with the
first line of its output. Nothing of Shardy's is copied into irshard: the
tests are read from the clone into a temporary directory.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass

# The Shardy commit jaxlib's wheels carry, by jaxlib version.
SHARDY_OF_JAXLIB = {"0.10.2": "9cdb2741"}
FILECHECKS = ("FileCheck", "/usr/lib/llvm-14/bin/FileCheck",
              "/usr/lib/llvm-15/bin/FileCheck", "/usr/lib/llvm-16/bin/FileCheck")
TESTS = "shardy/dialect/sdy"


@dataclass
class Run:
    file: str             # relative to the checkout
    index: int            # the RUN line's number in its file, from 1
    command: str          # as written, continuation lines joined
    runnable: str | None  # None, or why it is not run


def run_lines(path: str, rel: str) -> list[Run]:
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    commands, current = [], ""
    for line in lines:
        m = re.match(r"\s*//\s*RUN:\s?(.*)$", line)
        if m is None:
            continue
        text = m.group(1).rstrip()
        if text.endswith("\\"):
            current += text[:-1] + " "
            continue
        commands.append(current + text)
        current = ""
    runs = []
    for i, command in enumerate(commands, 1):
        stages = [s.strip() for s in command.split("|")]
        first = re.sub(r"^not\s+", "", stages[0])
        why = None
        if not first.startswith("sdy_opt"):
            why = f"runs {first.split()[0]}"
        elif any(not s.startswith("FileCheck") for s in stages[1:]):
            why = "pipes into something other than FileCheck"
        runs.append(Run(rel, i, command, why))
    return runs


def extract(shardy: str, commit: str, into: str) -> None:
    git = ["git", f"--git-dir={_git_dir(shardy)}"]
    archive = subprocess.run(git + ["archive", "--format=tar", commit, TESTS],
                             capture_output=True, check=True).stdout
    path = os.path.join(into, "tests.tar")
    with open(path, "wb") as f:
        f.write(archive)
    with tarfile.open(path) as tar:
        tar.extractall(into, filter="data")


def _git_dir(path: str) -> str:
    dot_git = os.path.join(path, ".git")
    return dot_git if os.path.isdir(dot_git) else path


def run_one(run: Run, root: str, tool: str, filecheck: str) -> tuple[bool, str]:
    path = os.path.join(root, run.file)
    command = run.command.replace("%s", _quote(path))
    command = re.sub(r"\bsdy_opt\b", tool, command)
    command = re.sub(r"\bFileCheck\b", _quote(filecheck), command)
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command],
                          capture_output=True, text=True, cwd=os.path.dirname(path),
                          timeout=300)
    output = (done.stderr or done.stdout).strip().splitlines()
    return done.returncode == 0, output[0] if output else f"exit {done.returncode}"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shardy", required=True, help="a clone of openxla/shardy")
    parser.add_argument("--commit", help="the commit whose tests to run")
    parser.add_argument("--tool", help="the command to run in sdy_opt's place")
    parser.add_argument("--filecheck", help="LLVM's FileCheck")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", help="run the files whose path contains this")
    args = parser.parse_args(argv)

    commit = args.commit
    if commit is None:
        import jaxlib
        commit = SHARDY_OF_JAXLIB.get(jaxlib.__version__)
        if commit is None:
            parser.error(f"no known Shardy commit for jaxlib {jaxlib.__version__}; "
                         f"give --commit")
    tool = args.tool or _quote(os.path.join(os.path.dirname(sys.executable),
                                            "irshard-opt"))
    filecheck = args.filecheck or next(
        (shutil.which(f) for f in FILECHECKS if shutil.which(f)), None)
    if filecheck is None:
        parser.error("no FileCheck found (Debian: llvm-14-tools); give --filecheck")

    with tempfile.TemporaryDirectory() as root:
        extract(args.shardy, commit, root)
        runs = []
        for folder, _, names in sorted(os.walk(os.path.join(root, TESTS))):
            if "test" not in os.path.relpath(folder, root).split(os.sep):
                continue
            for name in sorted(names):
                if name.endswith(".mlir"):
                    rel = os.path.relpath(os.path.join(folder, name), root)
                    if args.only is None or args.only in rel:
                        runs += run_lines(os.path.join(root, rel), rel)
        runnable = [r for r in runs if r.runnable is None]
        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda r: run_one(r, root, tool, filecheck),
                                    runnable))
        seconds = time.perf_counter() - start
    failed = [(r, why) for r, (ok, why) in zip(runnable, results) if not ok]
    for r, why in failed:
        print(f"FAIL {r.file} RUN {r.index}: {why}")
    skipped = len(runs) - len(runnable)
    print(f"shardy {commit}: {len(runnable) - len(failed)} of {len(runnable)} "
          f"runnable RUN lines pass with {tool} ({skipped} not runnable: "
          f"another tool or pipe), {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

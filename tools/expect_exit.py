"""Runs a command and succeeds only if it exits with the expected status.

    python tools/expect_exit.py 2 irshard compile bad.py --mesh x=0

lit's internal shell has `not` (any failure) but no way to ask for one exit
code; irshard's codes mean different things (1 a failed check, 2 bad input,
3 an internal failure), so the tests say which one they expect. The command's
output passes through unchanged.
"""

import subprocess
import sys


def main() -> int:
    if len(sys.argv) < 3 or not sys.argv[1].isdigit():
        print("usage: expect_exit.py STATUS COMMAND [ARG...]", file=sys.stderr)
        return 2
    expected = int(sys.argv[1])
    status = subprocess.call(sys.argv[2:])
    if status != expected:
        print(f"expect_exit: '{sys.argv[2]}' exited with {status}, expected "
              f"{expected}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The `irshard` program (and `python -m irshard`): Ctrl-C and SIGTERM are
taken over before anything else is imported, so that an interrupt at any
moment of start-up ends the command as one later would."""

import sys


def main() -> int:
    from irshard.core import interrupts
    interrupts.install()
    from irshard.cli import main as command_line
    return command_line()


if __name__ == "__main__":
    sys.exit(main())

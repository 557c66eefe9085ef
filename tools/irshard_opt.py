"""`irshard-opt`: the same tool as `irshard opt`, under mlir-opt's kind of
name, for build systems and lit configurations that expect one."""

import sys

def main(argv=None) -> int:
    from irshard.core import interrupts
    if argv is None:
        interrupts.install()          # before anything else: see irshard.__main__
    from irshard import cli
    args = list(sys.argv[1:] if argv is None else argv)
    return cli.main(["opt", *args], program=argv is None)


if __name__ == "__main__":
    sys.exit(main())

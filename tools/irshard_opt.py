"""`irshard-opt`: the same tool as `irshard opt`, under mlir-opt's kind of
name, for build systems and lit configurations that expect one."""

import sys

from irshard import cli


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return cli.main(["opt", *args])


if __name__ == "__main__":
    sys.exit(main())

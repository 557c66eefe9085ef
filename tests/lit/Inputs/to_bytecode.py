"""Writes an MLIR text module as bytecode (used by opt/bytecode.mlir)."""

import sys

from irshard import backend

context = backend.ir_context()
from jaxlib.mlir import ir  # noqa: E402

with context:
    module = ir.Module.parse(open(sys.argv[1]).read())
    with open(sys.argv[2], "wb") as f:
        module.operation.write_bytecode(f)

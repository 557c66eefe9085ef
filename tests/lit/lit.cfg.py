"""lit configuration: irshard's regression tests.

Each test is a .py program (or .mlir/.hlo module) whose RUN lines call
`irshard` and pipe its output into `filecheck` (the Python FileCheck). The
`irshard` and `filecheck` found are those of the Python running lit, so
`.venv/bin/lit tests/lit` tests the checkout installed in .venv.
"""

import os
import sys

import lit.formats

config.name = "irshard"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".py", ".mlir"]
config.excludes = ["lit.cfg.py", "Inputs"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
config.test_exec_root = os.path.join(config.test_source_root, "Output")

bin_dir = os.path.dirname(sys.executable)
config.environment["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
config.environment["JAX_PLATFORMS"] = "cpu"
config.environment["TF_CPP_MIN_LOG_LEVEL"] = "1"
for name in ("HOME", "TMPDIR"):
    if name in os.environ:
        config.environment[name] = os.environ[name]

root = os.path.dirname(os.path.dirname(config.test_source_root))
config.substitutions.append(("%python", sys.executable))
config.substitutions.append(("%examples", os.path.join(root, "examples")))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
# Variables not starting with $ are scoped to their CHECK-LABEL block, as
# LLVM's FILECHECK_OPTS=-enable-var-scope makes them (the Python FileCheck
# takes the flag only on its command line).
config.substitutions.append((r"(?<![\w/.-])filecheck(?![\w.-])",
                             "filecheck --enable-var-scope"))
# `%exit N CMD` runs CMD and succeeds only if it exits with status N.
config.substitutions.append(
    ("%exit", f"{sys.executable} {os.path.join(root, 'tools', 'expect_exit.py')}"))
# What XLA prints differs between jaxlib releases (sharding and replica-group
# forms, which instructions keep metadata); a test checks such a line with a
# prefix naming the release, `--check-prefixes=CHECK,CHECK-%jax`, where %jax
# is JAX010, JAX011 or JAX012 for the jaxlib that runs it.
from importlib import metadata  # noqa: E402

_jaxlib = metadata.version("jaxlib").split(".")
config.substitutions.append(("%jax", f"JAX{int(_jaxlib[0])}{int(_jaxlib[1]):02d}"))
# TPU targets compile through libtpu (the tpu extra); tests that need it say
# `REQUIRES: libtpu`.
import importlib.util  # noqa: E402

if importlib.util.find_spec("libtpu") is not None:
    config.available_features.add("libtpu")
elif os.environ.get("IRSHARD_REQUIRE_ALL"):
    lit_config.fatal("libtpu is not installed: the TPU targets' tests cannot "
                     "run (IRSHARD_REQUIRE_ALL)")

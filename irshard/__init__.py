"""irshard: see, test and run how a program gets sharded.

From Python:

    import irshard
    irshard.configure(devices=8)                 # before JAX starts
    report = irshard.compile(step, params, batch, mesh="dp=2,tp=4",
                             rules=[("params/**/w1", "_,tp")])
    report.collectives
    report.check_budget("all-gather<=2", "bytes@dp<=64MiB")
    irshard.run(step, params, batch, mesh="dp=2,tp=4", check=True)
    irshard.compare(report, other)               # as `irshard diff`
    irshard.report(jax.jit(step).lower(params, batch))   # a lowering you have
    irshard.search(step, params, batch, target="tpu-v5e:4x4")   # as `irshard search`
    irshard.show(step, params, batch, mesh="dp=2,tp=4")  # as `irshard show`
    irshard.suggest(step, params, batch, mesh="dp=2,tp=4")   # as `irshard suggest`
    irshard.collectives_of("dump/")              # as `irshard collectives`
    irshard.opt(module_text, "sdy-propagation-pipeline")     # as `irshard opt`
    irshard.devices(); irshard.calibrate("x=8")  # as `irshard devices`, `calibrate`

In a notebook a report (or a diff) shows its summary and its HTML page.

`irshard.load` reads a `.py` or `.mlir` file as the command line does.
Importing this package does not import JAX; the functions above do.
"""

from irshard.core.errors import (BackendError, BudgetExceeded, CheckFailed,  # noqa: F401
                            InputError, IRError, IrshardError, SpecError,
                            UsageError, UserCodeError)

from irshard.core.version import VERSION as __version__  # noqa: E402

# The pipeline's stages, in order, and those the collective report can read.
STAGES = ("stablehlo", "propagated", "partitioned", "optimized")
REPORT_STAGES = ("partitioned", "optimized")

_API = {"compile": "irshard.api", "run": "irshard.api", "compare": "irshard.api",
        "report": "irshard.api", "Report": "irshard.api",
        "configure": "irshard.api", "search": "irshard.api", "show": "irshard.api",
        "suggest": "irshard.api", "collectives_of": "irshard.api", "opt": "irshard.api",
        "devices": "irshard.api", "calibrate": "irshard.api",
        "load": "irshard.frontend",
        "Source": "irshard.frontend"}


__all__ = ["BackendError", "BudgetExceeded", "CheckFailed", "InputError",
           "IRError", "IrshardError", "REPORT_STAGES", "Report", "STAGES",
           "Source", "SpecError", "UsageError", "UserCodeError", "calibrate",
           "collectives_of", "compare", "compile", "configure", "devices", "load", "opt", "report", "run",
           "search", "show", "suggest"]


def __dir__():
    return sorted(set(globals()) | set(_API))


def __getattr__(name):
    if name in _API:
        import importlib
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'irshard' has no attribute {name!r}")

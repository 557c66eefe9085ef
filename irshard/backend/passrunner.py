"""Running MLIR passes registered with the bindings (Shardy's, upstream's)
over a module in place: in this process, or isolated in a forked child
where a pass may abort the process; a failure is `PassFailure` with
MLIR's first diagnostic."""

from __future__ import annotations

import os
from typing import Any, Callable

from irshard.core import interrupts


class PassFailure(Exception):
    """A registered pass failed; `describe` gives MLIR's first diagnostic."""

    def __init__(self, error):
        super().__init__(getattr(error, "message", str(error)))
        self.error = error
        from irshard.backend import locations
        found = locations.file_locations(error.error_diagnostics[0].location) \
            if getattr(error, "error_diagnostics", None) else []
        self.file = found[0][0] if found else ""

    def describe(self, source: str | None = None, first_line: int = 1) -> str:
        from irshard.backend import locations
        return locations.diagnostic_text(self.error, source, first_line)

    def __str__(self) -> str:
        return self.describe()


def run_registered_passes(module, pipeline: str) -> None:
    """Runs a pipeline of passes registered with MLIR (Shardy's, upstream's)
    over `module` (a module or its operation) in place. `pipeline` is MLIR's
    textual form, anchored on the module, e.g.
    `builtin.module(sdy-propagation-pipeline)`."""
    from jaxlib.mlir import ir, passmanager

    operation = getattr(module, "operation", module)
    with operation.context:
        pm = passmanager.PassManager.parse(pipeline)
        try:
            interrupts.call(pm.run, operation)
        except ir.MLIRError as e:
            raise PassFailure(e) from None


def run_registered_passes_isolated(module, pipeline: str,
                                   diagnostics: list | None = None,
                                   record: Callable[[Any], Any] | None = None
                                   ) -> tuple[Any, str | None]:
    """`run_registered_passes` in a forked child, so that a native crash in
    a pass (a Shardy debug option on IR it does not expect) cannot take this
    process down. Returns `(operation, None)` with the child's result, or
    `(None, why)` when the child died of a signal (`why` names it). A pass
    that fails with a diagnostic is run again here, so its `PassFailure`
    is raised as usual. The diagnostics of a child that succeeds (warnings,
    remarks), each as `record` makes it (picklable), are added to
    `diagnostics`. Where `fork` is missing, the passes run in-process."""
    import pickle
    import signal as signals

    from jaxlib.mlir import ir

    operation = getattr(module, "operation", module)
    if not hasattr(os, "fork"):
        run_registered_passes(operation, pipeline)
        return operation, None
    where = interrupts.temp_dir("irshard-passes-")
    result = os.path.join(where, "module.mlirbc")
    try:
        pid = interrupts.fork()
        if pid == 0:
            _passes_in_child(operation, pipeline, result, record)
        child = interrupts.Forked(pid)
        interrupts.track(child)
        try:
            _, status = interrupts.call(os.waitpid, pid, 0)
        except BaseException:
            child.kill()
            child.wait()                    # or the waiting thread reaped it
            raise
        finally:
            interrupts.untrack(child)
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            try:
                name = signals.Signals(number).name
            except ValueError:
                name = f"signal {number}"
            return None, name
        if os.WEXITSTATUS(status) != 0:
            run_registered_passes(operation, pipeline)   # raises its failure
            return operation, None
        with open(result, "rb") as f:
            data = f.read()
        if diagnostics is not None:
            with open(result + ".said", "rb") as f:
                diagnostics += pickle.load(f)
        with operation.context:
            # A clone owns itself; the parsed module's operation would go
            # with the module.
            return ir.Module.parse(data).operation.clone(), None
    finally:
        interrupts.remove(where)


def _passes_in_child(operation, pipeline: str, result: str,
                     record: Callable[[Any], Any] | None) -> None:
    """The forked child of `run_registered_passes_isolated`: runs the
    passes, writes the module to `result` as bytecode and what was said
    beside it (`result.said`), and exits (1 where the passes failed)."""
    import faulthandler
    import pickle
    status = 1
    try:
        # A crash is reported by the parent, in its own words.
        faulthandler.disable()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        said: list = []

        def keep(info) -> bool:
            said.append(record(info))
            return False                # the others see it too

        with operation.context:
            # The parent's thread pool has no threads here.
            operation.context.enable_multithreading(False)
            if record is not None:
                operation.context.attach_diagnostic_handler(keep)
            run_pipeline(operation, pipeline)
            with open(result, "wb") as f:
                operation.write_bytecode(f)
        with open(result + ".said", "wb") as f:
            pickle.dump(said, f)
        status = 0
    finally:
        os._exit(status)


def run_pipeline(operation, pipeline: str) -> None:
    """Runs a textual pipeline on `operation` (in its context, from any
    thread)."""
    from jaxlib.mlir import passmanager
    passmanager.PassManager.parse(pipeline, context=operation.context).run(operation)


def parse_pipeline(pipeline: str, context) -> Any:
    """Parses a textual pipeline with MLIR's own parser (raises ValueError)."""
    from jaxlib.mlir import passmanager
    with context:
        return passmanager.PassManager.parse(pipeline)

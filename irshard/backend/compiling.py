"""XLA compilation: compile options and dump flags, the executable and its
shardings, the partitioner's dump read back, HLO modules from text or a
serialized proto, schedules and opcodes.
"""

from __future__ import annotations

import glob
import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from irshard.backend.devices import (_Progress, cost_analysis, first_line, message,
                                     quiet_native_stderr)
from irshard.backend.tpuslice import tpu_log_errors
from irshard.backend.hlomodules import hlo_module_from_text
from irshard.backend.compilecache import (PersistentCache, assigned_memory,
                                          memory_figures)
from irshard.core import interrupts, syntax
from irshard.core.errors import BackendError, IRError
from irshard.core.phases import phase


# ---------------------------------------------------------------------------
# XLA compilation


def _compile_options(module, num_partitions: int, device_ids: Sequence[int],
                     overrides: dict[str, str] | None,
                     propagate_to_parameters: Sequence[bool],
                     propagate_to_outputs: Sequence[bool]):
    """Compile options as `jax.jit` makes them for the same program."""
    import numpy as np
    from jax._src import compiler
    options = compiler.get_compile_options(
        num_replicas=1, num_partitions=num_partitions,
        device_assignment=np.array([list(device_ids)], dtype=np.int64),
        env_options_overrides=overrides,
        detailed_logging=compiler.use_detailed_logging(module))
    build = options.executable_build_options
    build.use_spmd_partitioning = True
    build.use_shardy_partitioner = True
    build.allow_spmd_sharding_propagation_to_parameters = list(
        propagate_to_parameters)
    build.allow_spmd_sharding_propagation_to_output = list(propagate_to_outputs)
    return options


@dataclass
class CompiledExecutable:
    """A loaded executable and what XLA printed of it."""

    executable: Any
    devices: tuple[Any, ...]
    partitioned_text: str | None     # HLO after SPMD partitioning, if asked
    # Host callbacks the executable calls; they must live as long as it.
    callbacks: Any = None
    log: str = ""                    # what XLA wrote to stderr while compiling
    notes: tuple[str, ...] = ()      # where the executable came from
    # XLA's dump of its buffer assignment and of the buffers' live ranges
    # in the schedule (`*-buffer-assignment.txt`, `*-live-range.txt`);
    # None where the executable was not compiled here (a cache hit).
    buffer_dumps: tuple[str, str] | None = None

    # Where XLA refused to build the executable for running out of memory:
    # its message, and the optimized module it dumped before refusing.
    refused: str | None = None
    optimized_text: str | None = None

    def hlo_modules(self) -> list[Any]:
        if self.executable is None:
            return [hlo_module_from_text(self.optimized_text)]
        return list(self.executable.hlo_modules())

    def memory_stats_later(self) -> Callable[[], dict[str, int]]:
        """`memory_stats`, worked out in a thread while the caller goes on
        (XLA serializes the executable's buffer assignment for it, without
        the GIL): call the result for them."""
        found: list[Any] = []

        def work() -> None:
            try:
                found.append(self.memory_stats())
            except BaseException as e:         # re-raised in the caller
                found.append(e)

        thread = threading.Thread(target=work, name="irshard-memory-stats",
                                  daemon=True)
        thread.start()

        def result() -> dict[str, int]:
            thread.join()
            if isinstance(found[0], BaseException):
                raise found[0]
            return dict(found[0])
        return result

    def memory_stats(self) -> dict[str, int]:
        if self.executable is None:
            return assigned_memory(self.buffer_dumps[0])
        found = memory_figures(self.executable, strict=True)
        assert found is not None
        return found

    def cost(self) -> dict[str, float]:
        """XLA's cost analysis: flops, bytes accessed."""
        if self.executable is None:
            return {}
        return cost_analysis(self.executable)

    def parameter_shardings(self, count: int) -> list[Any]:
        """XLA's sharding of each of the `count` parameters."""
        if self.executable is None:
            return _printed_shardings(self.optimized_text, count, outputs=False)
        return _shardings(self.executable.get_parameter_shardings(), count)

    def output_aliases(self) -> dict[int, int]:
        """Output index -> the parameter whose buffer XLA writes it into (a
        donated input the output replaces), from the executable's module
        (`input_output_alias`)."""
        if self.executable is None:
            return {}
        modules = self.hlo_modules()
        if not modules:
            return {}
        return _aliases(modules[0].as_serialized_hlo_module_proto())

    def output_shardings(self, count: int) -> list[Any]:
        if self.executable is None:
            return _printed_shardings(self.optimized_text, count, outputs=True)
        return _shardings(self.executable.get_output_shardings(), count)


def _shardings(protos, count: int) -> list[Any]:
    # A single-device executable reports no shardings: all are replicated.
    from jaxlib import _hlo
    if protos is None:
        return [_hlo.HloSharding.replicate() for _ in range(count)]
    return [_hlo_sharding(s) for s in protos]


def _hlo_sharding(op_sharding):
    from jaxlib import _hlo
    return _hlo.HloSharding.from_proto(op_sharding)


def hlo_sharding_from_text(text: str):
    """XLA's sharding of printed text: IRError for a malformed device list
    (XLA would abort), RuntimeError for what XLA's parser rejects."""
    from jaxlib import _hlo
    problem = syntax.device_list_problem(text)
    if problem:
        raise IRError(f"malformed sharding {text}: {problem}")
    return _hlo.HloSharding.from_string(text)


def compile_module(module, mesh_devices: Sequence[Any],
                   propagate_to_parameters: Sequence[bool],
                   propagate_to_outputs: Sequence[bool],
                   capture_partitioned: bool = False,
                   callbacks: tuple[tuple[Any, ...], Any] = ((), None),
                   ) -> CompiledExecutable:
    """Compiles a StableHLO module annotated with Shardy shardings for the
    devices of the mesh (logical device i runs on `mesh_devices[i]`).

    `propagate_to_parameters[i]` lets XLA refine argument i's sharding (its
    sharding has open dimensions); `propagate_to_outputs[i]` lets it choose
    result i's (no sharding was given for it). `callbacks` are the host
    callbacks the lowering registered and what keeps them alive.

    With `capture_partitioned`, XLA dumps the module right after SPMD
    partitioning into a temporary directory, read and then removed whatever
    happens (an interrupt included). The compile itself runs where Ctrl-C
    still reaches the command (`interrupts.call`).
    """
    from jax._src import xla_bridge
    from jax._src.lib import _jax as jaxlib_core
    from jax._src.lib import xla_client as xc

    client = getattr(mesh_devices[0], "client", None) or \
        xla_bridge.get_backend(mesh_devices[0].platform)
    compile_only = isinstance(client, jaxlib_core.CompileOnlyPyClient)
    device_list = xc.DeviceList(tuple(mesh_devices))

    def options(overrides: dict[str, Any] | None):
        return _compile_options(module, len(mesh_devices),
                                [d.id for d in mesh_devices], overrides,
                                propagate_to_parameters, propagate_to_outputs)

    cache = found = None
    if not compile_only and not callbacks[0]:
        with phase("compile cache"):
            cache = PersistentCache.of(module, mesh_devices, client,
                                       lambda: options(None))
            if cache is not None:
                found = cache.read(device_list, capture_partitioned)
    if found is not None:
        executable, partitioned, log, dumps = found
        return CompiledExecutable(executable, tuple(mesh_devices), partitioned,
                                  callbacks, log, cache.note("read from"), dumps)
    # A described slice (no devices here) compiles, but cannot load.
    built = _compiled_with_dumps(
        client.compile if compile_only else client.compile_and_load, module,
        mesh_devices, device_list, options, capture_partitioned, callbacks[0])
    if isinstance(built, CompiledExecutable):
        return built                    # what does not fit, reported
    executable, partitioned, log, buffer_dumps, seconds = built
    notes: tuple[str, ...] = ()
    if cache is not None:
        with phase("compile cache"):
            written = cache.write(executable, seconds, partitioned, log,
                                  buffer_dumps)
        notes = cache.note("written to") if written else cache.note(None)
    return CompiledExecutable(executable, tuple(mesh_devices), partitioned,
                              callbacks, log, notes, buffer_dumps)


def _compiled_with_dumps(compile_fn: Callable[..., Any], module,
                         devices: Sequence[Any], device_list,
                         options: Callable[[dict[str, Any]], Any],
                         capture_partitioned: bool, host_callbacks):
    """XLA's compile with its dumps: the buffer assignment always, the
    module after partitioning where asked; read, then removed whatever
    happens. XLA writes through a name that cannot bring the folder back
    once removed (an interruption removes it while XLA compiles on).
    Returns the executable, the partitioned module's text, what XLA wrote
    to stderr, the buffer dumps and the compile's seconds; or, where XLA
    refused it for memory, what does not fit (`_unbuilt`)."""
    import time
    dump_dir = interrupts.temp_dir()
    held = None
    try:
        written_to, held = interrupts.pinned(dump_dir)
        overrides = {"xla_dump_to": written_to, "xla_dump_hlo_as_text": True}
        if capture_partitioned:
            overrides["xla_dump_hlo_pass_re"] = "spmd-partitioning"
        extra = {"host_callbacks": list(host_callbacks)} if host_callbacks else {}
        started = time.monotonic()
        try:
            # What XLA warns about while compiling is captured (findings).
            with quiet_native_stderr() as logged, phase("XLA compile"):
                executable = interrupts.call(
                    compile_fn, module, device_list, options(overrides), **extra,
                    progress=_Progress(logged.terminal,
                                       f"compiling with XLA for "
                                       f"{len(devices)} devices"))
        except Exception as e:  # XlaRuntimeError and friends
            refused = message(e)
            unbuilt = _unbuilt(dump_dir, refused, devices, logged.text,
                               capture_partitioned) \
                if _OUT_OF_MEMORY.search(refused) else None
            if unbuilt is None:
                said = "".join(f"\n{line}" for line in tpu_log_errors(refused))
                raise BackendError(f"XLA failed to compile the module: "
                                   f"{refused}{said}") from None
            return unbuilt
        seconds = time.monotonic() - started
        with phase("dumps read"):
            partitioned = (_read_partitioned_dump(dump_dir, len(devices))
                           if capture_partitioned else None)
            buffer_dumps = _read_buffer_dumps(dump_dir)
    finally:
        with phase("dumps removed"):
            interrupts.remove(dump_dir)
            if held is not None:
                os.close(held)
    return executable, partitioned, logged.text, buffer_dumps, seconds


def _read_partitioned_dump(dump_dir: str, num_devices: int) -> str:
    # After `spmd-partitioning` (`tpu-spmd-partitioning` in libtpu).
    files = sorted(f for f in glob.glob(os.path.join(dump_dir, "*.txt"))
                   if re.search(r"\.after_(tpu-)?spmd-partitioning\.",
                                os.path.basename(f)))
    if not files and num_devices == 1:
        # One device: XLA runs no partitioner, and the per-device program is
        # the module as XLA received it.
        files = sorted(glob.glob(os.path.join(
            dump_dir, "*before_optimizations.txt")))
    if not files:
        raise BackendError("XLA wrote no dump after spmd-partitioning; this "
                           "jaxlib may name its passes differently")
    with open(files[0], encoding="utf-8") as f:
        return f.read()


def _aliases(serialized: bytes) -> dict[int, int]:
    """`HloModuleProto.input_output_alias` (field 8: entries of output
    shape index, parameter number, parameter shape index), read with
    protobuf from a declaration of those fields (unknown ones are skipped):
    output k -> parameter p, for whole (not tuple-element) parameters of a
    flat result tuple, or of a result that is one array (output 0)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    Field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="irshard_alias.proto", package="irshard.alias", syntax="proto3")
    entry = file.message_type.add(name="Entry")
    for name, number, label in (("output_shape_index", 1, "REPEATED"),
                                ("parameter_number", 2, "OPTIONAL"),
                                ("parameter_shape_index", 3, "REPEATED")):
        entry.field.add(name=name, number=number, type=Field.TYPE_INT64,
                        label=getattr(Field, f"LABEL_{label}"))
    alias = file.message_type.add(name="Alias")
    alias.field.add(name="entries", number=1, type=Field.TYPE_MESSAGE,
                    label=Field.LABEL_REPEATED, type_name=".irshard.alias.Entry")
    module = file.message_type.add(name="Module")
    module.field.add(name="input_output_alias", number=8, type=Field.TYPE_MESSAGE,
                     label=Field.LABEL_OPTIONAL, type_name=".irshard.alias.Alias")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    proto = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("irshard.alias.Module"))()
    proto.ParseFromString(serialized)
    found = {}
    for e in proto.input_output_alias.entries:
        # A result that is one array has the empty index.
        index = list(e.output_shape_index)
        if len(index) <= 1 and not e.parameter_shape_index:
            found[int(index[0]) if index else 0] = int(e.parameter_number)
    return found


# How XLA says a module needs more memory than the device has (libtpu:
# "RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm", "... on HBM").
_OUT_OF_MEMORY = re.compile(r"RESOURCE_EXHAUSTED.*(?:[Oo]ut of memory|exceeds available)")


def _unbuilt(dump_dir: str, refused: str, devices, log: str,
             partitioned: bool = False) -> CompiledExecutable | None:
    """What XLA dumped of a module it refused to build for running out of
    memory: the optimized module and its buffer assignment (libtpu writes
    both before refusing). None where it wrote neither."""
    buffer_dumps = _read_buffer_dumps(dump_dir)
    if buffer_dumps is None:
        return None
    prefix = _dump_prefix(dump_dir)
    path = prefix + "after_optimizations.txt" if prefix else None
    if path is None or not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        text = f.read()
    after = None
    if partitioned:
        try:
            after = _read_partitioned_dump(dump_dir, len(devices))
        except BackendError:
            return None
    note = (f"XLA did not build the executable: {first_line(refused)}; this "
            f"report is read from the optimized module and buffer assignment "
            f"it dumped before refusing",)
    return CompiledExecutable(None, tuple(devices), after, ((), None), log, note,
                              buffer_dumps, refused=refused, optimized_text=text)


def _dump_prefix(dump_dir: str) -> str | None:
    """`DIR/module_0000.NAME.` of the largest module with a buffer
    assignment dump."""
    found = [(os.path.getsize(p), p) for p in glob.glob(os.path.join(
        dump_dir, "*after_optimizations-buffer-assignment.txt"))]
    if not found:
        return None
    path = max(found)[1]
    return path[:path.index("after_optimizations-buffer-assignment.txt")]


def _braced(text: str, start: int) -> str:
    """The `{...}` at `text[start]`, nested braces included."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i + 1]
    return text[start:]


def _printed_shardings(text: str, count: int, outputs: bool) -> list[Any]:
    """The entry computation's parameter (or result) shardings as the
    optimized module prints them; replicated where it prints none."""
    from jaxlib import _hlo
    entry = text[text.index("\nENTRY "):] if "\nENTRY " in text else text
    found: dict[int, Any] = {}
    if outputs:
        root = re.search(r"\n\s*ROOT [^\n]*?, sharding=\{", entry)
        if root:
            printed = _braced(entry, root.end() - 1)
            whole = hlo_sharding_from_text(printed)
            parts = whole.tuple_elements() or [whole]
            found = dict(enumerate(parts))
    else:
        for m in re.finditer(r"parameter\((\d+)\), sharding=\{", entry):
            found[int(m.group(1))] = hlo_sharding_from_text(_braced(entry, m.end() - 1))
    return [found.get(i, _hlo.HloSharding.replicate()) for i in range(count)]


def _read_buffer_dumps(dump_dir: str) -> tuple[str, str] | None:
    """The buffer assignment and live ranges XLA dumped after optimizing
    (`after_optimizations`, `cpu_after_optimizations`, ...): of the largest
    module, where a compile dumped several."""
    found = []
    for path in glob.glob(os.path.join(dump_dir, "*after_optimizations-buffer-assignment.txt")):
        ranges = path[:-len("buffer-assignment.txt")] + "live-range.txt"
        if os.path.exists(ranges):
            found.append((os.path.getsize(path), path, ranges))
    if not found:
        return None
    _, assignment, ranges = max(found)
    with open(assignment, encoding="utf-8") as a, \
            open(ranges, encoding="utf-8") as r:
        return a.read(), r.read()

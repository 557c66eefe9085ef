"""irshard from Python: `compile`, `run`, `compare` and `configure`.

The same pipeline as the command line, starting from a function and its
arguments instead of a file: concrete arrays, `jax.ShapeDtypeStruct`s,
Python scalars or pytrees of them (parameters, optimizer state, batches,
typed PRNG keys). It works inside a process that already uses JAX — a
notebook, a pytest test — and raises `irshard.UsageError` (or a subclass)
where the command line prints its error line.

    import irshard
    irshard.configure(devices=8)          # before JAX starts
    report = irshard.compile(train_step, params, opt_state, batch,
                             mesh="fsdp=4,tp=2",
                             rules=[("params/**/w_in", "fsdp,tp")])
    report.collectives
    report.check_budget("all-gather@fsdp<=24", "bytes<=64MiB")
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from irshard.apichecks import (JitArguments, booleans, check_platform, check_run,
                               check_search, checked, is_int, knob_space,
                               number_list, wrong, x64_kept)
from irshard.apiprogram import configure  # noqa: F401 (irshard.configure)
from irshard.apiprogram import (PROGRAM_ARGUMENTS, in_shardings_of, lowering,
                                mesh_of, pipeline)
from irshard.apireport import Report, shown
from irshard.core import threads
from irshard.core.errors import UsageError
from irshard.core.specs import parse_mesh


@checked
def collectives_of(path: str, *, stage: str = "optimized", mesh: Any = None):
    """The report of each module of an HLO file, a serialized module or an
    XLA dump directory, as `irshard collectives PATH` (those that run on
    `mesh`'s device count, when given). The result has `reports`,
    `skipped` and `render_text()`, `render_json()`."""
    from irshard import library
    if not isinstance(path, str):
        raise wrong("path", path, "a path to an HLO file or XLA dump directory")
    return library.collectives_of(path, stage,
                                  mesh_of(mesh, None)[0] if mesh is not None else None)


@checked
def opt(module: str | bytes, pipeline: str, *, split_input_file: bool = False,
        debug_info: bool = False) -> str:
    """Runs a pass pipeline (irshard's passes and Shardy's, in MLIR's
    textual syntax) over a StableHLO + Shardy module (text or bytecode), as
    `irshard opt`; returns the module printed."""
    from irshard.ir import opt as opting
    if not isinstance(module, (str, bytes)):
        raise wrong("module", module, "MLIR text or bytecode")
    if not isinstance(pipeline, str):
        raise wrong("pipeline", pipeline, "passes in MLIR's textual syntax")
    data = module.encode() if isinstance(module, str) else module
    return opting.opt(data, "<module>", pipeline,
                      split_input_file=split_input_file, debug_info=debug_info)


@checked
def compare(a: Any, b: Any, labels: Sequence[str] | None = None):
    """Compares two reports by source line and kind, as `irshard diff`:
    each a report (`compile`'s), its JSON form, or a path to a JSON report,
    HLO file or XLA dump. `labels` name the sides (default: the program and
    its mesh). The result prints as text, shows itself in a notebook, and
    has `to_json()`, `to_html()` and `regressions()`."""
    from irshard.collectives import dumps
    from irshard.reporting import diff as diffing
    if labels is not None and len(labels) != 2:
        raise UsageError(f"labels: expected two, one per side, not {len(labels)}")
    name_a, name_b = labels if labels is not None else (None, None)
    return diffing.compare(dumps.diff_side(a, name_a), dumps.diff_side(b, name_b))


@x64_kept
def compile(fn: Callable[..., Any], *args: Any, mesh: Any = None,
            rules: Sequence[tuple[str, Any]] = (), shardings: Any = None,
            static_argnums: int | Sequence[int] = (),
            grad: bool | str | Sequence[str] | None = None,
            out_shardings: Any = None,
            target: str | None = None, profile: str | None = None,
            explain: bool = False, stage: str = "optimized",
            constraints: Sequence[tuple[str, str]] = (),
            platform: str = "cpu",
            axis_types: str | Sequence[str] | None = None,
            in_shardings: Any = None,
            static_argnames: str | Sequence[str] = (),
            donate_argnums: int | Sequence[int] = (),
            donate_argnames: str | Sequence[str] = (),
            context: Any = None, keras_fit: bool = False,
            verify: bool = False, jobs: int | str | None = None):
    """Partitions `fn(*args)` on `mesh` and returns its collective report.

    `rules` are `(pattern, spec)` pairs over leaf paths, the first match
    applying (`("params/**/w1", "_,tp")`); `shardings` is a pytree prefix of
    specs (strings, `PartitionSpec`s, `NamedSharding`s), one entry per
    positional argument, as `jax.jit`'s `in_shardings`; a leaf neither
    names keeps its own sharding (a `ShapeDtypeStruct`'s or an array's), or
    is replicated. `grad` differentiates the (scalar) function with respect
    to the named arguments (or all with `True`). `constraints` are
    `(match, spec)` pairs, as `--constrain MATCH=SPEC`: the results of the
    ops `match` picks (`dot_general@model.py:12`) get that sharding. With
    `explain`, each collective's `why` says why it exists and its `cause`;
    `verify` confirms each by a recompile without it (`jobs` at once; None:
    one per core, at most 4). The report's
    `stage(name)` prints any stage's IR. `axis_types` makes a spec's mesh
    axes explicit (`"explicit"`, per axis `"dp=explicit"` or
    `("explicit", "auto")`): the function is traced with its inputs'
    shardings in their types; a `jax.sharding.Mesh` brings its own.

    `fn` may be a function the user jitted (`jax.jit`, `nnx.jit`,
    `eqx.filter_jit`, a `functools.partial` of one): it is lowered as JAX
    lowers that object, with its own shardings, donation, static
    arguments and the outputs its wrapper adds; `rules` and `shardings`
    put input shardings on top. As `jax.jit` takes them: `in_shardings`
    (the same as `shardings`), `out_shardings` (a pytree prefix of the
    outputs, or `{index: spec}`), `static_argnums`/`static_argnames`,
    `donate_argnums`/`donate_argnames`. `context` (a context manager, or
    a function returning one) is entered around tracing: `jax.set_mesh`
    and logical axis rules, as MaxText's step needs them. With
    `keras_fit`, `fn` is a compiled Keras model and `args` one batch
    (`x, y`): the report is of the train step its `fit` runs, inputs named
    by Keras' variable paths."""
    arguments = locals()      # the program's arguments, by name
    from irshard import library
    from irshard.stages import staged
    options = _report_options(explain, verify, jobs, stage)
    lowered = lowering(fn, args, mesh, {name: arguments[name]
                                        for name in PROGRAM_ARGUMENTS})
    done = library.compile_program(lowered, options)
    return shown(Report.of(done.report,
                            stages=staged.Pipeline(lowered, done.compiled)))


def _refuse_gspmd_lowering(module) -> None:
    """Refuses a lowering made for GSPMD's propagation: JAX compiles it
    with GSPMD, irshard propagates and partitions with Shardy, so its
    report would not be of the executable JAX builds."""
    from irshard.ir import gspmd
    if gspmd.partitioned_by_gspmd(module):
        raise UsageError(
            "report: this lowering carries GSPMD shardings (mhlo.sharding: "
            "JAX lowered it with jax_use_shardy_partitioner=False) and JAX "
            "compiles it with GSPMD's propagation, which irshard does not "
            "run; lower it again with jax_use_shardy_partitioner=True, or "
            "give irshard.compile the function")


def _report_options(explain: bool, verify: bool, jobs: int | str | None,
                    stage: str = "optimized"):
    """`compile`'s and `report`'s report arguments, checked."""
    from irshard import library
    booleans(explain=explain, verify=verify)
    if stage not in ("optimized", "partitioned"):
        raise UsageError(f"stage '{stage}': the report reads optimized or "
                         f"partitioned HLO")
    if jobs is not None and not verify:
        raise UsageError("jobs: counts verify's recompiles at once; it "
                         "needs verify=True")
    return library.ReportOptions(stage=stage, explain=explain or verify,
                                 verify=verify, jobs=threads.job_count(jobs))


@checked
def report(lowered: Any, *, mesh: Any = None, target: str | None = None,
           profile: str | None = None, platform: str = "cpu",
           explain: bool = False, verify: bool = False,
           jobs: int | str | None = None):
    """The report of a lowering the user already has: a
    `jax.stages.Lowered` or `Traced` (`jax.jit(f).lower(...)`), or a
    framework's (`nnx.jit(f).lower`, `eqx.filter_jit(f).lower`): nothing
    is traced again, its shardings, donation and outputs are as lowered,
    compiled once for its devices. Or a `jax.stages.Compiled` (MaxText's
    `train_compile.py` makes one): its own executable is read, nothing
    compiled again; its report has only the optimized stage.
    `mesh` (a spec or `jax.sharding.Mesh`) is needed only where the
    lowering names no mesh of its own. `explain`, `verify` and `jobs` as
    `compile`'s. A lowering made for GSPMD's propagation
    (`jax_use_shardy_partitioner=False`) is refused: irshard runs Shardy's."""
    from irshard import backend, library
    from irshard.backend import shardy
    from irshard.hardware import targets
    from irshard.stages import staged
    check_platform(platform)
    options = _report_options(explain, verify, jobs)
    if hasattr(lowered, "runtime_executable") and not hasattr(lowered, "compile"):
        return _report_compiled(lowered, mesh, target, profile, platform)
    try:
        found = backend.lowered_of(lowered)
    except (TypeError, AttributeError):
        raise UsageError(f"report: expected a jax.stages.Lowered or Traced "
                         f"(or a framework's), not {type(lowered).__name__}"
                         ) from None
    _refuse_gspmd_lowering(found.module)
    if mesh is not None:
        spec, devices = mesh_of(mesh, None)
    else:
        own = sorted(shardy.meshes(found.module).items())
        own = [m for _, m in own if m.num_devices > 1] or [m for _, m in own]
        spec = own[0] if own else parse_mesh(f"x={len(found.devices or ()) or 1}")
        devices = None
    place = targets.place(target, platform, profile)
    if devices is None:
        devices = list(found.devices) if found.devices and \
            len(found.devices) == spec.num_devices else None
    if devices is None:
        from irshard import frontend
        devices = frontend.Hosting(place).devices(spec)
    name = getattr(getattr(lowered, "_lowering", None), "_name", None) or "lowered"
    lowered_stage = staged.from_lowering(lowered, spec, place, devices, name)
    done = library.compile_program(lowered_stage, options)
    return shown(Report.of(done.report,
                            stages=staged.Pipeline(lowered_stage, done.compiled)))


def _report_compiled(compiled: Any, mesh: Any, target, profile, platform):
    """`report` of a `jax.stages.Compiled`: its own executable, read."""
    from irshard import backend
    from irshard.hardware import targets
    from irshard.stages import staged
    try:
        step = backend.compiled_of(compiled)
    except (TypeError, AttributeError) as e:
        raise UsageError(f"report: cannot read this {type(compiled).__name__}'s "
                         f"executable ({e}); give its Lowered instead") from None
    if mesh is not None:
        spec, _ = mesh_of(mesh, None)
    elif step.mesh is not None:
        spec, _ = mesh_of(step.mesh, None)
    else:
        spec = parse_mesh(f"x={len(step.devices)}")
    if spec.num_devices != len(step.devices):
        raise UsageError(f"report: mesh {spec} has {spec.num_devices} devices; "
                         f"the executable runs on {len(step.devices)}")
    place = targets.place(target, platform, profile)
    optimized = staged.from_compiled(step, spec, place, "compiled")
    return shown(Report.of(optimized.report(),
                            stages=staged.Pipeline(None, optimized)))


@x64_kept
def search(fn: Callable[..., Any], *args: Any, devices: int | None = None,
           target: str | None = None, axes: str | Sequence[str] | None = None,
           budget_time: float = 600.0, static_argnums: int | Sequence[int] = (),
           grad: bool | str | Sequence[str] | None = None,
           profile: str | None = None,
           knobs: Mapping[str, Sequence[Any]] | None = None,
           max_candidates: int | None = None, memory_limit: int | None = None,
           per: str | None = None):
    """Searches the sharding strategies of `fn(*args)` for `devices`
    simulated CPU devices or a `target` (`"tpu-v5e:4x4"`), as `irshard
    search` does: mesh shapes over `axes` (default data, fsdp, tensor)
    times the canonical rule sets, each compiled here, within
    `budget_time` seconds and `max_candidates` compiles, judged against
    `memory_limit` bytes per device (default: the target's capacity).
    With `knobs` (`{"remat": ["none", "full"], "batch": [32, 64]}`), `fn`
    is a factory: `fn(**combination)` returns `(jitted_step, args)`, and
    every combination is searched with the strategies; one it rejects
    (it raises) is listed as invalid; `per` names the knob whose value is
    a step's work (a batch: candidates are ranked by the step per
    example). Candidates whose least possible step (their products at the
    chip's peak, no communication) cannot beat the best so far are pruned.
    The result's `winner.change` has the
    `mesh_text`, `rules` and `knobs` to give `irshard.compile`;
    `to_json()`, `render_text()`, `render_html()`."""
    from irshard import frontend
    from irshard.core import frames
    from irshard.hardware import targets
    from irshard.searching import SearchOptions, search_program
    from irshard.strategy import search as searching
    frames.note_callers()
    names = check_search(axes, budget_time, devices, max_candidates, memory_limit)
    space = knob_space(knobs, args)
    if per is not None and not isinstance(per, str):
        raise wrong("per", per, "a knob's name")
    searching.check_per(per, space, "per=")
    place = targets.place(target, "cpu", profile)
    count = searching.device_count(place.target, devices, "devices=")
    static = number_list("static_argnums", static_argnums)
    function = frontend.Function(fn, tuple(args), (("static_argnums", static),
                                                   ("grad", grad)),
                                 factory=bool(space))
    programs = frontend.programs(frontend.ProgramSpec(
        function, parse_mesh(f"{names[0]}={count}"), place), space)

    def compile_change(change, explain: bool = False):
        step, step_args, context = function.made(change.knobs)
        return compile(step, *step_args, mesh=change.mesh_text,
                       rules=list(change.rules), constraints=list(change.constraints),
                       static_argnums=static, grad=grad, target=target,
                       profile=profile, explain=explain, context=context)

    return search_program(
        programs, place, SearchOptions(
            devices=count, axes=names, budget_s=float(budget_time),
            max_candidates=max_candidates, memory_limit=memory_limit),
        command=(getattr(fn, "__name__", "fn"),), compile_change=compile_change,
        factory=getattr(fn, "__name__", "factory") if space else None,
        knob_space=space, per=per, hosting=frontend.Hosting(place))


@x64_kept
def run(fn: Callable[..., Any], *args: Any, mesh: Any = None,
        rules: Sequence[tuple[str, Any]] = (), shardings: Any = None,
        static_argnums: int | Sequence[int] = (),
        grad: bool | str | Sequence[str] | None = None,
        out_shardings: Any = None,
        check: bool = False, rtol: float | None = None, atol: float | None = None,
        reference: Callable[..., Any] | None = None, seed: int = 0,
        ranges: Mapping[str, tuple[float, float]] | None = None,
        repeat: int | None = None, platform: str = "cpu",
        axis_types: str | Sequence[str] | None = None,
        in_shardings: Any = None,
        static_argnames: str | Sequence[str] = (),
        donate_argnums: int | Sequence[int] = (),
        donate_argnames: str | Sequence[str] = (),
        context: Any = None, keras_fit: bool = False):
    """Compiles as `compile` does and runs the program on the mesh: on the
    values given for concrete arguments, seeded random values for abstract
    ones (`ranges` by path pattern). The report's `run` holds checksums,
    the check and timings; `results` the outputs (a dict by name under
    `grad`). With `check`, a mismatch raises `irshard.CheckFailed` (its
    `report` attribute holds the report)."""
    from irshard import library
    from irshard.running import execution as running
    from irshard.stages import staged
    check_run(seed, rtol, atol, repeat, ranges, check)
    if not isinstance(keras_fit, bool):
        raise wrong("keras_fit", keras_fit, "True or False")
    jit = JitArguments.checked((), static_argnames, donate_argnums,
                                donate_argnames)
    lowered = pipeline(fn, args, mesh, rules,
                       in_shardings_of(shardings, in_shardings),
                       static_argnums, grad, out_shardings, platform,
                       reference, runnable=True, axis_types=axis_types,
                       jit=jit, context=context, keras_fit=keras_fit)
    options = running.RunOptions(
        seed=seed, check=check, rtol=rtol, atol=atol, repeat=repeat,
        ranges=tuple((ranges or {}).items()), given=lowered.given or {},
        keep_values=True)
    options.validate()
    done = library.run_program(lowered, options,
                               library.ReportOptions())
    report = Report.of(done.report,
                       stages=staged.Pipeline(lowered, done.compiled),
                       run=done.result,
                       results=_results(lowered, done.result, bool(grad)))
    shown(report)
    failure = done.failure()
    if failure is not None:
        failure.report = report
        raise failure
    return report


def _results(lowered, result, grad: bool) -> Any:
    """The outputs as the function returns them; gradients by name."""
    import jax
    values = list(result.values or ())
    if not grad and lowered.out_tree is not None \
            and lowered.out_tree.num_leaves == len(values):
        return jax.tree_util.tree_unflatten(lowered.out_tree, values)
    return {decl.name: value for decl, value in zip(lowered.info.outputs, values)}


@x64_kept
def show(fn: Callable[..., Any], *args: Any, mesh: Any = None, **program: Any):
    """Where every input and output of `fn(*args)` lives on `mesh`, from
    the shardings alone, as `irshard show`: the same program arguments as
    `compile` (`rules`, `shardings`, `target`, ...). The result has
    `inputs` and `outputs` (each with its `placements`: device and block)
    and `render_text()`, `render_json()`."""
    from irshard import library
    return library.show_program(lowering(fn, args, mesh, program))


@x64_kept
def suggest(fn: Callable[..., Any], *args: Any, mesh: Any = None, top: int = 3,
            max_candidates: int = 16, **program: Any):
    """Changes that would remove `fn(*args)`'s costliest collectives on
    `mesh`, each compiled here, as `irshard suggest`: the same program
    arguments as `compile`. The result has `render_text()` and
    `render_json()`; each suggestion's command is the command line's."""
    from irshard import library
    for name, value in (("top", top), ("max_candidates", max_candidates)):
        if not is_int(value) or value < 1:
            raise wrong(name, value, "a positive whole number")
    return library.suggest_program(lowering(fn, args, mesh, program),
                                   (), (), (), top=top,
                                   max_candidates=max_candidates)


@checked
def devices(platform: str = "cpu"):
    """The devices of `platform` this process has, as `irshard devices`
    lists them (after `configure` on a CPU). The result has `listing` and
    `render_text()`, `render_json()`."""
    from irshard import backend, library
    check_platform(platform)
    count = backend.device_count(platform) if backend.started() else 1
    return library.devices_of(count, None, platform)


@checked
def calibrate(mesh: str, *, sizes: Sequence[int] | None = None, repeats: int = 5,
              platform: str = "cpu"):
    """Measures each collective kind over `mesh`'s axes on the devices
    present and fits the time model, as `irshard calibrate`: `sizes` are
    result bytes per device (at least 3), `repeats` the timed runs of each.
    The result has `render_text()`, `render_json()` and `profile_json()`
    (what `profile=` reads back, once saved)."""
    from irshard import library
    check_platform(platform)
    if not isinstance(mesh, str):
        raise wrong("mesh", mesh, "a mesh spec such as 'x=4'")
    if not is_int(repeats):
        raise wrong("repeats", repeats, "a whole number of runs")
    if sizes is not None and (isinstance(sizes, (str, bytes)) or not all(
            is_int(s) and s > 0 for s in sizes)):
        raise wrong("sizes", sizes, "positive whole numbers of bytes")
    return library.calibrate_devices(parse_mesh(mesh), sizes, repeats, platform)

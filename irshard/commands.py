"""What each command does with its parsed arguments: the program loaded
(`frontend`), the library's function for the command called, the output
written whole or not at all. The functions are the ones `irshard.api` and
the library offer; what is here is the command line's side of them: its
options read, notes on stderr, files checked before any work.
"""

from __future__ import annotations

import os
import sys

from irshard.core.errors import UsageError
from irshard.core.specs import parse_mesh


def _report_options(args):
    """`compile`'s and `run`'s report options, checked before any work
    (`--budget` parsed); `--format html`, `--verify` and `--group-by
    cause` explain."""
    import dataclasses
    from irshard import library
    from irshard.core import threads
    from irshard.reporting import budget
    verify = getattr(args, "verify", False)
    if getattr(args, "jobs", "auto") != "auto" and not verify:
        raise UsageError("--jobs: runs --verify's recompiles at once; "
                         "it needs --verify")
    options = library.ReportOptions(
        stage=args.stage, explain=args.explain or args.format == "html"
        or verify or getattr(args, "group_by", None) == "cause",
        verify=verify, jobs=threads.job_count(getattr(args, "jobs", "auto")),
        emits=tuple(args.emit), debug_info=args.debug_info)
    return dataclasses.replace(options, budgets=tuple(
        budget.parse_budget(text) for text in args.budget))


def _source(args):
    """The command line's program options as a `frontend.Source`."""
    from irshard import frontend
    from irshard.loading.program import parse_names
    grad = args.grad
    if isinstance(grad, str):
        grad = parse_names(grad, "--grad")
    return frontend.Source(
        path=args.file, mesh=args.mesh, axis_types=args.axis_types,
        fn=args.fn, args_fn=args.args_fn,
        factory=args.factory, knobs=_knobs(args.knob),
        context_fn=getattr(args, "context_fn", None),
        keras_fit=bool(getattr(args, "keras_fit", False)),
        arg_types=tuple(args.arg), shards=tuple(args.shard),
        overrides=tuple(args.override_shard),
        out_shards=tuple(args.out_shard), constraints=tuple(args.constrain),
        grad=grad,
        static=parse_names(args.static, "--static", numbers=True),
        donate=tuple(args.donate),
        reference=getattr(args, "reference", None), platform=args.platform,
        target=args.target, profile=args.profile)


def _knobs(items) -> tuple[tuple[str, object], ...]:
    """`--knob K=V` items as (name, value), each name once."""
    from irshard.loading.fromfile import assignments
    from irshard.core.knobs import knob_value
    return tuple((k, knob_value(v)) for k, v in assignments(items, "--knob", "V").items())


def check_output_path(path: str | None, option: str = "-o") -> None:
    """Fails before any work if `path` cannot be written."""
    from irshard.core import files
    files.check_writable(path, option)


def write_output(path: str | None, text) -> None:
    """Writes to stdout, or whole to `path` (never a half-written file)."""
    from irshard.core import files
    files.emit(path, text)


def _join_timeout(args) -> float | None:
    """How long a process of a multi-process run waits for the others."""
    return args.join_timeout if args.join_timeout is not None else args.timeout


def _load(source, cluster=None, timeout: float | None = None):
    """The program (stage `stablehlo`) of the command's FILE."""
    from irshard import frontend
    return frontend.load(source, cluster, timeout)


def _folds(args) -> bool:
    """Whether the text goes to a terminal, folded (long tables cut to
    their heaviest rows, layouts left out) unless --full."""
    from irshard.core import files
    return (not getattr(args, "full", False) and args.output is None
            and files.STDOUT.isatty())


def _note(text: str) -> None:
    print(f"irshard: note: {text}", file=sys.stderr)


def cmd_compile(args) -> int:
    from irshard import library
    from irshard.stages import output
    options = _report_options(args)
    source = _source(args)
    source.mesh_spec()
    check_output_path(args.output)
    done = library.compile_program(_load(source), options, note=_note)
    if done.report is None:
        write_output(args.output, done.ir_text())
        return 0
    from irshard.core.phases import phase
    with phase("rendering"):
        write_output(args.output, done.ir_text() if options.emits
                     else output.ReportOutput(done.report, done.compiled,
                                              _folds(args), args.group_by)
                     .render(args.format))
    if done.breach is not None:
        raise done.breach
    return 0


def _run_options(args):
    from irshard.core.textinput import split_assignment
    from irshard.running.execution import RunOptions
    from irshard.running.execution import parse_range
    inputs = tuple(split_assignment(item, "--input", "PATH.npy")
                   for item in args.input)
    ranges = tuple(parse_range(item) for item in args.range)
    if len({name for name, _ in ranges}) < len(ranges):
        raise UsageError("--range: an argument is given twice; give it once")
    options = RunOptions(seed=args.seed, inputs=inputs, check=args.check,
                         rtol=args.rtol, atol=args.atol, repeat=args.repeat,
                         save=args.save, progress=True, ranges=ranges,
                         reference=args.reference, trace=args.trace)
    options.validate()
    if args.save:
        check_output_path(args.save, "--save")
    return options


def _cluster(args):
    """This process's place in a multi-process run, or None."""
    from irshard.running import launch
    return launch.cluster(args.processes, args.coordinator, args.process_id,
                          args.num_processes, args.launcher, args.ray_address)


def _stage(name: str) -> None:
    from irshard.running import distributed
    distributed.report_stage(name)


def _launch(args, total_devices: int) -> int:
    """`--processes N`: this process only starts and watches the others."""
    from irshard.running import launch
    return launch.launch(args.argv, args.processes, args.timeout, total_devices,
                         args.platform, args.launcher, args.ray_address,
                         getattr(args, "output", None))


def cmd_run(args) -> int:
    options = _report_options(args)
    if options.emits and args.format == "html":
        raise UsageError("--emit prints IR before the report, which an HTML "
                         "page cannot hold; drop --emit, or use --format text "
                         "or json")
    source = _source(args)
    source.mesh_spec()
    source.placement().check_runnable()
    check_output_path(args.output)
    check_output_path(args.trace, "--trace")
    if args.trace and args.output and \
            os.path.realpath(args.trace) == os.path.realpath(args.output):
        raise UsageError(f"--trace {args.trace} is also -o: give the measured "
                         f"profile a file of its own")
    run = _run_options(args)
    cluster = _cluster(args)
    if args.processes is not None:
        return _launch(args, source.total_devices())
    lowered = _load(source, cluster, _join_timeout(args))
    if not args.random and lowered.given:
        # The values the --args function returned are the inputs; only
        # abstract leaves (ShapeDtypeStructs) are drawn from --seed.
        import dataclasses
        run = dataclasses.replace(run, given=lowered.given)
    from irshard import library
    from irshard.running import execution
    done = library.run_program(lowered, run, options, note=_note, stage=_stage)
    text = execution.RunOutput(done.report, done.result, done.compiled,
                               _folds(args), args.group_by).render(args.format)
    if done.texts:
        text = done.ir_text() + text
    if _is_reporting_process():
        write_output(args.output, text)
    failure = done.failure()
    if failure is not None:
        raise failure
    return 0


def _is_reporting_process() -> bool:
    from irshard import backend
    return backend.process_index() == 0


def cmd_show(args) -> int:
    source = _source(args)
    source.mesh_spec()
    check_output_path(args.output)
    from irshard import library
    write_output(args.output,
                 library.show_program(_load(source)).render(args.format))
    return 0


def cmd_devices(args) -> int:
    found = _cluster(args)
    processes = args.processes or (found.num_processes if found else 1)
    count = parse_mesh(args.mesh).num_devices if args.mesh else processes
    if args.processes is not None:
        return _launch(args, count)
    from irshard import library
    listing = library.devices_of(count, found, args.platform, _join_timeout(args))
    if listing is not None:
        write_output(None, listing.render(args.format))
    return 0


def cmd_calibrate(args) -> int:
    mesh = parse_mesh(args.mesh)
    check_output_path(args.output)
    from irshard import library
    result = library.calibrate_devices(mesh, args.sizes, args.repeats,
                                       args.platform, note=_note_calibrate)
    if args.output:
        from irshard.core import files
        files.write(args.output, result.profile_json())
    write_output(None, result.render(args.format))
    return 0


def _note_calibrate(text: str) -> None:
    print(f"irshard: calibrate: {text}", file=sys.stderr, flush=True)


def cmd_opt(args) -> int:
    from irshard.ir import opt
    if args.list_passes:
        write_output(args.output, opt.list_passes())
        return 0
    if args.file is None:
        raise UsageError("give a .mlir file (or '-' for stdin), or --list-passes")
    check_output_path(args.output)
    from irshard.stages import irfile
    data = irfile.read_bytes(args.file)
    try:
        text = opt.opt(data, args.file, args.pipeline,
                       split_input_file=args.split_input_file,
                       verify_diagnostics=args.verify_diagnostics,
                       print_ir_after_all=args.print_ir_after_all,
                       debug_info=args.debug_info,
                       allow_unregistered_dialect=args.allow_unregistered_dialect)
    except opt.VerifyFailed as e:
        # As mlir-opt: the modules that were made, every mismatch, exit 1.
        if e.output:
            write_output(args.output, e.output)
        sys.stderr.write("".join(line + "\n" for line in e.problems))
        return 1
    write_output(args.output, text)
    return 0


def cmd_collectives(args) -> int:
    check_output_path(args.output)
    mesh = parse_mesh(args.mesh) if args.mesh else None
    from irshard import library
    import dataclasses
    found = library.collectives_of(args.path, args.stage, mesh)
    write_output(args.output, dataclasses.replace(found, group_by=args.group_by)
                 .render(args.format))
    return 0


def cmd_suggest(args) -> int:
    from irshard import library
    source = _source(args)
    source.mesh_spec()
    check_output_path(args.output)
    result = library.suggest_program(
        _load(source), source.shards + source.overrides, source.out_shards,
        source.argv(), is_module=source.is_module, top=args.top,
        max_candidates=args.max_candidates, jobs=args.jobs)
    write_output(args.output, result.render(args.format))
    return 0


def _searched_source(args, own: bool):
    """The program `irshard search` tries strategies for: a Python
    function (its mesh the candidates', or each one's own with `own`)."""
    from irshard import frontend
    from irshard.loading.program import parse_names
    grad = parse_names(args.grad, "--grad") if isinstance(args.grad, str) else args.grad
    source = frontend.Source(
        path=args.file, fn=args.fn, args_fn=args.args_fn, factory=args.factory,
        context_fn=args.context_fn, mesh=None if own else args.mesh,
        arg_types=tuple(args.arg), grad=grad,
        static=parse_names(args.static, "--static", numbers=True),
        donate=tuple(args.donate), target=args.target, profile=args.profile)
    if source.is_module:
        raise UsageError("search traces a Python function: give a .py file, "
                         "not a module")
    return source


def cmd_search(args) -> int:
    import dataclasses
    import json
    from irshard import frontend, searching
    from irshard.core.knobs import knob_values
    from irshard.core.specs import parse_mesh
    from irshard.loading import fromfile
    from irshard.strategy import candidates, compilers, search
    axes = candidates.parse_axes(args.axes)
    budget_s = search.parse_duration(args.budget_time)
    check_output_path(args.output)
    knob_space = [(k, knob_values(v)) for k, v in
                  fromfile.assignments(args.knob, "--knob", "V1,V2,...").items()]
    if knob_space and not args.factory:
        raise UsageError("--knob searches --factory's keywords: give --factory NAME")
    search.check_per(args.per, knob_space)
    own = args.mesh == "own"
    source = _searched_source(args, own)
    placement = source.placement()
    if own and placement.target.kind != "tpu":
        raise UsageError("--mesh own takes each candidate's mesh from its "
                         "arguments, which needs a TPU target (--target tpu-...)")
    fixed = args.mesh is not None
    count = source.mesh_spec().num_devices if fixed and not own \
        else search.device_count(placement.target, args.devices)
    mesh = None if own else source.mesh_spec() if fixed \
        else parse_mesh(f"{axes[0]}={count}")
    programs = frontend.programs(frontend.ProgramSpec(source, mesh, placement),
                                 knob_space)
    program = next(p for _, p in programs if not isinstance(p, str))
    if source.fn is None and source.factory is None:
        source = dataclasses.replace(source, fn=program.function, _resolved={})
    # The program's options; a candidate's --mesh, rules and knobs follow.
    command = source.argv()
    options = searching.SearchOptions(
        devices=count, axes=axes, budget_s=budget_s,
        max_candidates=args.max_candidates, memory_limit=args.memory_limit,
        # auto on a Ray cluster: as many as it has CPUs.
        jobs=(None if args.ray else compilers.default_jobs()) if args.jobs == "auto"
        else args.jobs,
        ray=args.ray,
        cache_dir=None if args.no_cache else (args.cache_dir
                                              or compilers.default_cache_dir()),
        progress=sys.stderr.isatty())
    if args.cache_dir and not args.no_cache:
        compilers.Cache(args.cache_dir, "", option="--cache-dir")   # usable
    result = searching.search_program(
        programs, placement, options, command=command, fixed_mesh=fixed,
        factory=args.factory, knob_space=knob_space,
        cache_salt=compilers.versions_salt(source.path, args.profile)
        + json.dumps(command), per=args.per, hosting=frontend.Hosting(placement))
    write_output(args.output, result.render(args.format))
    _note(result.timing_note())
    return 0


def cmd_diff(args) -> int:
    check_output_path(args.output)
    from irshard import library
    result = library.diff_paths(args.a, args.b, args.module, args.stage)
    write_output(args.output, result.render(args.format))
    regressions = result.regressions()
    if args.fail_on_regression and regressions:
        from irshard.core.errors import Regression
        raise Regression("regression: " + "; ".join(regressions))
    return 0

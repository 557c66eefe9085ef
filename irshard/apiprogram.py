"""The Python API's program: a function and its arguments, as `irshard.api`
takes them, checked into a `frontend.ProgramSpec` and lowered through the
one front door (`frontend.lower`), as `irshard.load` lowers a file; and the
simulated CPU devices asked for before JAX starts (`configure`).

Arguments are checked before anything starts: a wrong type is a
`UsageError` naming the argument and what it takes, never a `TypeError`
from deep inside.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from irshard.apichecks import JitArguments, check_common, check_platform, is_int, wrong
from irshard.core.errors import UsageError
from irshard.core.specs import MeshAxis, MeshSpec, parse_axis_types, parse_mesh


def configure(devices: int = 8, platform: str = "cpu") -> None:
    """Asks for `devices` simulated CPU devices. Call it before anything
    uses JAX; it does nothing when the platform already has enough, and
    says so when JAX started with fewer."""
    from irshard import backend, hosting
    if not is_int(devices) or not 1 <= devices <= backend.MAX_CPU_DEVICES:
        raise wrong("devices", devices, f"a whole number of devices from 1 "
                                         f"to {backend.MAX_CPU_DEVICES}")
    check_platform(platform)
    hosting.ask_devices(devices, platform)


def mesh_of(mesh: Any, axis_types: str | Sequence[str] | None
          ) -> tuple[MeshSpec, Sequence[Any] | None]:
    """A mesh spec (`"dp=2,tp=4"`) with `axis_types` (as `--axis-types`, or
    one per axis), or a `jax.sharding.Mesh` (whose devices, in its order,
    and axis types are used)."""
    if isinstance(mesh, (str, MeshSpec)):
        spec = parse_mesh(mesh) if isinstance(mesh, str) else mesh
        if axis_types is not None:
            if not isinstance(axis_types, str):
                axis_types = ",".join(str(t) for t in axis_types)
            spec = parse_axis_types(axis_types, spec)
        return spec, None
    try:
        shape = getattr(mesh, "shape", None)
        devices = getattr(mesh, "devices", None)
        devices.flat
    except Exception:
        # An AbstractMesh has no devices (reading them raises).
        shape = devices = None
    if not hasattr(shape, "items") or devices is None:
        raise UsageError(f"mesh: expected a spec such as 'dp=2,tp=4' or a "
                         f"jax.sharding.Mesh (with devices), not "
                         f"{type(mesh).__name__}")
    if axis_types is not None:
        raise UsageError("axis_types: a jax.sharding.Mesh brings its own axis "
                         "types; give them to jax.make_mesh(axis_types=...)")
    from irshard import backend
    types = backend.axis_types_of(mesh)
    spec = MeshSpec(tuple(MeshAxis(str(n), int(s), t)
                          for (n, s), t in zip(shape.items(), types)))
    return spec, list(devices.flat)


def context_of(context: Any) -> Callable[[], Any] | None:
    """`context=`: a function returning a context manager, or one."""
    if context is None:
        return None
    if hasattr(context, "__enter__") and hasattr(context, "__exit__"):
        return lambda: context
    if callable(context):
        from irshard.loading.program import checked_context
        return checked_context(context, "context=")
    raise wrong("context", context, "a context manager, or a function "
                                     "returning one (e.g. lambda: "
                                     "jax.set_mesh(mesh))")


def _named_mesh(fn: Callable[..., Any], args: Sequence[Any], shardings: Any):
    """`mesh=` left out: the mesh the arguments' shardings, the `shardings`
    given or the jitted function's own name."""
    from irshard import backend
    try:
        found = backend.named_mesh((args, shardings), fn)
    except backend.BadLowering:
        found = None
    if found is None:
        raise UsageError("mesh: give the device mesh (a spec such as "
                         "'dp=2,tp=4', or a jax.sharding.Mesh): the arguments "
                         "and shardings name none (no NamedSharding)")
    return found


def pipeline(fn: Callable[..., Any], args: Sequence[Any], mesh: Any,
              rules, shardings, static_argnums, grad, out_shardings,
              platform: str, reference=None, target=None, profile=None,
              runnable=False, constraints=(), axis_types=None,
              jit: JitArguments = JitArguments(), context=None,
              keras_fit: bool = False):
    """The API's program checked into a `frontend.ProgramSpec` and lowered
    through the one front door (`frontend.lower`): stage `stablehlo`."""
    from irshard import frontend
    from irshard.core import frames
    from irshard.hardware import targets
    frames.note_callers()
    rules, static_argnums, constraints = check_common(
        rules, static_argnums, grad, out_shardings, target, profile,
        constraints, platform, axis_types)
    if mesh is None:
        mesh = _named_mesh(fn, args, shardings)
    mesh_spec, devices = mesh_of(mesh, axis_types)
    placement = targets.place(target, platform, profile)
    if runnable:
        placement.check_runnable()
    function = frontend.Function(fn, tuple(args), (
        ("rules", list(rules or ())), ("shardings", shardings),
        ("static_argnums", tuple(static_argnums) + jit.static_argnums),
        ("static_argnames", jit.static_argnames),
        ("donate_argnums", jit.donate_argnums),
        ("donate_argnames", jit.donate_argnames),
        ("grad", grad), ("out_shardings", out_shardings),
        ("reference", reference), ("context", context_of(context)),
        ("keras_fit", keras_fit)))
    return frontend.lower(frontend.ProgramSpec(
        function, mesh_spec, placement,
        devices=None if devices is None else tuple(devices),
        constraints=frontend.parse_constraints(
            f"{match}={spec}" for match, spec in constraints)))


# The program's arguments `compile`, `show` and `suggest` take, beside `fn`,
# its arguments and `mesh`, with their defaults (`compile`'s signature
# names each with its type).
PROGRAM_ARGUMENTS: dict[str, Any] = {
    "rules": (), "shardings": None, "static_argnums": (), "grad": None,
    "out_shardings": None, "target": None, "profile": None, "constraints": (),
    "platform": "cpu", "axis_types": None, "in_shardings": None,
    "static_argnames": (), "donate_argnums": (), "donate_argnames": (),
    "context": None, "keras_fit": False}


def lowering(fn: Callable[..., Any], args: Sequence[Any], mesh: Any,
             program: dict[str, Any]):
    """The program `compile`, `show` and `suggest` take, traced and lowered:
    the stage `stablehlo`, as `irshard.load` gives it from a file; each of
    `program`'s names checked first (`PROGRAM_ARGUMENTS`)."""
    for name in program:
        if name not in PROGRAM_ARGUMENTS:
            raise UsageError(f"unexpected argument '{name}'; the program's "
                             f"arguments are {', '.join(PROGRAM_ARGUMENTS)}")
    p = PROGRAM_ARGUMENTS | program
    if not isinstance(p["keras_fit"], bool):
        raise wrong("keras_fit", p["keras_fit"], "True or False")
    jit = JitArguments.checked((), p["static_argnames"], p["donate_argnums"],
                                p["donate_argnames"])
    return pipeline(fn, args, mesh, p["rules"],
                    in_shardings_of(p["shardings"], p["in_shardings"]),
                    p["static_argnums"], p["grad"], p["out_shardings"],
                    p["platform"], target=p["target"], profile=p["profile"],
                    constraints=p["constraints"], axis_types=p["axis_types"],
                    jit=jit, context=p["context"], keras_fit=p["keras_fit"])


def in_shardings_of(shardings: Any, in_shardings: Any) -> Any:
    if shardings is not None and in_shardings is not None:
        raise UsageError("shardings and in_shardings are the same argument; "
                         "give one")
    return in_shardings if in_shardings is not None else shardings

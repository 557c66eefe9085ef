"""The Python API's arguments checked before any work: each mistake is one
`UsageError` line naming the argument, what was given and what is taken
(as the command line's error lines do)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from irshard.core.errors import UsageError


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def wrong(name: str, value: Any, wanted: str) -> UsageError:
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return UsageError(f"{name}={shown}: expected {wanted}")


def booleans(**values: Any) -> None:
    """Each of `values` must be True or False."""
    for name, value in values.items():
        if not isinstance(value, bool):
            raise wrong(name, value, "True or False")


def check_platform(platform: Any) -> None:
    from irshard.backend import PLATFORMS
    if platform not in PLATFORMS:
        raise wrong("platform", platform, " or ".join(repr(p) for p in PLATFORMS))


def number_list(name: str, value: Any) -> tuple[int, ...]:
    """An int or a sequence of ints, as `jax.jit`'s `static_argnums`."""
    if is_int(value):
        return (value,)
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) \
            or not all(is_int(v) for v in value):
        raise wrong(name, value, "an argument number or a sequence of them, "
                                  "e.g. 0 or (0, 2)")
    return tuple(value)


def pairs(name: str, value: Any, example: str) -> list[tuple[str, Any]]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or \
            not all(isinstance(p, (tuple, list)) and len(p) == 2
                    and isinstance(p[0], str) for p in value):
        raise wrong(name, value, f"a list of (pattern, spec) pairs, e.g. {example}")
    return [tuple(p) for p in value]


def name_list(name: str, value: Any) -> tuple[str, ...]:
    """A name or a sequence of names, as `jax.jit`'s `static_argnames`."""
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise wrong(name, value, "an argument name or a sequence of them, "
                                  "e.g. 'state' or ('params', 'state')")
    return tuple(value)


@dataclasses.dataclass(frozen=True)
class JitArguments:
    """What `compile` and `run` take as `jax.jit` does, checked."""

    static_argnums: tuple[int, ...] = ()
    static_argnames: tuple[str, ...] = ()
    donate_argnums: tuple[int, ...] = ()
    donate_argnames: tuple[str, ...] = ()

    @classmethod
    def checked(cls, static_argnums, static_argnames, donate_argnums,
                donate_argnames) -> "JitArguments":
        return cls(number_list("static_argnums", static_argnums),
                   name_list("static_argnames", static_argnames),
                   number_list("donate_argnums", donate_argnums),
                   name_list("donate_argnames", donate_argnames))


def check_common(rules, static_argnums, grad, out_shardings, target, profile,
                  constraints, platform, axis_types) -> tuple:
    rules = pairs("rules", rules, "[('params/**/w', 'x,_')]")
    constraints = pairs("constraints", constraints, "[('dot_general', '_,tp')]")
    numbers = number_list("static_argnums", static_argnums)
    if not (grad is None or isinstance(grad, (bool, str))
            or (isinstance(grad, Sequence) and all(isinstance(g, str) for g in grad))):
        raise wrong("grad", grad, "True, an argument name, or a list of names")
    for name, value in (("target", target), ("profile", profile)):
        if value is not None and not isinstance(value, str):
            raise wrong(name, value, "a string (as --" + name + ")")
    if axis_types is not None and not (isinstance(axis_types, str) or (
            isinstance(axis_types, Sequence)
            and all(isinstance(t, str) for t in axis_types))):
        raise wrong("axis_types", axis_types, "a string such as 'explicit' or "
                                               "one per axis")
    check_platform(platform)
    return rules, numbers, constraints


def check_run(seed, rtol, atol, repeat, ranges, check) -> None:
    import math
    if not is_int(seed):
        raise wrong("seed", seed, "an integer")
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and (isinstance(value, bool)
                                  or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value < 0):
            raise wrong(name, value, "a non-negative number")
    if repeat is not None and (not is_int(repeat) or repeat < 1):
        raise wrong("repeat", repeat, "a positive integer")
    if ranges is not None and not isinstance(ranges, Mapping):
        raise wrong("ranges", ranges, "a mapping of path pattern to (low, high)")
    if not isinstance(check, bool):
        raise wrong("check", check, "True or False")


def knob_space(knobs, args) -> list[tuple[str, tuple[Any, ...]]]:
    """`search`'s knobs as (name, values) pairs, checked."""
    if knobs is None:
        return []
    if args:
        raise UsageError("search: with knobs, fn is a factory that makes its "
                         "arguments; give no arguments")
    if not isinstance(knobs, Mapping) or not knobs or not all(
            isinstance(k, str) and isinstance(v, (list, tuple)) and v
            for k, v in knobs.items()):
        raise wrong("knobs", knobs, "a dict of each knob's values, e.g. "
                                    "{'remat': ['none', 'full']}")
    return [(k, tuple(v)) for k, v in knobs.items()]


def check_search(axes: Any, budget_time: Any, devices: Any, max_candidates: Any,
                 memory_limit: Any) -> tuple[str, ...]:
    """`search`'s own arguments checked; the names of the mesh axes it
    tries (`axes`: a comma-separated string or a sequence of names)."""
    from irshard.strategy import candidates
    if axes is not None and not isinstance(axes, str):
        axes = ",".join(str(a) for a in axes)
    names = candidates.parse_axes(axes)
    if isinstance(budget_time, bool) or not isinstance(budget_time, (int, float)) \
            or not budget_time > 0:
        raise wrong("budget_time", budget_time, "a positive number of seconds")
    for name, value in (("devices", devices), ("max_candidates", max_candidates),
                        ("memory_limit", memory_limit)):
        if value is not None and (not is_int(value) or value < 1):
            raise wrong(name, value, "a positive whole number")
    return tuple(names)


def checked(api: Callable[..., Any]) -> Callable[..., Any]:
    """`api`, whose arguments are checked against its signature first: an
    unknown keyword or a missing argument is a `UsageError` naming what it
    takes, as the command line's usage errors are. Python's collector
    leaves the caller's objects alone during the call (`collector`)."""
    import functools
    import inspect
    signature = inspect.signature(api)

    @functools.wraps(api)
    def call(*args: Any, **kwargs: Any) -> Any:
        from irshard.core import collector
        try:
            signature.bind(*args, **kwargs)
        except TypeError as e:
            raise UsageError(f"{api.__name__}(): {e}; it takes "
                             f"{', '.join(signature.parameters)}") from None
        with collector.young_only():
            return api(*args, **kwargs)
    return call


def x64_kept(api: Callable[..., Any]) -> Callable[..., Any]:
    """`api` (arguments checked) leaves JAX's 64-bit mode as the caller had
    it: a program's 64-bit inputs turn it on for irshard's own trace,
    compile and run only."""
    import functools

    @functools.wraps(api)
    def call(*args: Any, **kwargs: Any) -> Any:
        from irshard import backend
        with backend.x64_kept():
            return api(*args, **kwargs)
    return checked(call)

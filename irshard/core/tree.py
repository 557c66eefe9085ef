"""Paths of pytree leaves, and the rules that pick leaves by path.

A leaf's path is its parameter's name, then the keys on the way to it,
`/`-separated: dict keys as written, sequence indices as numbers, dataclass
and namedtuple fields by name (`params/layers/0/attn/wq`, `batch/tokens`).
Rules name leaves by path or by a glob over paths: `*`, `?` and `[...]` match
within one segment, `**` any number of segments. The first rule that matches
a leaf applies to it.

Pure Python: the path of a JAX key path is formatted without importing JAX.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Generic, Iterable, Sequence, TypeVar

from irshard.core.errors import SpecError

T = TypeVar("T")


def key_name(key: Any) -> str:
    """One segment of a path from a JAX key-path entry (`DictKey`,
    `SequenceKey`, `GetAttrKey`, `FlattenedIndexKey`)."""
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def path_of(root: str, keys: Iterable[Any]) -> str:
    return "/".join([root, *(key_name(k) for k in keys)]) if root else \
        "/".join(key_name(k) for k in keys)


def output_path(keys: Sequence[Any]) -> str:
    """An output leaf's name: `result`, `result/1/m/embed`."""
    return path_of("result", keys)


def grad_path(path: str) -> str:
    """The gradient of input leaf `params/w` is output `grad(params)/w`."""
    return _applied("grad", path)


def updated_path(path: str) -> str:
    """The final value of `jax.Ref` input leaf `state/w` is output
    `updated(state)/w`."""
    return _applied("updated", path)


def _applied(name: str, path: str) -> str:
    head, sep, rest = path.partition("/")
    return f"{name}({head})" + (f"/{rest}" if sep else "")


def check_pattern(pattern: str) -> None:
    if not pattern or pattern.startswith("/") or pattern.endswith("/") \
            or "//" in pattern:
        raise SpecError(f"path pattern '{pattern}' has an empty segment; "
                        f"write segments separated by '/', e.g. params/**/w")
    if any("**" in s and s != "**" for s in pattern.split("/")):
        raise SpecError(f"path pattern '{pattern}': '**' stands for whole "
                        f"segments (params/**/w), not part of one")


def _match(pattern: Sequence[str], path: Sequence[str]) -> bool:
    """Whether the segments of `pattern` match those of `path`: one pass
    over the pattern keeping the set of path positions reached so far, so
    any number of `**` segments costs O(len(pattern) * len(path)) segment
    matches, never backtracking."""
    reached = [True] + [False] * len(path)      # reached[i]: path[:i] matched
    for head in pattern:
        if head == "**":
            # Once a position is reached, every later one is too.
            for i in range(1, len(path) + 1):
                reached[i] = reached[i] or reached[i - 1]
            continue
        step = [False] * (len(path) + 1)
        for i in range(len(path)):
            if reached[i] and fnmatch.fnmatchcase(path[i], head):
                step[i + 1] = True
        reached = step
        if not any(reached):
            return False
    return reached[-1]


def matches(pattern: str, path: str) -> bool:
    """Whether the glob `pattern` matches the leaf path `path`."""
    return _match(pattern.split("/"), path.split("/"))


@dataclass(frozen=True)
class Rule(Generic[T]):
    """`PATTERN=VALUE`: VALUE for the leaves PATTERN matches."""

    pattern: str
    value: T
    text: str = ""          # as the user wrote it, for messages
    option: str = ""        # where it was given (--override-shard), if not
                            # where its list's messages say

    def __post_init__(self):
        check_pattern(self.pattern)

    def matches(self, path: str) -> bool:
        return matches(self.pattern, path)


def first_match(rules: Sequence[Rule[T]], path: str) -> Rule[T] | None:
    return next((rule for rule in rules if rule.matches(path)), None)


def unmatched(rules: Sequence[Rule[T]], paths: Sequence[str]) -> list[Rule[T]]:
    """The rules that match none of `paths`."""
    return [rule for rule in rules if not any(rule.matches(p) for p in paths)]


def listing(paths: Sequence[str], limit: int = 8) -> str:
    """Some paths for a message: `a, b, c (and 12 more)`."""
    shown = ", ".join(paths[:limit]) or "none"
    if len(paths) > limit:
        shown += f" (and {len(paths) - limit} more)"
    return shown


def prefix_value(values: dict[str, T], path: str) -> tuple[str, T] | None:
    """The value whose path is `path` or its longest prefix (a pytree
    prefix, as `jax.jit`'s `in_shardings`): (that path, value)."""
    segments = path.split("/")
    for n in range(len(segments), 0, -1):
        key = "/".join(segments[:n])
        if key in values:
            return key, values[key]
    return None

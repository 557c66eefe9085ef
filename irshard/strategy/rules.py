"""The canonical sharding strategies as `--shard` rules, built from a
program's own input leaves.

A program's leaves are read for their roles, from their paths and shapes
alone:

- the **parameters**: the floating-point leaves of the argument holding the
  most of them (`params`); leaves elsewhere with a parameter's path as
  their tail and its shape (`opt_state/mu/layers/wq`) are its **mirrors**
  and are sharded as it is;
- a **stacked** subtree (a scanned model's layers): leaves of rank two or
  more, at least three, not all of one shape, that share their first
  dimension; that dimension stays unsharded;
- the **model dimension**: the size that the most parameters have as a
  dimension (other than a stacked one): `d_model`;
- the **batch**: the remaining leaves of rank one or more whose first
  dimension is the most common first dimension among them.

Each mesh axis has a role (its name): `data` shards the batch; `fsdp`
shards the batch and one dimension of every weight (its model dimension,
or in the `hidden` variant the other one); `tensor` shards a weight's
first dimension that is not the model dimension (Megatron's pattern: the
output of `w1`/`wq`, the input of `w2`/`wo`, the vocabulary of an
embedding); a square weight takes the column pattern, or the row pattern
when its name says it projects back (`wo`, `out`, `proj`, `down`, `w2`);
`sequence` shards the batch's second dimension; `expert` shards the first
dimension of leaves under an `expert`/`moe` path and the batch. Vectors and
scalars stay replicated. Rules are globs over the paths (`**/layers/*/wq`),
checked to pick exactly the leaves meant.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from irshard.core import tree

ROLES = ("data", "fsdp", "tensor", "sequence", "expert")
BATCH_AXES = ("data", "fsdp", "expert")

# A square weight whose name says it projects back to the model dimension.
_ROW = re.compile(r"(^|[_.])(o|wo|out|output|proj|o_proj|out_proj|down|down_proj|"
                  r"w2|fc2|c_proj|dense_4h_to_h)$|_out$|^w_?out", re.IGNORECASE)
_EXPERT = re.compile(r"expert|moe", re.IGNORECASE)
_FLOAT = ("f16", "bf16", "f32", "f64")


@dataclass(frozen=True)
class LeafShape:
    path: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Role:
    """What a leaf is to the strategies."""

    kind: str                  # weight, vector, scalar, batch, other
    stacked: bool = False      # its first dimension is a layer's
    key: str = ""              # the parameter's path below its argument
    row: bool = False          # a square weight that projects back
    expert: bool = False


def _segments(path: str) -> list[str]:
    return path.split("/")


class Structure:
    """The roles of a program's input leaves."""

    def __init__(self, leaves: Sequence[LeafShape]):
        self.leaves = tuple(leaves)
        by_arg: Counter[str] = Counter()
        for leaf in self.leaves:
            if leaf.dtype in _FLOAT and leaf.shape:
                by_arg[_segments(leaf.path)[0]] += 1
        self.params_arg = "params" if by_arg.get("params") else (
            max(sorted(by_arg), key=lambda a: by_arg[a]) if by_arg else None)
        params = {self._key(leaf): leaf for leaf in self.leaves
                  if self.params_arg and _segments(leaf.path)[0] == self.params_arg}
        self.stacked = self._stacked_prefixes(params)
        self.model_dim = self._model_dim(params)
        self.roles: dict[str, Role] = {}
        rest = []
        for leaf in self.leaves:
            key = self._key(leaf) if _segments(leaf.path)[0] == self.params_arg \
                else self._mirrored(leaf, params)
            if key is not None and key in params:
                self.roles[leaf.path] = self._param_role(params[key], key)
            else:
                rest.append(leaf)
        firsts = Counter(leaf.shape[0] for leaf in rest if leaf.shape)
        self.batch_size = max(sorted(firsts), key=lambda n: firsts[n]) if firsts else None
        for leaf in rest:
            kind = "batch" if leaf.shape and leaf.shape[0] == self.batch_size \
                else ("scalar" if not leaf.shape else "other")
            self.roles[leaf.path] = Role(kind)

    def _key(self, leaf: LeafShape) -> str:
        return "/".join(_segments(leaf.path)[1:])

    def _mirrored(self, leaf: LeafShape, params: dict[str, LeafShape]) -> str | None:
        parts = _segments(leaf.path)
        for i in range(1, len(parts)):
            key = "/".join(parts[i:])
            if key in params and params[key].shape == leaf.shape:
                return key
        return None

    @staticmethod
    def _stacked_prefixes(params: dict[str, LeafShape]) -> frozenset[str]:
        """Subtrees whose leaves share a first (layer) dimension."""
        children: dict[str, list[LeafShape]] = {}
        for key, leaf in params.items():
            parts = key.split("/")
            for depth in range(len(parts) - 1):
                children.setdefault("/".join(parts[:depth + 1]), []).append(leaf)
        found = set()
        for prefix, leaves in children.items():
            if len(leaves) >= 3 and all(len(l.shape) >= 2 for l in leaves) \
                    and len({l.shape[0] for l in leaves}) == 1 \
                    and len({l.shape for l in leaves}) > 1:
                found.add(prefix)
        # The outermost such subtree holds the layer dimension.
        return frozenset(p for p in found
                         if not any(p.startswith(q + "/") for q in found))

    def is_stacked(self, key: str) -> bool:
        return any(key.startswith(p + "/") for p in self.stacked)

    def _model_dim(self, params: dict[str, LeafShape]) -> int | None:
        counts: Counter[int] = Counter()
        for key, leaf in params.items():
            body = leaf.shape[1:] if self.is_stacked(key) else leaf.shape
            if leaf.dtype in _FLOAT and len(body) >= 1:
                for size in set(body):
                    counts[size] += 1
        return max(sorted(counts), key=lambda n: counts[n]) if counts else None

    def _param_role(self, leaf: LeafShape, key: str) -> Role:
        stacked = self.is_stacked(key)
        body = leaf.shape[1:] if stacked else leaf.shape
        kind = "weight" if len(body) >= 2 and leaf.dtype in _FLOAT else (
            "vector" if len(body) == 1 else "scalar")
        name = key.split("/")[-1]
        return Role(kind, stacked, key, row=bool(_ROW.search(name)),
                    expert=bool(_EXPERT.search(key)))

    # -----------------------------------------------------------------
    # Specs

    def weight_dims(self, leaf: LeafShape, role: Role, fsdp_hidden: bool = False,
                    tensor_axis: bool = True
                    ) -> tuple[int | None, int | None, int | None]:
        """(tensor dim, fsdp dim, expert dim) candidates of a weight, before
        divisibility: indices into the full shape."""
        offset = 1 if role.stacked else 0
        body = list(range(offset, len(leaf.shape)))
        expert = None
        if role.expert and len(body) >= 3:
            expert, body = body[0], body[1:]
        model = [d for d in body if leaf.shape[d] == self.model_dim]
        hidden = [d for d in body if leaf.shape[d] != self.model_dim]
        if not tensor_axis:
            tensor = None
        elif hidden:
            tensor = hidden[0]
        else:
            tensor = body[0] if role.row else body[-1]
        if fsdp_hidden:
            others = [d for d in hidden if d != tensor] + model
        else:
            others = model + [d for d in hidden if d != tensor]
        fsdp = next((d for d in others if d != tensor), None)
        return tensor, fsdp, expert


@dataclass(frozen=True)
class Plan:
    """A strategy on a mesh: which roles the axes play."""

    axes: tuple[tuple[str, int], ...]      # (name, size), major to minor
    fsdp_hidden: bool = False              # fsdp on the non-model dimension

    def sizes(self) -> dict[str, int]:
        return dict(self.axes)


def role_of(axis: str) -> str:
    """An axis's role: its name, or the role its name starts with
    (`data2` plays `data`)."""
    for role in ROLES:
        if axis == role or axis.startswith(role):
            return role
    return axis


def _fit(size: int, axes: Sequence[tuple[str, int]]) -> list[str]:
    """The longest prefix of `axes` whose sizes' product divides `size`."""
    chosen, product = [], 1
    for name, n in axes:
        if size % (product * n) == 0:
            chosen.append(name)
            product *= n
    return chosen


def leaf_spec(structure: Structure, leaf: LeafShape, plan: Plan) -> list[str]:
    """The spec entries (`_`, `fsdp`, `data+fsdp`) of one leaf."""
    role = structure.roles.get(leaf.path, Role("other"))
    entries: list[list[str]] = [[] for _ in leaf.shape]
    by_role: dict[str, list[tuple[str, int]]] = {}
    for name, size in plan.axes:
        by_role.setdefault(role_of(name), []).append((name, size))
    if role.kind == "batch":
        batch_axes = [a for r in BATCH_AXES for a in by_role.get(r, [])]
        entries[0] = _fit(leaf.shape[0], batch_axes)
        if len(leaf.shape) >= 2:
            entries[1] = _fit(leaf.shape[1], by_role.get("sequence", []))
    elif role.kind == "weight":
        tensor, fsdp, expert = structure.weight_dims(
            leaf, role, plan.fsdp_hidden, bool(by_role.get("tensor")))
        for dim, axes in ((expert, by_role.get("expert", [])),
                          (tensor, by_role.get("tensor", [])),
                          (fsdp, by_role.get("fsdp", []))):
            if dim is not None and axes:
                entries[dim] = _fit(leaf.shape[dim], axes)
    return ["+".join(e) if e else "_" for e in entries]


def _glob(key: str) -> str:
    """A parameter's path below its argument, with sequence indices as
    `*` (every layer of a list of layers)."""
    return "/".join("*" if part.isdigit() else part for part in key.split("/"))


def build_rules(structure: Structure, plan: Plan) -> tuple[tuple[str, str], ...]:
    """The plan as `(pattern, spec)` rules, first match applying: one rule
    per parameter path (indices as `*`, every mirror included through a
    leading `**`) and per batch group; replicated leaves need none."""
    wanted = {leaf.path: ",".join(leaf_spec(structure, leaf, plan))
              for leaf in structure.leaves}
    replicated = {path for path, spec in wanted.items()
                  if all(e in ("_", "") for e in spec.split(","))}
    rules: dict[str, str] = {}
    for leaf in structure.leaves:
        if leaf.path in replicated:
            continue
        role = structure.roles.get(leaf.path, Role("other"))
        if role.key:
            pattern = "**/" + _glob(role.key)
        else:
            parent = leaf.path.rsplit("/", 1)[0] if "/" in leaf.path else None
            siblings = [l.path for l in structure.leaves if parent and
                        l.path.rsplit("/", 1)[0] == parent]
            same = parent is not None and all(wanted[p] == wanted[leaf.path]
                                              for p in siblings)
            pattern = f"{parent}/*" if same and len(siblings) > 1 else leaf.path
        if rules.get(pattern, wanted[leaf.path]) != wanted[leaf.path]:
            pattern = leaf.path
        rules.setdefault(pattern, wanted[leaf.path])
    ordered = list(rules.items())
    # A glob may pick a leaf meant for another rule, or one meant to stay
    # replicated: such leaves get rules of their own, first.
    exact = []
    for leaf in structure.leaves:
        found = _first(ordered, leaf.path)
        spec = found[1] if found else None
        want = None if leaf.path in replicated else wanted[leaf.path]
        if spec != want:
            exact.append((leaf.path, wanted[leaf.path]))
    # A leaf's own rule goes first, once (a pattern may already be its path).
    mine = {path for path, _ in exact}
    found = tuple(exact + [r for r in ordered if r[0] not in mine])
    if specs_of(structure, found) != {leaf.path: wanted[leaf.path]
                                      for leaf in structure.leaves}:
        # What globs cannot say without picking leaves meant otherwise:
        # each sharded leaf its own rule.
        found = tuple((leaf.path, wanted[leaf.path]) for leaf in structure.leaves
                      if leaf.path not in replicated)
    return found


def _first(rules: Iterable[tuple[str, str]], path: str) -> tuple[str, str] | None:
    for pattern, spec in rules:
        if tree.matches(pattern, path):
            return pattern, spec
    return None


def specs_of(structure: Structure, rules: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Each leaf's spec under `rules` (replicated where none matches)."""
    result = {}
    for leaf in structure.leaves:
        found = _first(rules, leaf.path)
        result[leaf.path] = found[1] if found else ",".join("_" * len(leaf.shape))
    return result

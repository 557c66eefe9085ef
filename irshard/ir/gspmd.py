"""Shardings that other exporters wrote, read as Shardy's.

Modules that did not come from irshard's own tracing carry their shardings in
two older forms:

- GSPMD's `mhlo.sharding` strings on the entry function's arguments and
  results (older `jax.export` artifacts, XLA's own test modules, PyTorch/XLA
  and other frontends): `{devices=[4,1,2]<=[8] last_tile_dim_replicate}`,
  `{replicated}`;
- Shardy's attributes kept as frontend attributes, the way `jax.export`
  serialized them before Shardy's dialect was stable: `xla.sdy.meshes` on the
  module, `xla.sdy.sharding` on arguments and results.

`import_frontend_attributes` lifts the second form into `sdy.mesh` symbols
and `sdy.sharding` attributes in place. `entry_shardings` reads the first
form as `ShardingSpec`s over a mesh (the one given, the module's own, or one
inferred from the tilings) so the annotate step attaches them like any other
sharding; a tiling that is no sharding over the mesh is an error that says
which mesh would do. Callers hold the module's context.
"""

from __future__ import annotations

from typing import Sequence

from jaxlib.mlir import ir

from irshard.backend import shardy
from irshard.core.errors import IRError, SpecError
from irshard.core.specs import MeshAxis, MeshSpec, ShardingSpec, parse_sharding
from irshard.xla.tiling import Tiling, mesh_axes_of

GSPMD_SHARDING = "mhlo.sharding"
FRONTEND_ATTRIBUTES = "mhlo.frontend_attributes"
_SDY_MESHES = "xla.sdy.meshes"
_SDY_SHARDING = "xla.sdy.sharding"
# Names for the axes of a mesh inferred from the tilings alone.
_INFERRED_NAMES = ("x", "y", "z", "w")


def _string(attr: ir.Attribute) -> str:
    return ir.StringAttr(attr).value


def _without(attrs: ir.Attribute | None, key: str) -> ir.Attribute | None:
    """A frontend-attribute dictionary without `key`; None when empty."""
    d = ir.DictAttr(attrs)
    rest = {d[i].name: d[i].attr for i in range(len(d)) if d[i].name != key}
    return ir.DictAttr.get(rest) if rest else None


def import_frontend_attributes(module: ir.Module) -> int:
    """Lifts `xla.sdy.meshes` and `xla.sdy.sharding` frontend attributes into
    `sdy.mesh` symbols and `sdy.sharding` attributes of the entry function's
    arguments and results; returns how many shardings were lifted."""
    top = module.operation.attributes
    if FRONTEND_ATTRIBUTES in top:
        front = ir.DictAttr(top[FRONTEND_ATTRIBUTES])
        if _SDY_MESHES in front:
            text = _string(front[_SDY_MESHES])
            try:
                declared = ir.DictAttr(ir.Attribute.parse(text))
            except (ValueError, ir.MLIRError):
                raise IRError(f"the module's {_SDY_MESHES} frontend attribute "
                              f"is not a dictionary of Shardy meshes: "
                              f"{text[:120]}") from None
            existing = shardy.mesh_ops(module)
            from jaxlib.mlir.dialects import sdy
            with ir.InsertionPoint.at_block_begin(module.body), ir.Location.unknown():
                for i in reversed(range(len(declared))):
                    if declared[i].name not in existing:
                        sdy.MeshOp(declared[i].name, declared[i].attr)
            rest = _without(top[FRONTEND_ATTRIBUTES], _SDY_MESHES)
            if rest is None:
                del top[FRONTEND_ATTRIBUTES]
            else:
                top[FRONTEND_ATTRIBUTES] = rest
    main = shardy.entry_function(module)
    lifted = 0
    for key, count in (("arg_attrs", len(main.type.inputs)),
                       ("res_attrs", len(main.type.results))):
        if key not in main.attributes:
            continue
        dicts = shardy.attr_dicts(main, key, count)
        for index, d in enumerate(dicts):
            front = d.get(FRONTEND_ATTRIBUTES)
            if front is None or _SDY_SHARDING not in ir.DictAttr(front):
                continue
            text = _string(ir.DictAttr(front)[_SDY_SHARDING])
            try:
                sharding = ir.Attribute.parse(text)
            except (ValueError, ir.MLIRError):
                kind = "argument" if key == "arg_attrs" else "result"
                raise IRError(f"{kind} {index}'s {_SDY_SHARDING} frontend "
                              f"attribute is not a Shardy sharding: "
                              f"{text[:120]}") from None
            d.setdefault(shardy.SHARDING, sharding)
            d.pop(GSPMD_SHARDING, None)
            rest = _without(front, _SDY_SHARDING)
            if rest is None:
                del d[FRONTEND_ATTRIBUTES]
            else:
                d[FRONTEND_ATTRIBUTES] = rest
            lifted += 1
        shardy.set_attr_dicts(main, key, dicts)
    return lifted


def partitioned_by_gspmd(module: ir.Module) -> bool:
    """Whether JAX lowered `module` for GSPMD's propagation
    (`jax_use_shardy_partitioner=False`): no `sdy.mesh`, and GSPMD's
    `mhlo.sharding` on an entry argument or result, or on a sharding
    constraint (`custom_call @Sharding`)."""
    if shardy.meshes(module):
        return False
    main = shardy.entry_function(module)
    if _gspmd(main, "arg_attrs", len(main.type.inputs)) or \
            _gspmd(main, "res_attrs", len(main.type.results)):
        return True
    for fn in shardy.functions(module):
        for op in shardy.walk(fn.operation):
            if op.name == "stablehlo.custom_call" \
                    and GSPMD_SHARDING in op.attributes \
                    and _string(op.attributes["call_target_name"]) == "Sharding":
                return True
    return False


def _gspmd(main, key: str, count: int) -> dict[int, str]:
    """index -> `mhlo.sharding` text of the arguments or results that have
    one and no Shardy sharding."""
    if key not in main.attributes:
        return {}
    return {i: _string(d[GSPMD_SHARDING])
            for i, d in enumerate(shardy.attr_dicts(main, key, count))
            if GSPMD_SHARDING in d and shardy.SHARDING not in d}


def _tiling(text: str, rank: int, subject: str) -> Tiling:
    try:
        tiling = Tiling.from_text(text, rank)
    except (RuntimeError, ValueError) as e:
        raise IRError(f"{subject} has {GSPMD_SHARDING} \"{text}\", which XLA "
                      f"cannot read: {str(e).splitlines()[0] if str(e) else e}"
                      ) from None
    if tiling.maximal or tiling.manual or tiling.opaque:
        what = ("puts it on one device" if tiling.maximal else
                "is manual (written per device)" if tiling.manual else
                "is not a tiling of the array")
        raise SpecError(f"{subject} has {GSPMD_SHARDING} \"{text}\", which "
                        f"{what}; irshard reads shardings over a mesh: "
                        f"{{replicated}} or {{devices=[...]...}}")
    return tiling


def _inferred_mesh(tilings: Sequence[Tiling], devices: int | None) -> MeshSpec | None:
    """A mesh over which every tiling is a sharding: the tile counts of the
    most finely tiled one, as axes x, y, z..."""
    candidates = []
    for t in tilings:
        if not t.replicated:
            sizes = tuple(n for n in t.tile_dims if n > 1)
            candidates.append(sizes)
    if not candidates:
        return MeshSpec((MeshAxis("x", devices),)) if devices and devices > 1 else None
    for sizes in sorted(set(candidates), key=lambda s: (-len(s), s)):
        names = [_INFERRED_NAMES[i] if i < len(_INFERRED_NAMES) else f"axis_{i}"
                 for i in range(len(sizes))]
        mesh = MeshSpec(tuple(MeshAxis(n, s) for n, s in zip(names, sizes)))
        if devices not in (None, mesh.num_devices):
            continue
        if all(mesh_axes_of(t, mesh) is not None for t in tilings):
            return mesh
    return None


def entry_shardings(module: ir.Module, mesh: MeshSpec | None, path: str
                    ) -> tuple[MeshSpec | None, dict[int, ShardingSpec],
                               dict[int, ShardingSpec], str | None]:
    """The entry function's GSPMD shardings as (mesh, argument shardings,
    result shardings, note): over `mesh`, else the module's only `sdy.mesh`,
    else a mesh inferred from the tilings (the note says which). The
    `mhlo.sharding` attributes read are removed: the annotate step attaches
    the same shardings as Shardy's."""
    main = shardy.entry_function(module)
    found = {"argument": (_gspmd(main, "arg_attrs", len(main.type.inputs)),
                          list(main.type.inputs)),
             "result": (_gspmd(main, "res_attrs", len(main.type.results)),
                        list(main.type.results))}
    if not any(texts for texts, _ in found.values()):
        return mesh, {}, {}, None
    tilings: dict[tuple[str, int], Tiling] = {}
    for kind, (texts, types) in found.items():
        for index, text in texts.items():
            shape = shardy.tensor_shape(types[index])
            if shape is None:
                raise SpecError(f"{path}: {kind} {index} has type "
                                f"{types[index]}; only statically shaped "
                                f"tensors can be sharded")
            tilings[kind, index] = _tiling(text, len(shape),
                                           f"{path}: {kind} {index}")
    note = None
    if mesh is None:
        declared = shardy.meshes(module)
        if len(declared) == 1:
            mesh = next(iter(declared.values()))
    if mesh is None:
        partitions = module.operation.attributes.get("mhlo.num_partitions") \
            if "mhlo.num_partitions" in module.operation.attributes else None
        devices = ir.IntegerAttr(partitions).value if partitions is not None else None
        mesh = _inferred_mesh(list(tilings.values()), devices)
        if mesh is None:
            raise SpecError(f"{path}: the {GSPMD_SHARDING} shardings of @main "
                            f"do not all tile one mesh; name the mesh with "
                            f"--mesh, e.g. --mesh x=4,y=2")
        note = (f"mesh {mesh} inferred from the module's {GSPMD_SHARDING} "
                f"shardings; give --mesh to name its axes")
    result: dict[str, dict[int, ShardingSpec]] = {"argument": {}, "result": {}}
    for (kind, index), tiling in sorted(tilings.items()):
        entries = mesh_axes_of(tiling, mesh)
        if entries is None:
            raise SpecError(
                f"{path}: {kind} {index} has {GSPMD_SHARDING} "
                f"\"{found[kind][0][index]}\", which is not a sharding over the "
                f"mesh {mesh} ({mesh.num_devices} devices); give a --mesh whose "
                f"axes it tiles (its tile counts: "
                f"{'x'.join(str(n) for n in tiling.tile_dims)})")
        result[kind][index] = parse_sharding(",".join(entries))
    for key, kind, count in (("arg_attrs", "argument", len(main.type.inputs)),
                             ("res_attrs", "result", len(main.type.results))):
        if result[kind]:
            dicts = shardy.attr_dicts(main, key, count)
            for index in result[kind]:
                dicts[index].pop(GSPMD_SHARDING, None)
            shardy.set_attr_dicts(main, key, dicts)
    return mesh, result["argument"], result["result"], note

"""Where a program's devices come from: a placement (`targets.Placement`)
laid onto the devices it needs, asked for before JAX starts where they are
simulated; in a multi-process run, this process's share; on a TPU target,
the slice's chips that libtpu describes."""

from __future__ import annotations

from typing import Any

from irshard.core.errors import UsageError
from irshard.core.specs import MeshSpec


class Hosting:
    """A placement (`targets.Placement`) and the devices it is laid onto:
    asked for before JAX starts, where they are simulated; in a
    multi-process run (`cluster`), this process's share."""

    def __init__(self, placement, cluster=None):
        if placement.target.kind == "tpu" and cluster is not None:
            raise UsageError(f"--target {placement.target.text} compiles for a "
                             f"TPU slice without running; it takes no processes")
        self.placement = placement
        self.cluster = cluster
        self.target = placement.target
        self.platform = placement.platform
        self._configured: int | None = None

    def configure(self, total: int) -> None:
        """Asks for the devices a mesh of `total` needs, once, before JAX
        starts; where it started already with fewer, says how to ask."""
        if self._configured == total:
            return
        self._configured = total
        from irshard import backend
        from irshard.running import distributed
        if self.target.kind == "tpu":
            backend.configure(1, "cpu")
            return
        ask_devices(distributed.local_devices(total, self.cluster, self.platform),
                    self.platform, exact=self.cluster is not None, for_mesh=True)

    def visible(self):
        """A context in which the program sees the target's devices: a TPU
        slice's chips are what `jax.devices()` lists (its import and its
        tracing build meshes from them)."""
        import contextlib

        from irshard import backend
        if self.target.kind != "tpu":
            return contextlib.nullcontext()
        return backend.visible_devices(backend.tpu_slice(
            self.target.topology_name, self.target.slices, self.target.text))

    def all_devices(self, chosen: list[Any]) -> list[Any]:
        """Every device the mesh could be laid onto: the slice's chips, or
        the platform's devices `chosen` for it."""
        from irshard import backend
        if self.target.kind == "tpu":
            return backend.tpu_slice(self.target.topology_name,
                                     self.target.slices, self.target.text)
        return chosen

    def trace(self, program, devices=None):
        """A loaded program traced on its mesh's devices (`devices`, where
        the user gave them): stage `stablehlo` (within `visible()`)."""
        from irshard import backend
        from irshard.stages import staged
        if devices is not None:
            return staged.trace(program, self.placement, list(devices))
        mesh = program.mesh
        devices = self.devices(mesh)
        # A mesh the program built itself with the same axes lays out the
        # devices as the program expects (its shard_maps name that mesh).
        own = backend.own_mesh_devices(program.namespace, mesh.names,
                                       mesh.shape, devices[0].platform)
        if own is not None and set(own) <= set(self.all_devices(devices)):
            devices = own
        return staged.trace(program, self.placement, devices)

    def devices(self, mesh: MeshSpec) -> list[Any]:
        from irshard import backend
        self.target.check_mesh(mesh)
        self.configure(mesh.num_devices)
        if self.target.kind == "tpu":
            return backend.tpu_devices(self.target.topology_name,
                                       self.target.slices, mesh.shape,
                                       mesh.names, self.target.text)
        return backend.devices(self.platform, mesh.num_devices)


def ask_devices(count: int, platform: str, exact: bool = False,
                for_mesh: bool = False) -> None:
    """Asks for `count` devices of `platform` in this process before JAX
    starts (`backend.configure`); once it has started, only checks it has
    as many (`for_mesh`: a mesh needs them), and says how to ask where it
    has fewer."""
    from irshard import backend
    if not backend.started() or (platform == "cpu"
                                 and count > backend.MAX_CPU_DEVICES):
        backend.configure(count, platform, exact=exact)   # or says the limit
        return
    # Only simulated CPU devices are made by asking; a real platform has
    # what it has (and says so where it has too few, or none).
    have = backend.device_count(platform) if platform == "cpu" else count
    if have < count:
        raise UsageError(
            (f"the mesh needs {count} devices but {platform} has {have}: "
             if for_mesh else "")
            + f"JAX has already started with {have} {platform} devices; call "
            f"irshard.configure(devices={count}) before anything uses JAX, "
            f"or set XLA_FLAGS=--xla_force_host_platform_device_count={count}")

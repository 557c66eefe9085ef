"""JAX's persistent compilation cache, as irshard uses it: the executable
kept where JAX keeps it, and what the report also reads of a compile in a
side file beside it, believed only once checked; and the executable's
memory figures, which tie the two together.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any, Callable

from irshard.core import files, interrupts


class PersistentCache:
    """JAX's persistent compilation cache, where the user turned it on
    (`JAX_COMPILATION_CACHE_DIR`, `jax.config`, their program): the
    executable is kept under the key `jax.jit` would give the same module
    and options, so a second compile of it loads it as plain JAX does.
    What the report also reads of a compile — the HLO after partitioning,
    XLA's warnings, its buffer assignment — is kept beside it
    (`irshard-KEY.json`), and an entry without it is no hit.

    That side file lies in a directory others may write to, so it is
    believed only once checked (`_checked`): read as a regular file of
    bounded size, never through a link, a FIFO or a device; signed by this
    user's irshard (`core.signing`); tied to the executable it describes
    (its fingerprint); and its buffer assignment adding up to the
    executable's own memory analysis. One that fails is ignored, the entry
    is compiled again, and the report says so."""

    # A side file larger than this is not read (a large model's partitioned
    # HLO is tens of MB).
    MAX_BYTES = 512 << 20
    VERSION = 2

    def __init__(self, key: str, options, client, directory: str, name: str):
        self.key, self.options, self.client = key, options, client
        self.directory, self.name = directory, name
        self.rejected: str | None = None

    @classmethod
    def of(cls, module, devices, client,
           options_of: Callable[[], Any]) -> "PersistentCache | None":
        """The cache for `module` on `devices` with the options
        `options_of()` makes (without dump flags), or None where the user
        did not turn it on."""
        import numpy as np
        from jax._src import compilation_cache, config
        if not compilation_cache.is_persistent_cache_enabled():
            return None
        directory = str(config.compilation_cache_dir.value)
        options = options_of()
        try:
            if not compilation_cache.is_cache_used(client):
                return None
            key = compilation_cache.get_cache_key(
                module, np.array(list(devices), dtype=object), options, client)
        except Exception:
            # A cache JAX cannot use (an unusable directory) is no cache.
            return None
        name = "irshard"
        if "sym_name" in module.operation.attributes:
            from jaxlib.mlir import ir
            name = ir.StringAttr(module.operation.attributes["sym_name"]).value
        return cls(key, options, client, directory, name)

    @property
    def _beside(self) -> str:
        return os.path.join(self.directory, f"irshard-{self.key}.json")

    def note(self, how: str | None) -> tuple[str, ...]:
        """What the report says of the cache: how the executable went
        (`read from`, `written to`; None: neither), and a side file that
        was not believed."""
        said: tuple[str, ...] = () if how is None else (
            f"the executable was {how} JAX's persistent compilation cache "
            f"({self.directory})",)
        if self.rejected is not None:
            said = (f"irshard's record beside JAX's cached executable "
                    f"({os.path.basename(self._beside)}) was not believed: "
                    f"{self.rejected}; the program was compiled again",) + said
        return said

    def read(self, device_list, partitioned: bool):
        """(executable, partitioned HLO, XLA's log, buffer dumps) of a hit
        whose side file passes its checks, else None (`rejected` says why
        one was there and failed)."""
        import json
        from jax._src import compilation_cache
        try:
            data = files.read_regular(self._beside, self.MAX_BYTES)
        except files.Unreadable as e:
            self.rejected = str(e)
            return None
        if data is None:
            return None
        try:
            kept = json.loads(data)
        except ValueError:
            self.rejected = "it is not JSON"
            return None
        if not isinstance(kept, dict):
            self.rejected = "it is not irshard's record"
            return None
        text, log, dumps = kept.get("partitioned"), kept.get("log"), kept.get("buffers")
        if partitioned and not isinstance(text, str):
            return None                 # kept without it: compiled again
        try:
            executable, _ = compilation_cache.get_executable_and_time(
                self.key, self.options, self.client, device_list)
        except Exception:
            return None
        if executable is None:
            return None
        self.rejected = _checked(kept, self.key, executable)
        if self.rejected is not None:
            return None
        return executable, text if partitioned else None, log, \
            tuple(dumps) if dumps else None

    def write(self, executable, seconds: float, partitioned: str | None,
              log: str, buffers: tuple[str, str] | None = None) -> bool:
        """Keeps the executable as JAX would (not one that compiled faster
        than `jax_persistent_cache_min_compile_time_secs`); True if kept."""
        import json
        from jax._src import compilation_cache, config, distributed
        if distributed.global_state.process_id != 0 or \
                seconds < config.persistent_cache_min_compile_time_secs.value:
            return False
        try:
            # JAX makes its directory with its first entry.
            compilation_cache.put_executable_and_time(
                self.key, self.name, executable, self.client, int(seconds))
            if not os.path.isdir(self.directory):
                return False
            body = _record(self.key, executable, partitioned, log, buffers)
            fd, tmp = files.new_beside(self.directory)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(body, f)
                os.replace(tmp, self._beside)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            finally:
                interrupts.forget_file(tmp)
        except Exception:
            return False
        return True


def _signed_part(body: dict[str, Any]) -> bytes:
    import json
    return json.dumps({k: v for k, v in body.items() if k != "signature"},
                      sort_keys=True, separators=(",", ":")).encode()


def _record(key: str, executable, partitioned: str | None, log: str,
            buffers: tuple[str, str] | None) -> dict[str, Any]:
    """The side file of a compile: what the report reads of it, tied to the
    executable (its fingerprint, and whether its buffer assignment adds up
    to its memory analysis, as then it must when read back), signed."""
    from irshard.core import signing
    body: dict[str, Any] = {
        "version": PersistentCache.VERSION, "key": key,
        "fingerprint": _fingerprint(executable), "partitioned": partitioned,
        "log": log, "buffers": list(buffers) if buffers else None,
        "memory": memory_figures(executable)}
    body["buffers_add_up"] = buffers is not None and body["memory"] is not None \
        and assigned_memory(buffers[0]) == body["memory"]
    body["signature"] = signing.sign(_signed_part(body))
    return body


def _checked(kept: dict[str, Any], key: str, executable) -> str | None:
    """Why the side file `kept` is not to be believed for `executable` (the
    one JAX's cache holds under `key`), or None."""
    from irshard.core import signing
    if kept.get("version") != PersistentCache.VERSION or kept.get("key") != key:
        return "it is not this irshard's record of this entry"
    if not signing.verify(_signed_part(kept), kept.get("signature")):
        return "its signature does not match (changed since this user's " \
               "irshard wrote it, or written by another)"
    if kept.get("fingerprint") != _fingerprint(executable):
        return "it describes another executable than the one cached"
    text, log, dumps = kept.get("partitioned"), kept.get("log"), kept.get("buffers")
    if not (text is None or isinstance(text, str)) or not isinstance(log, str) \
            or not (dumps is None or (isinstance(dumps, list) and len(dumps) == 2
                                      and all(isinstance(d, str) for d in dumps))):
        return "it is not irshard's record"
    memory = memory_figures(executable)
    if kept.get("memory") != memory:
        return "its memory figures are not the executable's"
    if kept.get("buffers_add_up") and assigned_memory(dumps[0]) != memory:
        return "its buffer assignment does not add up to the executable's " \
               "memory analysis"
    return None


def _fingerprint(executable) -> str | None:
    """A hash of the executable's optimized HLO modules, what it runs (XLA's
    own `fingerprint` differs between a compiled executable and the same
    one loaded back)."""
    import hashlib
    try:
        modules = executable.hlo_modules()
    except Exception:
        return None
    from jaxlib import _hlo
    digest = hashlib.sha256()
    for module in modules:
        # XLA's own printing for fingerprints: the proto, and the text with
        # metadata, of the same module loaded back differ (ids, frames).
        digest.update(module.to_string(_hlo.HloPrintOptions.fingerprint()).encode())
    return digest.hexdigest()


def memory_figures(executable, strict: bool = False) -> dict[str, int] | None:
    """The executable's memory analysis, as `memory_stats` gives it; None
    where the backend reports none (raised, where `strict`)."""
    try:
        stats = executable.get_compiled_memory_stats()
    except Exception:
        if strict:
            raise
        return None
    return {"argument_bytes": int(stats.argument_size_in_bytes),
            "output_bytes": int(stats.output_size_in_bytes),
            "alias_bytes": int(stats.alias_size_in_bytes),
            "temp_bytes": int(stats.temp_size_in_bytes)}


def assigned_memory(assignment: str) -> dict[str, int]:
    """memory_analysis's four figures from a buffer assignment dump, for a
    module XLA built no executable of: the main memory's entry parameters,
    results, results that are parameters, and temporaries."""
    header = re.compile(r"^allocation \d+: size (\d+)(.*):\s*$", re.M)
    figures = dict.fromkeys(("argument_bytes", "output_bytes", "alias_bytes",
                             "temp_bytes"), 0)
    for m in header.finditer(assignment):
        size, rest = int(m.group(1)), m.group(2)
        if re.search(r"(^|, )color [1-9]", rest) or "thread-local" in rest \
                or ", constant" in rest:
            continue
        parameter, live_out = "parameter " in rest, "maybe-live-out" in rest
        if parameter:
            figures["argument_bytes"] += size
        if live_out:
            figures["output_bytes"] += size
        if parameter and live_out:
            figures["alias_bytes"] += size
        if not parameter and not live_out:
            figures["temp_bytes"] += size
    return figures

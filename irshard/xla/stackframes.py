"""The source tables an HLO module prints before its computations
(`FileNames`, `FunctionNames`, `FileLocations`, `StackFrames`): each
instruction's `stack_frame_id` resolved to its chain of source frames."""

from __future__ import annotations

import re

from irshard.core.frames import Frame
from irshard.core.syntax import unquote


class StackFrameTable:
    """The `FileNames/FunctionNames/FileLocations/StackFrames` tables a module
    prints before its computations, resolving a `stack_frame_id` to its
    chain of frames, innermost first."""

    def __init__(self, files: dict[int, str], functions: dict[int, str],
                 locations: dict[int, dict[str, int]],
                 frames: dict[int, dict[str, int]]):
        self.files = files
        self.functions = functions
        self.locations = locations
        self.frames = frames
        # Some XLA releases print each parent id one higher than it is, so the
        # first (root) frame shows itself as its parent; a frame cannot really
        # be its own parent, so that pattern identifies the convention.
        self._chains: dict[int, tuple[Frame, ...]] = {}
        first = frames.get(1)
        self._parent_offset = 1 if first and first.get("parent_frame_id") == 1 else 0

    @classmethod
    def parse(cls, module_text: str) -> "StackFrameTable":
        tables: dict[str, dict[int, str]] = {}
        current = None
        for line in module_text.splitlines():
            stripped = line.strip()
            if stripped.startswith(("%", "ENTRY")) or stripped.endswith("{"):
                break  # the first computation: the tables are behind us
            if stripped in ("FileNames", "FunctionNames", "FileLocations",
                            "StackFrames"):
                current = tables.setdefault(stripped, {})
                continue
            if not stripped:
                continue
            m = re.match(r"(\d+)\s+(.*)$", stripped)
            if current is not None and m:
                current[int(m.group(1))] = m.group(2)
            elif current is not None:
                current = None

        def strings(name):
            return {k: unquote(v) for k, v in tables.get(name, {}).items()}

        def records(name):
            return {k: {a: int(b) for a, b in re.findall(r"(\w+)=(-?\d+)", v)}
                    for k, v in tables.get(name, {}).items()}

        return cls(strings("FileNames"), strings("FunctionNames"),
                   records("FileLocations"), records("StackFrames"))

    def chain(self, frame_id: int) -> list[Frame]:
        return list(self.chain_of(frame_id))

    def chain_of(self, frame_id: int) -> tuple[Frame, ...]:
        """`chain`, as one tuple per frame id (the same object each time)."""
        cached = self._chains.get(frame_id)
        if cached is None:
            cached = self._chains[frame_id] = tuple(self._chain(frame_id))
        return cached

    def _chain(self, frame_id: int) -> list[Frame]:
        result: list[Frame] = []
        seen: set[int] = set()
        while frame_id and frame_id in self.frames and frame_id not in seen:
            seen.add(frame_id)
            frame = self.frames[frame_id]
            loc = self.locations.get(frame.get("file_location_id", 0))
            if loc:
                result.append(Frame(
                    self.files.get(loc.get("file_name_id", 0), "?"),
                    self.functions.get(loc.get("function_name_id", 0), "?"),
                    loc.get("line", 0), loc.get("column", 0)))
            frame_id = frame.get("parent_frame_id", 0) - self._parent_offset
        return result

"""A printed module's bytes, read in blocks of whole lines (a file never
held whole) or from text in memory, and read back line by line."""

from __future__ import annotations

import io
from typing import Any, Iterator

from irshard.core.errors import InputError

BLOCK = 1 << 19         # bytes a scan reads at once
_WINDOW = 1 << 18       # bytes read at once when lines are read back


class ModuleText:
    """Bytes of the module: a file read in blocks, bytes in memory, or
    ASCII text in memory (encoded a block at a time: never twice whole)."""

    def __init__(self, path: str | None = None, data: bytes | None = None,
                 text: str | None = None):
        self.path = path
        self.data = data
        self.text = text
        self._window: tuple[int, bytes] = (0, b"")

    def blocks(self) -> Iterator[tuple[int, bytes]]:
        """(offset, block) pairs, each block whole lines."""
        if self.text is not None:
            f: Any = _Encoding(self.text)
        elif self.data is not None:
            f = io.BytesIO(self.data)
        else:
            f = open(self.path, "rb")
        with f:
            # The pieces of a line that has not ended yet: kept apart and
            # joined once it ends, so a line of any length is read in time
            # proportional to it (each new block is searched, never again).
            offset, pending = 0, []
            while True:
                chunk = f.read(BLOCK)
                if b"\0" in chunk:
                    # Printed HLO is text: a NUL byte (a binary or sparse
                    # file) is refused here, not parsed at its full size.
                    at = offset + sum(map(len, pending)) + chunk.index(b"\0")
                    raise InputError(f"{self.path or 'the module'} is not HLO "
                                     f"text: it holds a NUL byte at byte {at}")
                if not chunk:
                    if pending:
                        yield offset, b"".join(pending) + b"\n"
                    return
                cut = chunk.rfind(b"\n") + 1
                if cut == 0:
                    pending.append(chunk)
                    continue
                block = b"".join([*pending, chunk[:cut]])
                yield offset, block
                offset += len(block)
                pending = [chunk[cut:]] if cut < len(chunk) else []

    def decoded(self, start: int, end: int) -> str:
        """`read`, as text."""
        if self.text is not None:
            return self.text[start:end]
        return self.read(start, end).decode("utf-8", "replace")

    def read(self, start: int, end: int) -> bytes:
        if self.text is not None:
            return self.text[start:end].encode("ascii")
        if self.data is not None:
            return self.data[start:end]
        at, window = self._window
        if at <= start and end <= at + len(window):
            return window[start - at:end - at]
        with open(self.path, "rb") as f:
            f.seek(start)
            data = f.read(max(end - start, _WINDOW))
        # Lines are read back in program order, mostly forward: keep what
        # follows for the next.
        self._window = (start, data) if end - start < _WINDOW else (0, b"")
        return data[:end - start]


class _Encoding:
    """ASCII text read as bytes, as a file is."""

    def __init__(self, text: str):
        self.text = text
        self.at = 0

    def read(self, size: int) -> bytes:
        chunk = self.text[self.at:self.at + size]
        self.at += len(chunk)
        return chunk.encode("ascii")

    def __enter__(self) -> "_Encoding":
        return self

    def __exit__(self, *_: Any) -> None:
        pass

"""What this user's irshard wrote, told from what anyone else wrote.

Files irshard keeps in a directory others may write to (beside JAX's
persistent compilation cache, which a team may share) carry an HMAC-SHA256
of their content under a key only this user can read: a file changed by
anyone else, or written by another user's irshard, fails `verify` and is
not believed. The key is 32 random bytes in the user's cache directory
(`$XDG_CACHE_HOME/irshard/signing.key`, else `~/.cache/...`), made on first
use with mode 0600; where it cannot be kept there, a key of this process
alone is used (what it signs is then believed by this process only).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets

from irshard.core import files

_KEY: dict[str, bytes] = {}
_KEY_BYTES = 32


def _read_key(path: str) -> bytes | None:
    """The key at `path`, where it is this user's own regular file that no
    one else can read or write; else None."""
    def mine(found: os.stat_result) -> str | None:
        if found.st_uid != os.getuid() or found.st_mode & 0o077:
            return "not this user's alone"
        return None
    try:
        key = files.read_regular(path, _KEY_BYTES, mine)
    except files.Unreadable:
        return None
    return key if key is not None and len(key) == _KEY_BYTES else None


def key() -> bytes:
    """This user's signing key (see the module docstring)."""
    path = files.cache_dir("signing.key")
    if path in _KEY:
        return _KEY[path]
    found = _read_key(path)
    if found is None:
        made = secrets.token_bytes(_KEY_BYTES)
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            # Written whole under a name of its own, then linked into place
            # (never over a key already there): no process reads half a key.
            tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                         | getattr(os, "O_NOFOLLOW", 0), 0o600)
            try:
                os.write(fd, made)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)
            finally:
                os.unlink(tmp)
        except OSError:
            pass
        # Another process may have made it first: its key is the key.
        found = _read_key(path) or made
    _KEY[path] = found
    return found


def sign(data: bytes) -> str:
    return hmac.new(key(), data, hashlib.sha256).hexdigest()


def verify(data: bytes, signature: object) -> bool:
    return isinstance(signature, str) and hmac.compare_digest(sign(data), signature)

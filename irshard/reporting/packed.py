"""Collectives packed for reports of a hundred thousand of them: each
holds its own name and op_name and shares the rest with every collective
alike, as one tuple; a sequence of them made as they are read."""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import fields
from typing import Iterable, Iterator, Sequence

from irshard.reporting.report import Collective


# The fields a `PackedCollective` shares with every collective alike, in
# field order: all but its own name and op_name.
SHARED_FIELDS = tuple(f.name for f in fields(Collective)
                      if f.name not in ("name", "op_name"))


class PackedCollective(Collective):
    """A `Collective` that holds its own name and op_name and shares the
    rest (kind, shape, bytes, axes, source, loops...) with every collective
    alike, as one tuple: the same value in a fraction of the memory, for
    reports of a hundred thousand collectives. Equal to the `Collective` of
    the same fields; what builds one from fields (`dataclasses.replace`,
    unpickling) gets a plain `Collective`."""

    # Its name and op_name as one string, `name` or `name\0op_name` (HLO
    # names hold no NUL): one object less for each of many collectives.
    __slots__ = ("_names", "_shared")

    def __new__(cls, *args, **kwargs):
        return Collective(*args, **kwargs)

    @classmethod
    def pack(cls, name: str, op_name: str | None,
             shared: tuple) -> "PackedCollective":
        """`shared`: the values of `SHARED_FIELDS`, in order (give the same
        tuple object to collectives alike)."""
        return _made(_joined(name, op_name), shared)

    @property
    def name(self) -> str:
        return self._names.partition("\0")[0]

    @property
    def op_name(self) -> str | None:
        _, mark, op_name = self._names.partition("\0")
        return op_name if mark else None

    def _compared(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self) if f.compare)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Collective):
            return NotImplemented
        return self._compared() == tuple(
            getattr(other, f.name) for f in fields(other) if f.compare)

    def __hash__(self) -> int:
        return hash(self._compared())

    def __reduce__(self):
        return Collective, tuple(getattr(self, f.name) for f in fields(self))


for _i, _field in enumerate(SHARED_FIELDS):
    setattr(PackedCollective, _field,
            property(lambda self, _i=_i: self._shared[_i]))
del _i, _field

_SET_NAMES = PackedCollective._names.__set__       # past the frozen __setattr__
_SET_SHARED = PackedCollective._shared.__set__


def _joined(name: str, op_name: str | None) -> str:
    """A `PackedCollective`'s name and op_name as its one string."""
    return name if op_name is None else f"{name}\0{op_name}"


def _made(names: str, shared: tuple) -> PackedCollective:
    item = object.__new__(PackedCollective)
    _SET_NAMES(item, names)
    _SET_SHARED(item, shared)
    return item


class PackedCollectives(Sequence):
    """Many collectives as a report keeps them: their names and op_names in
    long strings (`_CHUNK` collectives to a string), and of each the number
    of the fields it shares with every collective alike. Reads as the tuple
    of its `PackedCollective`s (made as they are read): equal to that
    tuple, hashed as it, pickled as it."""

    __slots__ = ("_texts", "_ends", "_which", "_shared")
    _CHUNK = 1024

    def __init__(self, items: Iterable[tuple[str, str | None, tuple]]):
        """`items`: (name, op_name, shared) of each collective, `shared` as
        `PackedCollective.pack` takes it."""
        texts: list[str] = []
        ends, which = array("I"), array("I")
        shared: list[tuple] = []
        numbers: dict[int, int] = {}        # id of a shared tuple kept here
        pending: list[str] = []
        end = 0
        for name, op_name, fields_ in items:
            number = numbers.get(id(fields_))
            if number is None:
                number = numbers[id(fields_)] = len(shared)
                shared.append(fields_)
            which.append(number)
            text = _joined(name, op_name)
            pending.append(text)
            end += len(text)
            ends.append(end)
            if len(pending) == self._CHUNK:
                texts.append("".join(pending))
                pending, end = [], 0
        if pending:
            texts.append("".join(pending))
        self._texts, self._ends, self._which, self._shared = \
            texts, ends, which, shared

    def __len__(self) -> int:
        return len(self._which)

    def _item(self, i: int) -> PackedCollective:
        chunk, k = divmod(i, self._CHUNK)
        start = self._ends[i - 1] if k else 0
        return _made(self._texts[chunk][start:self._ends[i]],
                     self._shared[self._which[i]])

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self._item(k) for k in range(*i.indices(len(self))))
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("collective index out of range")
        return self._item(i)

    def __iter__(self) -> Iterator[PackedCollective]:
        # `_made`, inlined: a report walks its collectives several times.
        new, packed = object.__new__, PackedCollective
        set_names, set_shared = _SET_NAMES, _SET_SHARED
        ends, which, shared = self._ends, self._which, self._shared
        i = 0
        for text in self._texts:
            start = 0
            for i in range(i, min(i + self._CHUNK, len(ends))):
                end = ends[i]
                item = new(packed)
                set_names(item, text[start:end])
                set_shared(item, shared[which[i]])
                yield item
                start = end
            i += 1

    def counted(self) -> list[tuple[PackedCollective, int]]:
        """Each distinct set of shared fields, as its first collective, and
        how many collectives have it."""
        counts = Counter(self._which)
        first = {}
        for i, number in enumerate(self._which):
            if number not in first:
                first[number] = i
                if len(first) == len(counts):
                    break
        return [(self._item(first[number]), counts[number])
                for number in sorted(first, key=first.get)]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (tuple, PackedCollectives)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __reduce__(self):
        return tuple, (tuple(self),)

"""The items a function scan yields (a pass, a barrier, plain code) and the buffer accesses each records."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import tree_sitter

Extent = tuple[str | None, str]  # (first index, bound), normalized; a None start is unknown


@dataclass
class Item:
    """A statement of a block, in order: a pass, a barrier, or plain code that defines scalars."""

    node: tree_sitter.Node
    alts: tuple[tuple[int, int], ...]  # (conditional id, branch index) of each enclosing #if / if
    what: str = ""
    reads: dict[str, str] = field(default_factory=dict)  # canonical buffer -> name as written
    writes: dict[str, str] = field(default_factory=dict)
    extents: dict[str, Extent | None] = field(default_factory=dict)  # buffer -> range walked (None: unknown)
    defines: set[str] = field(default_factory=set)
    uses: set[str] = field(default_factory=set)
    barrier: bool = False
    reaches: float = math.inf  # no pass at or after this byte follows it (its branch returns before)
    memos: frozenset[int] = frozenset()  # ids of the memo branches it lies in (see FunctionScan._memo)

    @property
    def is_pass(self) -> bool:
        return bool(self.reads or self.writes)

    def access(self, buf: str) -> str:
        if buf in self.writes:
            return "update" if buf in self.reads else "write"
        return "read"


@dataclass(frozen=True)
class Walked:
    """What a function does to one pointer parameter: read, write or update it element by element; `count`
    is the index of the parameter that bounds the walk (`for (i = 0; i < n; i++) y[i]` with n a parameter),
    so a call walks as many elements of its argument as its argument at `count` says."""

    mode: str
    count: int | None = None


def record(item: Item, found: tuple[str, str, str], mode: str, extent: Extent | None = None) -> None:
    identity, name, base = found
    label = name if name == base else f"{name} ({base})"
    if mode in ("write", "update"):
        item.writes.setdefault(identity, label)
    if mode in ("read", "update"):
        item.reads.setdefault(identity, label)
    extend(item, identity, extent)


def extend(item: Item, identity: str, extent: Extent | None) -> None:
    """One item walking a buffer over two different ranges: its extent is unknown."""
    if identity in item.extents and item.extents[identity] != extent:
        item.extents[identity] = None
    else:
        item.extents[identity] = extent


def merge(into: Item, other: Item) -> None:
    for k, v in other.reads.items():
        into.reads.setdefault(k, v)
    for k, v in other.writes.items():
        into.writes.setdefault(k, v)
    for k, e in other.extents.items():
        extend(into, k, e)
    into.defines |= other.defines


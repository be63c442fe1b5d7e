"""Consecutive passes of one block over the same buffer, and how each pair could become one pass."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from autoresearch_mcp.analysis.loopforms import continues
from autoresearch_mcp.analysis.passitems import Extent, Item


def _compatible(a: Item, b: Item) -> bool:
    """False when a and b lie in different branches of the same #if or if: never both executed."""
    branch = dict(a.alts)
    return all(branch.get(cond, index) == index for cond, index in b.alts)


def _depends(sequence: list[Item], i: int, j: int) -> list[str]:
    """Scalars item j uses that item i reduced (directly or through the statements between them)."""
    tainted = set(sequence[i].defines)
    if not tainted:
        return []
    for k in range(i + 1, j):
        if _compatible(sequence[i], sequence[k]) and sequence[k].uses & tainted:
            tainted |= sequence[k].defines
    return sorted(sequence[j].uses & tainted)


def _builds_apart(a: Item, b: Item) -> bool:
    """Whether a and b lie in different branches of one #if: the same pass written for another build."""
    branch = dict(a.alts)
    return any(cond < 0 and branch.get(cond, index) != index for cond, index in b.alts)


def _different_ranges(a: Extent | None, b: Extent | None) -> bool:
    """Known and different: another start (`i0 < i1` then `i0 = i1 + 1`), or another bound, unless both
    walk whole rows of one width from the same start (`Q*KV` and `rows*KV` elements of one tile share the
    first rows; `ne00` and a padding of `p0` elements are another range). A whole container (`size(v)`)
    may well be `n` elements: only another container's size differs from it."""
    if a is None or b is None:
        return False
    if a[0] is not None and b[0] is not None and a[0] != b[0]:
        return True
    whole = a[1].startswith("size(") + b[1].startswith("size(")
    if a[1] == b[1] or whole == 1:
        return False
    return a[0] is None or a[0] != b[0] or not (_factors(a[1]) & _factors(b[1]))


def _factors(bound: str) -> set[str]:
    """The named factors of a bound that is one product (`+Q_TILE_SZ*KV_TILE_SZ`); none for a sum."""
    term = bound.removeprefix("+")
    if not term or any(op in term for op in "+-/%()"):
        return set()
    return {f for f in term.split("*") if f and not f[0].isdigit()}


def pairs(sequence: list[Item]) -> Iterator[tuple[str, Item, Item, list[str]]]:
    """(buffer, first, second, depends_on) for consecutive passes of a block over the same buffer.

    Passes over different ranges of a buffer are not paired, and a pass written once per build (an #if
    with a SIMD path, an #else with the scalar loop) is paired once, from its first version.
    """
    following = {i: j for i, j in itertools.pairwise(k for k, item in enumerate(sequence) if item.is_pass)}

    def extent(i: int, buf: str) -> Extent | None:
        """The range pass i walks over buf, with the scalar tail that finishes a SIMD body."""
        found = sequence[i].extents.get(buf)
        j = i
        while found is not None and j in following and continues(sequence[j].node, sequence[following[j]].node):
            j = following[j]
            tail = sequence[j]
            if buf in tail.reads or buf in tail.writes:
                end = tail.extents.get(buf)
                found = (found[0], end[1]) if end is not None else None
        return found

    reported: dict[tuple[str, int], list[Item]] = {}  # (buffer, second) -> the firsts it was paired with
    previous: Item | None = None  # the pass before `first`
    for i, first in enumerate(sequence):
        if not first.is_pass:
            continue
        body, previous = previous, first
        # a scalar tail is paired through its body, which it finishes: one pass, one finding
        tail_of = {*body.reads, *body.writes} if body is not None and continues(body.node, first.node) else set()
        for buf in sorted({*first.reads, *first.writes} - tail_of):
            hits: list[Item] = []  # the next pass on each path: more than one after an if/else
            for j in range(i + 1, len(sequence)):
                second = sequence[j]
                if second.node.start_byte >= first.reaches:
                    break
                if not _compatible(first, second) or not first.memos <= second.memos or \
                        any(_compatible(h, second) or _builds_apart(h, second) for h in hits):
                    continue
                if second.barrier:
                    break
                if second.node == first.node or continues(first.node, second.node):
                    continue  # calls within one statement (often the arms of a ?:), or a loop's tail
                if buf in second.reads or buf in second.writes:
                    hits.append(second)
                    earlier = reported.setdefault((buf, j), [])
                    if _different_ranges(extent(i, buf), extent(j, buf)) or \
                            any(_builds_apart(e, first) for e in earlier):
                        continue
                    earlier.append(first)
                    yield buf, first, second, _depends(sequence, i, j)


def suggestion(canonical: str, buf: str, first: Item, second: Item, depends: list[str]) -> str:
    """One line on how the two passes over `canonical` (written `buf`) could become one."""
    a, b = first.access(canonical), second.access(canonical)
    if depends:
        needs = ", ".join(depends)
        if a == "write":
            return (f"the second pass needs {needs} from the first: compute {needs} without storing {buf}, then "
                    f"write {buf}'s final values in one pass (one write of {buf} instead of write+read+write)")
        return (f"the second pass needs {needs} from the first: one read of {buf} needs an online formulation "
                "(running max and sum as in online softmax, Welford for mean/variance); otherwise keep the "
                "row in cache between the passes")
    if (a, b) == ("write", "update"):
        return (f"{buf} is written, then updated in place: write its final value in the first pass (e.g. "
                "y[i] = x[i]*scale instead of a copy then a scale) and drop the second pass")
    if (a, b) == ("write", "read"):
        return f"compute {buf}[i] and consume it in the same loop; if {buf} is only a temporary, drop its store"
    if (a, b) == ("write", "write"):
        return f"the second pass overwrites {buf}: drop the first write, or merge both into one pass"
    if (a, b) == ("read", "read"):
        return f"both passes read {buf}: do both jobs in one loop so {buf} is read once"
    return f"fuse both passes into one loop over {buf} (apply the second step to each element while it is loaded)"


# --- files ----------------------------------------------------------------------------------------

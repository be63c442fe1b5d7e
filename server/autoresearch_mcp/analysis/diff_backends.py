"""diff_backends: what the other backends (or forks, or older versions) do that the target lacks.

Rules (documented in the tool description and README):
- An op is present in a backend when its source names the op token (dispatch, case labels,
  comparisons), unless the backend's supports-op function rejects it outright (`case X: return false`).
- Supports-by-default: a backend whose supports-op function ends with `default: return true` (llama.cpp's
  CPU backend) accepts every op of the family that it does not reject; it lacks an op only when it
  rejects it. Otherwise such a backend would show nonsense gaps for ops it runs but never names.
- A fusion is an ordered op sequence in a fusion check; a backend has fusion A+B when it fuses A+B or
  a longer chain that starts with A+B (A+B+C).
- A fusion check is a call of a fusion helper (a function that takes a list of ops and says so in its
  name, or hands the list on to one: each backend's own, found from the definitions) with an op list,
  or an op list in a statement, function or file about fusing.
- A backend may spell the op list otherwise: an array filled element by element, with one op
  (`std::fill`, a loop: a run of that op, written A+A), or a container it is added to
  (`ops.insert(ops.end(), {...})`), that a fusion check uses; a first item that is a variable holds the
  op(s) it was assigned (`gating_op = sigmoid ? UNARY : SOFT_MAX`). A condition about fusing that tests
  the op of another node than the `if` around it is one too (Vulkan's ADD+RMS_NORM:
  `if (node->op == ADD) { if (nodes[next]->op == RMS_NORM && ... add_rms_fusion)`).
- A backend built from another's sources (its build files compile them: MUSA and HIP compile CUDA's
  `.cu` files) has that backend's ops and fusions too.
- Gaps are ranked by how many backends have the item; fusions first on ties.
- The answer fits the answer cap whole: each backend's lists and the evidence per gap get shorter first, then
  fewer gaps are shown; a gap's `present_in` and `missing_in` are never cut.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Literal

from autoresearch_mcp import limits
from autoresearch_mcp.analysis.backends import BackendRoot, BuildReference, built_from, resolve, shared_headers
from autoresearch_mcp.analysis.codescan import Evidence, Scan, index_text, scan_file
from autoresearch_mcp.analysis.inventory import Extractor, Inventory, detect_families, fusion_helpers
from autoresearch_mcp.errors import InputError
from autoresearch_mcp.models import (
    BackendGap,
    BackendInventory,
    DiffBackendsResult,
    GapEvidence,
    IsaUse,
)

LIST_LIMIT = 20  # items per backend list in the output; counts give the rest
EVIDENCE_LIMIT = 10  # places shown per gap, one each: 9 backends fuse RMS_NORM+MUL in llama.cpp 0.3.36
# (ops and kernels per backend, fusions per backend, evidence places per gap, leading gaps that keep all their
# places), richest first: the first whose answer fits the cap is sent (llama.cpp's 17 backends and 25 gaps make
# about 100 KB at full detail, as sent: the structured answer and its indented text)
Detail = tuple[int, int, int, int]
DETAIL: tuple[Detail, ...] = ((LIST_LIMIT, LIST_LIMIT, EVIDENCE_LIMIT, 0), (5, 10, 3, 5), (0, 5, 1, 5))
NOTES_LIMIT = 20
PARALLEL_MIN_BYTES = 8_000_000  # below this a process pool costs more than it saves


def compare_backends(repo: str, backends: list[str] | None = None, target: str | None = None,
                     max_gaps: int = 25, *, fit: bool = True) -> DiffBackendsResult:
    """Inventory every backend of `repo` and list what the others have and `target` lacks. The tool's answer is
    fitted to what the server sends whole; `fit=False` keeps every list at its full length (tests, benchmarks)."""
    t0 = time.perf_counter()
    repo_path = _code_base(repo)
    roots, notes = resolve(repo_path, backends)
    chosen = _target([root.name for root in roots], target)
    t_read = time.perf_counter()

    scans = _scan_all(roots)
    t_scan = time.perf_counter()

    all_scans = [s for per in scans for s in per]
    headers = [scan_file(f) for f in shared_headers(repo_path, roots)]
    families = detect_families(all_scans, [h.code for h in headers])
    if not families:
        notes.append(
            "no op enum family found: looked for case labels and enums named like PREFIX_OP_NAME or "
            "OpType::Name; only named fusion strings, ISA families and kernels are compared"
        )
    t_families = time.perf_counter()

    extractor = Extractor(families, fusion_helpers([*all_scans, *headers], families))
    inventories = [extractor.inventory(root, per) for root, per in zip(roots, scans, strict=True)]
    notes.extend(_apply_built_from(inventories, built_from(roots, repo_path)))
    _apply_default_support(inventories, extractor)
    t_extract = time.perf_counter()

    gaps = _gaps(inventories, chosen, extractor)
    t_gaps = time.perf_counter()

    notes.extend(_default_support_notes(inventories))
    timings = {
        "discover_and_read": round(t_read - t0, 3),
        "strip_and_index": round(t_scan - t_read, 3),
        "op_families": round(t_families - t_scan, 3),
        "extract": round(t_extract - t_families, 3),
        "gaps": round(t_gaps - t_extract, 3),
    }

    more = len(notes) - NOTES_LIMIT
    shown_notes = notes[:NOTES_LIMIT] + ([f"... and {more} more"] if more > 0 else [])

    def answer(detail: Detail, shown: int, cut: list[str]) -> DiffBackendsResult:
        items, fusions, places, rich = detail
        by_kind: dict[str, int] = {}
        for gap in gaps[shown:]:
            by_kind[gap.kind] = by_kind.get(gap.kind, 0) + 1
        return DiffBackendsResult(
            repo=str(repo_path),
            target=chosen,
            op_families=[f.prefix for f in families],
            backends=[_inventory_model(inv, items, fusions) for inv in inventories],
            gaps=[g.model_copy(update={"evidence": g.evidence[:EVIDENCE_LIMIT if rank < rich else places]})
                  for rank, g in enumerate(gaps[:shown])],
            total_gaps=len(gaps),
            omitted=len(gaps[shown:]),
            omitted_by_kind=by_kind,
            files_scanned=sum(inv.files for inv in inventories),
            lines_scanned=sum(inv.lines for inv in inventories),
            timings_s=timings,
            notes=shown_notes + cut,
        )

    return _fitted(answer, min(max_gaps, len(gaps))) if fit else answer(DETAIL[0], max_gaps, [])


def _code_base(repo: str) -> Path:
    """The resolved path of the repository to compare, refused when it is no directory or a whole file system
    or home folder."""
    repo_path = Path(repo).expanduser()
    if not repo_path.is_dir():
        raise InputError(f"repo {limits.shown(repo)} is not a directory; give the path of a local repository")
    repo_path = repo_path.resolve()
    if repo_path == Path(repo_path.anchor) or repo_path == Path.home() or repo_path in Path.home().parents:
        raise InputError(f"repo {repo_path} is a whole file system or home folder, not a code base; pass the "
                         "path of the repository to optimize")
    return repo_path


def _target(names: list[str], target: str | None) -> str:
    """The backend the others are compared against: `target`, or cpu; there must be another backend beside it."""
    chosen = target or ("cpu" if "cpu" in names else None)
    if chosen is None:
        raise InputError(f"no cpu backend to compare against; pass target= with one of: {', '.join(names)}")
    if chosen not in names:
        raise InputError(f"target {chosen!r} is not one of the backends ({', '.join(names)}); pass one of them")
    if len(names) < 2:
        raise InputError(f"only one backend ({names[0]}) to compare; name others with backends=[...]")
    return chosen


def _default_support_notes(inventories: list[Inventory]) -> list[str]:
    """A note for each backend that supports every op but those it rejects."""
    notes = []
    for inv in inventories:
        if inv.supports_by_default:
            ev = inv.supports_by_default
            notes.append(
                f"{inv.name} supports every op by default ({ev.file}:{ev.line}); it lacks only the ops it "
                f"rejects explicitly ({len(inv.rejected)})"
            )
    return notes


def _fitted(answer: Callable[[Detail, int, list[str]], DiffBackendsResult], max_gaps: int) -> DiffBackendsResult:
    """The richest answer that fits the answer cap whole. The server's own cut (limits.bound) shortens every
    nested list alike, a gap's `present_in` too: on llama.cpp 0.3.19 the RMS_NORM+MUL gap named cuda, hip and
    metal of its six backends. Here each backend's lists and the evidence get shorter first, then fewer gaps
    are shown (counted in `omitted`)."""
    cut = ""
    result = answer(DETAIL[0], max_gaps, [])
    for detail in DETAIL[1:]:
        if _fits(result):
            return result
        items, fusions, places, rich = detail
        cut = (f"cut to fit {limits.ANSWER_CAP // 1024} KB: each backend lists its first {items} ops and "
               f"kernels and {fusions} fusions (the *_count fields give the totals); the first {rich} gaps show "
               f"every place, the others {places}; ask for fewer gaps or backends for more detail")
        result = answer(detail, max_gaps, [cut])
    shown = max_gaps
    while not _fits(result) and shown > 1:
        shown = max(1, shown * 3 // 4)
        result = answer(DETAIL[-1], shown, [f"{cut}; the first {shown} gaps shown"])
    return result


def _fits(result: DiffBackendsResult) -> bool:
    """Whether the server sends the answer whole (limits.bound gives back the very answer when it fits)."""
    return limits.bound(result) is result


def _scan_all(roots: list[BackendRoot]) -> list[list[Scan]]:
    files = [f for root in roots for f in root.files]
    size = sum(len(f.text) for f in files)
    cpus = os.cpu_count() or 1
    if size >= PARALLEL_MIN_BYTES and cpus > 1:
        # forkserver, not fork: the MCP server runs tools in threads, and forking a threaded
        # process can deadlock the child
        context = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(max_workers=cpus, mp_context=context) as pool:
            indexed = pool.map(index_text, [f.text for f in files], chunksize=16)
            flat = [Scan(f, *ix) for f, ix in zip(files, indexed, strict=True)]
    else:
        flat = [scan_file(f) for f in files]
    out, i = [], 0
    for root in roots:
        out.append(flat[i: i + len(root.files)])
        i += len(root.files)
    return out


def _apply_built_from(inventories: list[Inventory], built: dict[str, list[tuple[str, BuildReference]]]) -> list[str]:
    """A backend whose build compiles another's sources has that backend's ops, fusions, kernels and ISA
    too (its own evidence first); chains (A built from B built from C) are followed. Returns the notes."""
    by_name = {inv.name: inv for inv in inventories}
    notes = []
    for name, sources in sorted(built.items()):
        for source, ref in sources:
            notes.append(f"{name} compiles {source}'s sources ({ref.file}:{ref.line}: {ref.text}): it has "
                         f"{source}'s ops and fusions")
    for _ in range(len(built)):
        changed = False
        for name, sources in built.items():
            inv = by_name[name]
            for other_name, _ref in sources:
                other = by_name[other_name]
                before = (len(inv.ops), len(inv.fusions))
                for table, more in ((inv.ops, other.ops), (inv.fusions, other.fusions)):
                    for key, ev in more.items():
                        table.setdefault(key, ev)
                for fam, hit in other.isa.items():
                    inv.isa.setdefault(fam, hit)
                inv.kernels = sorted({*inv.kernels, *other.kernels})
                inv.fusion_helpers = sorted({*inv.fusion_helpers, *other.fusion_helpers})
                if other_name not in inv.built_from:
                    inv.built_from.append(other_name)
                changed |= before != (len(inv.ops), len(inv.fusions))
        if not changed:
            break
    return notes


def _apply_default_support(inventories: list[Inventory], extractor: Extractor) -> None:
    """A supports-by-default backend has every op of each family it uses, except those it rejects."""
    every_op = {op for inv in inventories for op in inv.ops} | {op for inv in inventories for op in inv.rejected}
    every_op |= {f.prefix + m for f in extractor.families if f.enum for m in f.members}
    for inv in inventories:
        if inv.supports_by_default:
            used = {extractor.family_of(op) for op in inv.ops}
            for op in every_op - inv.ops.keys() - inv.rejected.keys():
                if extractor.family_of(op) in used:
                    inv.ops[op] = inv.supports_by_default


def _gaps(inventories: list[Inventory], target: str, extractor: Extractor) -> list[BackendGap]:
    """Fusions and ops some other backend has and the target lacks. Op gaps only come from op families
    the target uses itself: another backend's private op enum (HTP_OP_...) is not a gap."""
    tgt = next(inv for inv in inventories if inv.name == target)
    target_families = {extractor.family_of(op) for op in tgt.ops}
    others = [inv for inv in inventories if inv.name != target]
    gaps: list[BackendGap] = []

    def has_fusion(inv: Inventory, key: str) -> tuple[str, Evidence] | None:
        if key in inv.fusions:
            return key, inv.fusions[key]
        longer = sorted(k for k in inv.fusions if k.startswith(key + "+"))
        return (longer[0], inv.fusions[longer[0]]) if longer else None

    def has_op(inv: Inventory, op: str) -> tuple[str, Evidence] | None:
        return (op, inv.ops[op]) if op in inv.ops else None

    def add(kind: Literal["fusion", "op"], item: str,
            lookup: Callable[[Inventory, str], tuple[str, Evidence] | None]) -> None:
        present = [(inv, hit) for inv in others if (hit := lookup(inv, item))]
        if not present or lookup(tgt, item):
            return
        missing = [target] + [inv.name for inv in others if not lookup(inv, item)]
        places: dict[tuple[str, int], list[tuple[Inventory, str]]] = {}  # one evidence per place
        for inv, (found, ev) in present:
            places.setdefault((ev.file, ev.line), []).append((inv, found))
        evidence = []
        for (_file, _line), holders in list(places.items())[:EVIDENCE_LIMIT]:
            inv, found = holders[0]
            ev = lookup(inv, item)[1]  # type: ignore[index]
            note = f" (as part of {found})" if found != item else ""
            also = [h.name for h, _ in holders[1:]]
            note += f" (also compiled into {', '.join(also)})" if also else ""
            evidence.append(GapEvidence(backend=inv.name, file=ev.file, line=ev.line, snippet=ev.snippet + note))
        gaps.append(BackendGap(kind=kind, item=item, present_in=[inv.name for inv, _ in present],
                               missing_in=missing, evidence=evidence))

    for key in sorted({k for inv in others for k in inv.fusions}):
        add("fusion", key, has_fusion)
    for op in sorted({k for inv in others for k in inv.ops if extractor.family_of(k) in target_families}):
        add("op", op, has_op)
    gaps.sort(key=lambda g: (-len(g.present_in), g.kind != "fusion", g.item))
    return gaps


def _inventory_model(inv: Inventory, items: int, fusion_items: int) -> BackendInventory:
    """A backend's inventory with its first `items` ops, rejected ops and kernels and `fusion_items` fusions."""
    ops = sorted(inv.ops)
    fusions = sorted(inv.fusions, key=lambda k: (-k.count("+"), k))
    isa = sorted(inv.isa.items(), key=lambda kv: -kv[1][0])
    return BackendInventory(
        name=inv.name,
        root=inv.root,
        files=inv.files,
        lines=inv.lines,
        skipped_files=len(inv.skipped),
        skipped_examples=inv.skipped[:3],
        ops_count=len(ops),
        ops=ops[:items],
        supports_by_default=inv.supports_by_default is not None,
        rejected_ops=sorted(inv.rejected)[:items],
        fusions_count=len(fusions),
        fusions=fusions[:fusion_items],
        isa=[IsaUse(name=name, hits=hits, file=ev.file, line=ev.line) for name, (hits, ev) in isa],
        kernels_count=len(inv.kernels),
        kernels=inv.kernels[:items],
        fusion_helpers=inv.fusion_helpers[:LIST_LIMIT],
        built_from=inv.built_from,
    )

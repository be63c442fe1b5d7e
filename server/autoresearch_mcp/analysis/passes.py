"""Find consecutive passes over the same buffer inside C/C++ functions: candidates for fusion.

Memory-bound code pays for every pass over a row: `memcpy(y, x)` followed by an in-place scale of
`y` reads and writes `y` twice where `y[i] = x[i]*scale` would do it once. The finder parses each
file with tree-sitter (error-tolerant, so macro-heavy code such as ggml parses without its headers
or a preprocessor), and in every function lists the passes of each block in order (`passscan`):

- a loop nest (`for`, `while`, `do`) whose trip count is not a compile-time constant, or that walks a
  local tile, and which indexes a buffer with its loop variables (`x[i]`, `x + i` in a load or store)
  or walks a pointer along it (`while (n--) *p++ = ...`), counted as one pass over what it touches;
- a C++ range-for over a container of numbers (`for (auto & x : v)`), and `std::fill` / `copy` /
  `transform` / `for_each` and their kin over a range (`v.begin(), v.end()` or `y, y + n`);
- a `memcpy` / `memmove` / `memset` of more than one element;
- a call of a function that walks some of its pointer parameters, read from its definition wherever the
  scanned files or the files they include define it (`csources`: vec.h, vec.cpp, simd-gemm.h...); a
  `ggml_vec_*` helper out of reach follows ggml's convention `(n, out, in...)`.

Not passes: debug-only code (assert arguments, `#ifndef NDEBUG`), small local arrays (register
accumulators; at least 1,024 numbers is a tile), single-element accesses (`y[0] = 0`, `memcpy(&eps, p,
sizeof(float))`), a memo branch (a cache refilled only when its key changes). A loop that finishes
another's range (a SIMD body and its scalar tail) is the same pass. A lambda's body is scanned as a
function of its own (named `f::<lambda at line N>`), seeing what it captures.

Two passes are reported (`passpairs`) when they touch the same buffer (pointers are followed back to
what they were last set to, so `y`, `v.data()` and `dst->data` can be one buffer, `VKQ32` and `VKQ32 +
DV` two, as are `y[i]` and `y[n + i]` in loops over i) with no pass over that buffer, no barrier and no
exclusive branch (`if`/`else`, switch cases) between them, on a path that does not return in between,
and over the same range when both ranges are known. Branches of an `#if` are the same code for other
builds: a pass written as a SIMD path and again as a scalar `#else` is paired once, from its first
version. Each report says whether the second pass needs a value the first one reduced (a sum, a
maximum): such pairs fuse only with an online formulation (running max and sum, Welford), the others
fuse directly. Within the limit, the answer shows every function before any function's second finding.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import tree_sitter

from autoresearch_mcp.analysis import csyntax as cs
from autoresearch_mcp.analysis.csources import SourceTree
from autoresearch_mcp.analysis.passitems import Item
from autoresearch_mcp.analysis.passpairs import pairs, suggestion
from autoresearch_mcp.analysis.passscan import FunctionScan, Helpers
from autoresearch_mcp.errors import InputError
from autoresearch_mcp.git import gitops
from autoresearch_mcp.models import FindPassesResult, PassFinding, PassSite, ProfileResult

short_name = cs.short_name  # how a profile's symbol (perf: `ns::f<T>(int) [clone .part.0]`) names a definition
MAX_FILE_BYTES = 8 * 2**20
MAX_FILES = 20_000
SKIP_DIRS = {".git", ".autoresearch", "build", "node_modules", "third_party", "vendor"}


def source_files(paths: list[Path]) -> list[Path]:
    """The C/C++ files of `paths` (files as given, folders walked without entering SKIP_DIRS), at most
    MAX_FILES: a whole file system or home folder is refused rather than walked."""
    files: list[Path] = []
    for path in paths:
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            resolved = path.resolve()
            if resolved == Path(resolved.anchor) or resolved == Path.home() or resolved in Path.home().parents:
                raise InputError(f"{path} is a whole file system or home folder, not a code base: name the "
                                 "source folders or files to scan")
            for folder, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
                files.extend(f for n in sorted(names) if Path(n).suffix in cs.SOURCE_SUFFIXES
                             for f in [Path(folder, n)] if f.is_file())
                if len(files) > MAX_FILES:
                    raise InputError(f"more than {MAX_FILES} C/C++ files under {path}: name smaller folders, "
                                     "files, or functions")
        else:
            raise InputError(f"{path} does not exist: give C/C++ files or folders (absolute, or relative to "
                             "the session repository)")
    return files


@dataclass
class Hotness:
    """A profile's view of the code: share of samples per function name and per source line.

    Lines matter because perf charges an inlined static function's samples to its caller's symbol,
    while the line still points into the inlined function's body.
    """

    by_name: dict[str, float] = field(default_factory=dict)
    by_line: dict[Path, dict[int, float]] = field(default_factory=dict)

    def of(self, name: str, path: Path, fn: tree_sitter.Node) -> float | None:
        lines = self.by_line.get(path.resolve(), {})
        first, last = fn.start_point.row + 1, fn.end_point.row + 1
        in_body = sum(share for line, share in lines.items() if first <= line <= last)
        share = max(self.by_name.get(name, 0.0), in_body)
        return round(share, 2) if share > 0 else None


def find_passes(files: list[Path], functions: set[str] | None = None, hotness: Hotness | None = None,
                limit: int = 20, bases: list[Path] | None = None) -> FindPassesResult:
    """Scan `files`: every function, or only those named in `functions` or hot in `hotness`; hot first."""
    t0 = time.perf_counter()
    findings: list[PassFinding] = []
    found_names: set[str] = set()
    scanned = 0
    notes: list[str] = []
    selective = functions is not None or hotness is not None
    parsed: list[tuple[Path, cs.NodeIndex, list[tuple[str, tree_sitter.Node]]]] = []
    definitions: dict[str, tuple[tree_sitter.Node, cs.NodeIndex]] = {}
    sources: dict[Path, tuple[bytes, cs.NodeIndex]] = {}
    for path in files:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc}") from exc
        if len(data) > MAX_FILE_BYTES:
            notes.append(f"skipped {path}: larger than {MAX_FILE_BYTES // 2**20} MiB")
            continue
        hot_file = hotness is not None and path.resolve() in hotness.by_line
        if functions is not None and not hot_file and not any(name.encode() in data for name in functions):
            continue
        cpp = path.suffix not in cs.C_SUFFIXES
        tree = cs.parse(data, cpp)
        index = cs.NodeIndex(tree.root_node, cpp)
        named = [(name, fn) for fn in cs.functions(tree) for name in [cs.function_name(fn)] if name is not None]
        for name, fn in named:
            definitions.setdefault(name, (fn, index))
        parsed.append((path, index, named))
        sources[path] = (data, index)
    helpers = Helpers(SourceTree(sources, definitions, mirrors=bases or []))
    for path, index, named in parsed:
        shown = next((str(path.relative_to(b)) for b in bases or [] if path.is_relative_to(b)), str(path))
        for name, fn in named:
            share = hotness.of(name, path, fn) if hotness is not None else None
            if selective and share is None and name not in (functions or ()):
                continue
            found_names.add(name)
            scan = helpers.scan(fn, index)
            findings.extend(_scan(scan, name, shown, share))
            lambdas = index.within(fn, ("lambda_expression",))
            for lam in lambdas:  # a lambda body is a function of its own: its passes are not the caller's
                inner = FunctionScan(lam, index, helpers, outer=scan)
                findings.extend(_scan(inner, f"{name}::<lambda at line {lam.start_point.row + 1}>", shown, share))
            scanned += 1 + len(lambdas)
    if functions is not None:
        missing = sorted(functions - found_names)
        if missing:
            notes.append(f"no definition found for: {', '.join(missing[:20])}")
    kept = _shown(findings, limit)
    if len(kept) < len(findings):
        functions_with = len({(f.file, f.function) for f in findings})
        notes.append(f"{len(findings) - len(kept)} more findings ({functions_with} functions have findings, each "
                     "shown at least once while the limit allows): raise limit or name functions to see them")
    return FindPassesResult(
        findings=kept, total_findings=len(findings), files_scanned=len(files),
        functions_scanned=scanned, elapsed_s=round(time.perf_counter() - t0, 3), notes=notes)


def _rank(f: PassFinding) -> tuple[float, bool, str, int]:
    """Hot first, then pairs that fuse directly, then by place."""
    return -(f.hot_share_pct or 0.0), not f.fusable, f.file, f.passes[0].start_line


def _shown(findings: list[PassFinding], limit: int) -> list[PassFinding]:
    """The findings within `limit`, chosen breadth first, then listed by rank. Every function's strongest
    finding comes before any function's second (a file full of small pairs in one function does not hide
    another function); the strongest is on the buffer the function passes over most often (softmax's row
    copied, scaled, masked and maxed), and functions that make the most passes go first."""
    if len(findings) <= limit:
        return sorted(findings, key=_rank)
    chains: dict[tuple[str, str, str], int] = {}  # (file, function, buffer) -> pairs over it
    for f in findings:
        key = (f.file, f.function, f.buffer)
        chains[key] = chains.get(key, 0) + 1
    by_function: dict[tuple[str, str], list[PassFinding]] = {}
    for f in sorted(findings, key=lambda f: (-chains[f.file, f.function, f.buffer], *_rank(f))):
        by_function.setdefault((f.file, f.function), []).append(f)
    def passes(fs: list[PassFinding]) -> int:  # distinct passes the function's findings name
        return len({p.start_line for f in fs for p in f.passes})

    order = sorted(by_function.values(), key=lambda fs: (-(fs[0].hot_share_pct or 0.0), -passes(fs)))
    rounds = itertools.zip_longest(*order)
    chosen = [f for f in itertools.chain.from_iterable(rounds) if f is not None][:limit]
    return sorted(chosen, key=_rank)


def _scan(scan: FunctionScan, name: str, file: str, share: float | None) -> list[PassFinding]:
    fn = scan.fn
    seen: set[tuple[int, int, str]] = set()
    out: list[PassFinding] = []
    for sequence in scan.blocks():
        for buf, first, second, depends in pairs(sequence):
            key = (first.node.id, second.node.id, buf)
            if key in seen:
                continue
            seen.add(key)
            label = first.reads.get(buf) or first.writes.get(buf) or buf
            shown = label.split(" (")[0]
            out.append(PassFinding(
                function=name, file=file, line=fn.start_point.row + 1, buffer=label,
                kind=f"{first.access(buf)}_then_{second.access(buf)}",
                passes=[_site(first, buf), _site(second, buf)], fusable=not depends, depends_on=depends,
                suggestion=suggestion(buf, shown, first, second, depends), hot_share_pct=share))
    return out


def _site(item: Item, buf: str) -> PassSite:
    return PassSite(code=item.what, start_line=item.node.start_point.row + 1,
                    end_line=item.node.end_point.row + 1, access=item.access(buf))


def search(root: Path | None, paths: list[str] | None, functions: list[str] | None,
           profile: ProfileResult | None, limit: int, profiled_sources: Path | None = None,
           top_functions: int = 15) -> FindPassesResult:
    """find_passes as the tool sees it: files and functions from the arguments or from a profile.

    A profile's hot lines are read in `profiled_sources`, the profiled build's own copies of the
    files (a candidate's lines do not match the work tree); the repository is the fallback.
    """
    if not paths and not functions and profile is None:
        raise InputError("say where to look: paths (C/C++ files or folders), functions (names), or profile_id "
                         "(the hot functions of a profile_hotspots run)")
    base = root or Path.cwd()
    names = {cs.short_name(f) for f in functions} if functions else None
    hotness = None
    files: list[Path] = []
    unplaced: set[str] = set()  # hot functions without source lines: found by name
    if profile is not None:
        hotness = Hotness()
        for f in [f for f in profile.functions if not f.dso.startswith("[")][:top_functions]:
            hotness.by_name[cs.short_name(f.name)] = max(hotness.by_name.get(cs.short_name(f.name), 0.0), f.share_pct)
            if not f.lines:
                unplaced.add(cs.short_name(f.name))
            for line in f.lines:
                kept = profiled_sources / line.file if profiled_sources is not None else None
                path = (kept if kept is not None and kept.is_file() else base / line.file).resolve()
                if path.is_file():
                    hotness.by_line.setdefault(path, {})[line.line] = line.share_pct
        files.extend(hotness.by_line)
    if paths:
        files = source_files([Path(p) if Path(p).is_absolute() else base / p for p in paths])
    else:
        wanted = (names or set()) | unplaced
        files.extend(_files_mentioning(base, wanted) if wanted else [])
    unique = sorted({f.resolve(): f for f in files if f.suffix in cs.SOURCE_SUFFIXES}.values())
    if not unique:
        raise InputError(f"no C/C++ source found under {base} for {sorted(names or [])[:10] or paths}: give paths")
    bases = [b.resolve() for b in (profiled_sources, base) if b is not None and b.is_dir()]
    result = find_passes(unique, names, hotness, limit, bases=bases)
    if profile is not None:
        where = "the profiled build's copies" if profiled_sources is not None and profiled_sources.is_dir() \
            else "the work tree's files"
        result.notes.append(f"hot code of profile {profile.profile_id} ({profile.build}, {profile.commit[:12]}), "
                            f"read in {where}")
    return result


def _files_mentioning(root: Path, names: set[str]) -> list[Path]:
    """C/C++ files under root that mention any of the names (git grep in a work tree; a scan otherwise)."""
    if (root / ".git").exists():
        with contextlib.suppress(gitops.GitError):
            return [root / p for p in gitops.grep_files(root, names, [f"*{s}" for s in sorted(cs.SOURCE_SUFFIXES)])]
    encoded = [n.encode() for n in names]
    return [f for f in source_files([root]) if any(n in f.read_bytes() for n in encoded)]


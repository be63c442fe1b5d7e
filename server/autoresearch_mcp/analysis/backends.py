"""Find the backend roots of a multi-backend code base and read their source files.

A backend root is a folder holding one backend's code (`ggml/src/ggml-cuda`, `backend/metal`,
`src/cpu`...). Roots are found by the conventions of real projects or named by the caller as
`name=path`, `name=/other/repo:path` (the same folder in another local checkout, e.g. a fork) or
`name=ref:path` (the folder at a git ref of this repository, e.g. an older version).

A backend may be built from another's sources: llama.cpp's MUSA and HIP backends compile the CUDA
backend's `.cu` files (`file(GLOB ... "../ggml-cuda/*.cu")` in their CMakeLists.txt; ggml-hip holds no
source of its own). `built_from` reads each root's build files for paths into another root that name
sources to compile, so such a backend gets the other's ops and fusions instead of lacking them.
"""

from __future__ import annotations

import functools
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from autoresearch_mcp.errors import InputError
from autoresearch_mcp.git import gitops

KNOWN_BACKENDS: tuple[str, ...] = (
    "cpu", "cuda", "metal", "vulkan", "opencl", "sycl", "webgpu", "wgpu", "hip", "rocm", "mps", "musa",
    "cann", "blas", "rpc", "hexagon", "openvino", "zdnn", "zendnn", "kompute", "dnnl", "onednn", "mkl",
    "coreml", "directml", "dml", "tensorrt", "trt", "triton", "wasm", "qnn", "npu", "tpu", "xla",
    "gpu", "accel",
)
BACKEND_PARENTS = frozenset({"backend", "backends"})
SOURCE_SUFFIXES = frozenset({
    ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".hxx", ".inc", ".inl", ".ipp", ".cu", ".cuh",
    ".m", ".mm", ".metal", ".cl", ".comp", ".glsl", ".wgsl", ".hlsl", ".rs", ".go", ".zig", ".tmpl",
})
MAX_FILE_BYTES = 2_000_000
MAX_SCAN_BYTES = 400_000_000  # sources read per backend root
MAX_DIRS = 200_000  # folders walked looking for backends
_HEADER_SUFFIXES = frozenset({".h", ".hh", ".hpp", ".hxx"})
_PRUNE = frozenset({"node_modules", "__pycache__", "venv", "build", "dist", "out", "target"})
# build files read for sources compiled from elsewhere, and the suffixes that are compiled (not headers)
BUILD_FILES = ("CMakeLists.txt", "meson.build", "Makefile", "BUILD", "BUILD.bazel")
COMPILED_SUFFIXES = SOURCE_SUFFIXES - {".h", ".hh", ".hpp", ".hxx", ".inc", ".inl", ".ipp", ".cuh", ".tmpl"}
_BUILD_PATH = re.compile(r"""(?:\$\{CMAKE_CURRENT_(?:SOURCE|LIST)_DIR\}/|\$\(srcdir\)/)?\.\.?/[^\s"'()${}]+""")
_GLOB_CHARS = re.compile(r"[*?\[]")
_KNOWN_RE = re.compile(r"^(?:(?P<pre>.+?[-_]))?(?P<name>" + "|".join(KNOWN_BACKENDS) + r")(?:[-_].+)?$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][\w.-]*$")


@dataclass
class SourceFile:
    """One readable source file of a backend; `path` is what evidence shows (relative, or ref:path)."""

    path: str
    text: str

    @functools.cached_property
    def lines(self) -> list[str]:
        return self.text.split("\n")

    def snippet(self, line: int) -> str:
        """Line `line` (1-based), stripped and cut to 160 characters."""
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        return text if len(text) <= 160 else text[:157] + "..."


@dataclass
class BackendRoot:
    name: str
    root: str  # as shown to the user: a path relative to the repo, `ref:path` or `/other/repo:path`
    path: Path | None = None  # the folder, for roots read from a work tree
    files: list[SourceFile] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def discover(repo: Path) -> tuple[list[tuple[str, Path]], list[str]]:
    """Backend folders found by convention, as (name, absolute path), plus notes on what was left out.

    A folder counts when its name is a known backend (`cuda`, `ggml-cuda`, `cpu_backend`...) or it sits
    in a `backend/` or `backends/` folder. Siblings sharing the prefix of two or more known backends
    (`ggml-zdnn` beside `ggml-cpu` and `ggml-cuda`) count too. The family with the most members wins
    a name that appears in several places.
    """
    by_parent: dict[Path, list[tuple[str, Path]]] = defaultdict(list)
    visited = 0
    for dirpath, dirnames, _ in os.walk(repo):
        visited += 1
        if visited > MAX_DIRS:
            break
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _PRUNE)
        parent = Path(dirpath)
        in_backend_dir = parent.name.lower() in BACKEND_PARENTS
        known = {d: _KNOWN_RE.match(d.lower()) for d in dirnames}
        prefixes = [m.group("pre") for m in known.values() if m and m.group("pre")]
        family_prefix = max(set(prefixes), key=prefixes.count) if len(prefixes) >= 2 else None
        taken: list[str] = []
        for d in dirnames:
            m = known[d]
            if m:
                by_parent[parent].append((m.group("name"), parent / d))
            elif in_backend_dir:
                by_parent[parent].append((d.lower(), parent / d))
            elif family_prefix and d.lower().startswith(family_prefix) and len(d) > len(family_prefix):
                by_parent[parent].append((d.lower()[len(family_prefix):], parent / d))
            else:
                continue
            taken.append(d)
        # a backend's own subfolders (cpu/arch/x86, cuda/vendors) are not backends of their own
        dirnames[:] = [d for d in dirnames if d not in taken]
    families = sorted(by_parent.items(), key=lambda kv: (-len(kv[1]), len(kv[0].parts), str(kv[0])))
    found: dict[str, Path] = {}
    notes = [f"stopped looking for backends after {MAX_DIRS} folders; name them with backends=[...]"
             ] if visited > MAX_DIRS else []
    for _parent, members in families:
        for name, path in members:
            if name in found:
                notes.append(f"{_rel(path, repo)} looks like backend {name!r} too; used {_rel(found[name], repo)}")
            elif _has_sources(path) or compiled_elsewhere(path):
                found[name] = path
            else:
                notes.append(f"{_rel(path, repo)} has no source files and builds none from elsewhere")
    return sorted(found.items()), notes


def looked_for() -> str:
    return (
        "folders named after a backend (" + ", ".join(KNOWN_BACKENDS[:16]) + "...), with an optional "
        "project prefix or suffix (ggml-cuda, cpu_backend), and any folder inside backend/ or backends/"
    )


def resolve(repo: Path, specs: list[str] | None) -> tuple[list[BackendRoot], list[str]]:
    """The backend roots to compare, with their source files loaded; `specs` as in the module doc.

    The repository is walked for backends only when they are not all named with a path."""
    specs = [spec.strip() for spec in specs or []]
    found: list[tuple[str, Path]] = []
    notes: list[str] = []
    if not specs or not all("=" in spec for spec in specs):
        found, notes = discover(repo)
    if not specs:
        if not found:
            raise InputError(
                f"no backends found in {repo}: looked for {looked_for()}. Name them with "
                "backends=['cpu=src/cpu', 'cuda=src/cuda'] (or name=ref:path for a git ref, "
                "name=/other/repo:path for another checkout)."
            )
        roots = [_worktree_root(name, path, repo) for name, path in found]
        return roots, notes
    auto = dict(found)
    roots = []
    for spec in specs:
        roots.append(_root_from_spec(spec, repo, auto))
    names = [r.name for r in roots]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(f"backend names must be unique; repeated: {', '.join(dupes)}. Rename with name=path.")
    return roots, notes


def _root_from_spec(spec: str, repo: Path, auto: dict[str, Path]) -> BackendRoot:
    if "=" not in spec:
        if spec in auto:
            return _worktree_root(spec, auto[spec], repo)
        path = _inside(repo, repo / spec, spec)
        if path.is_dir():
            return _worktree_root(path.name.lower(), path, repo)
        raise InputError(
            f"backend {spec!r} is neither a detected backend ({', '.join(auto) or 'none found'}) nor a "
            "folder of the repository. Use name=path, name=ref:path or name=/other/repo:path."
        )
    name, value = (s.strip() for s in spec.split("=", 1))
    if not _NAME_RE.match(name):
        raise InputError(f"backend name {name!r} in {spec!r}: use letters, digits, '-', '_' or '.'")
    if ":" in value:
        left, sub = value.split(":", 1)
        if left.startswith(("/", "~", ".")):
            other = Path(left).expanduser().resolve()
            if not other.is_dir():
                raise InputError(f"{spec!r}: {other} is not a directory; expected name=/other/repo:path")
            require_work_tree(other, repr(spec))
            path = _inside(other, other / sub, spec)
            return _worktree_root(name, path, other, shown=f"{other}:{_rel(path, other)}")
        return _ref_root(name, left, sub, repo, spec)
    return _worktree_root(name, _inside(repo, repo / value, spec), repo)


def require_work_tree(path: Path, what: str) -> None:
    """Only git work trees are read: a path such as / or a home folder is not scanned."""
    if not gitops.is_work_tree(path):
        raise InputError(f"{what}: {path} is not inside a git work tree; diff_backends reads only repositories "
                         "(the one to optimize, or a clone of a fork). Pass a repository's path")


def _inside(base: Path, path: Path, spec: str) -> Path:
    resolved = path.resolve()
    if resolved != base and base not in resolved.parents:
        raise InputError(f"{spec!r} points outside {base} ({resolved}); give a path inside the repository")
    if not resolved.is_dir():
        raise InputError(f"{spec!r}: {resolved} is not a directory")
    return resolved


def _worktree_root(name: str, path: Path, base: Path, shown: str | None = None) -> BackendRoot:
    root = BackendRoot(name=name, root=shown or _rel(path, base), path=path)
    budget = MAX_SCAN_BYTES
    for dirpath, dirnames, filenames in os.walk(path):
        if budget <= 0:
            root.skipped.append(f"the rest of {root.root} (the scan stops after {MAX_SCAN_BYTES // 1_000_000} MB "
                                "of sources per backend)")
            break
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for fname in sorted(filenames):
            file = Path(dirpath) / fname
            if file.suffix.lower() not in SOURCE_SUFFIXES:
                continue
            shown_path = _rel(file, base) if shown is None else f"{shown.split(':', 1)[0]}:{_rel(file, base)}"
            try:
                size = file.stat().st_size
                data = file.read_bytes() if size <= MAX_FILE_BYTES else b""
            except OSError as exc:
                root.skipped.append(f"{shown_path} (unreadable: {exc.strerror})")
                continue
            budget -= len(data)
            _add_file(root, shown_path, data, size)
    return root


def _ref_root(name: str, ref: str, sub: str, repo: Path, spec: str) -> BackendRoot:
    sub = sub.strip("/")
    if ".." in Path(sub).parts:
        raise InputError(f"{spec!r} points outside the repository; give a path inside it")
    git_repo = gitops.open_repo(repo)
    try:
        listing = gitops.tree_entries(git_repo, f"{ref}^{{commit}}", sub or ".", sizes=True)
    except gitops.GitError as exc:
        raise _git_failed(spec, "ls-tree", exc) from exc
    entries = [(e.path, e.sha, e.size or 0) for e in listing
               if e.kind == "blob" and Path(e.path).suffix.lower() in SOURCE_SUFFIXES]
    if not entries:
        raise InputError(f"{spec!r}: no source files under {sub!r} at {ref!r}")
    root = BackendRoot(name=name, root=f"{ref}:{sub}")
    wanted = [(p, sha, size) for p, sha, size in entries if size <= MAX_FILE_BYTES]
    for p, _sha, size in entries:
        if size > MAX_FILE_BYTES:
            _add_file(root, f"{ref}:{p}", b"", size)
    try:
        blobs = gitops.read_blobs(git_repo, [sha for _, sha, _ in wanted])
    except gitops.GitError as exc:
        raise _git_failed(spec, "cat-file", exc) from exc
    for (path, _sha, _size), data in zip(wanted, blobs, strict=True):
        _add_file(root, f"{ref}:{path}", data, len(data))
    return root


def _git_failed(spec: str, command: str, exc: gitops.GitError) -> InputError:
    return InputError(f"{spec!r}: git {command} failed: {str(exc.stderr or exc).strip()[:300]}. "
                      "Use name=ref:path with a branch, tag or commit of this repository.")


def _add_file(root: BackendRoot, shown: str, data: bytes, size: int) -> None:
    if size > MAX_FILE_BYTES:
        root.skipped.append(f"{shown} (huge: {size // 1_000_000} MB)")
    elif b"\0" in data[:8192]:
        root.skipped.append(f"{shown} (binary)")
    else:
        root.files.append(SourceFile(shown, data.decode("utf-8", errors="replace")))


def shared_headers(repo: Path, roots: list[BackendRoot]) -> list[SourceFile]:
    """Headers that may define the op enums the backends share: those in `include/` folders and those
    beside the backend folders' ancestors (`ggml/include/ggml.h`, `ggml/src/ggml-impl.h`)."""
    folders: set[Path] = set()
    for root in roots:
        parent = root.path.parent if root.path else None
        while parent is not None and (parent == repo or repo in parent.parents):
            folders.add(parent)
            parent = parent.parent if parent != repo else None
    headers: dict[Path, None] = {}
    for folder in sorted(folders):
        for entry in sorted(folder.iterdir()):
            if entry.is_file() and entry.suffix in _HEADER_SUFFIXES:
                headers[entry] = None
            elif entry.is_dir() and entry.name == "include":
                for dirpath, dirnames, filenames in os.walk(entry):
                    dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                    headers.update((Path(dirpath) / f, None) for f in sorted(filenames)
                                   if Path(f).suffix in _HEADER_SUFFIXES)
    out = []
    for path in headers:
        try:
            if path.stat().st_size <= MAX_FILE_BYTES:
                out.append(SourceFile(_rel(path, repo), path.read_text(errors="replace")))
        except OSError:
            continue
    return out


@dataclass(frozen=True)
class BuildReference:
    """A path in a backend's build file to sources in another folder, which the backend compiles."""

    folder: Path  # the folder the sources lie in
    file: str  # the build file, relative to the repository
    line: int
    text: str  # the path as written


def compiled_elsewhere(folder: Path, repo: Path | None = None) -> list[BuildReference]:
    """Sources outside `folder` that its build files compile: relative paths (`../ggml-cuda/*.cu`,
    `${CMAKE_CURRENT_SOURCE_DIR}/../x/y.cu`) that end in a compiled suffix, a glob included."""
    out: list[BuildReference] = []
    names = [f for f in BUILD_FILES if (folder / f).is_file()]
    names += sorted(p.name for p in folder.glob("*.cmake"))
    for name in names:
        try:
            text = (folder / name).read_text(errors="replace")
        except OSError:
            continue
        for number, line in enumerate(text.split("\n"), start=1):
            if line.lstrip().startswith("#") or ".." not in line:
                continue
            for m in _BUILD_PATH.finditer(line.split(" #", 1)[0]):
                written = m.group()
                relative = re.sub(r"^(\$\{CMAKE_CURRENT_(?:SOURCE|LIST)_DIR\}|\$\(srcdir\))/", "", written)
                if Path(relative).suffix.lower() not in COMPILED_SUFFIXES:
                    continue  # a header, an include folder, a folder handed to a function
                parts = Path(relative).parts
                fixed = [p for p in parts[:-1] if not _GLOB_CHARS.search(p)]
                if len(fixed) < len(parts) - 1:
                    fixed = list(parts[:next(i for i, p in enumerate(parts) if _GLOB_CHARS.search(p))])
                target = Path(os.path.normpath(folder / Path(*fixed))) if fixed else folder
                if target == folder or folder in target.parents:
                    continue
                shown = _rel(folder / name, repo) if repo is not None else str(folder / name)
                out.append(BuildReference(target, shown, number, written))
    return out


def built_from(roots: list[BackendRoot], repo: Path) -> dict[str, list[tuple[str, BuildReference]]]:
    """Backend name -> the other backends whose sources its build compiles, with the build line that says so."""
    out: dict[str, list[tuple[str, BuildReference]]] = {}
    located = [(r.name, r.path.resolve()) for r in roots if r.path is not None]
    for root in roots:
        if root.path is None:
            continue
        for ref in compiled_elsewhere(root.path.resolve(), repo):
            for name, path in located:
                if name != root.name and (ref.folder == path or path in ref.folder.parents) and \
                        name not in [n for n, _ in out.get(root.name, [])]:
                    out.setdefault(root.name, []).append((name, ref))
    return out


def _has_sources(path: Path) -> bool:
    return any(
        Path(f).suffix.lower() in SOURCE_SUFFIXES for _, _, files in os.walk(path) for f in files
    )


def _rel(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base)) or "."
    except ValueError:
        return str(path)

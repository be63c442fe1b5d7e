"""The source files around the scanned ones: where a called helper is defined, what a constant is worth.

A call `ggml_vec_scale_f32(n, y, s)` in ops.cpp is a pass over y only because of what the helper does
to its arguments, and the helper lives in another file (vec.h; `ggml_vec_cvar_f32` in vec.cpp).
`SourceTree` follows the scanned files' `#include` directives as a compiler without flags would: the
including file's folder first, then each folder above it and that folder's `include/` (ggml-cpu/ops.cpp
reaches ggml/src/ggml-impl.h and ggml/include/ggml.h). Each header brings the source beside it that
implements it (vec.h -> vec.cpp). Files are read once, and parsed only when a name they mention is
looked up, so a scan that follows no helper costs nothing more.

It also evaluates integer constants (`#define TILE 64`, `static constexpr int Q = cfg::Q;`) so that a
local array of 64x64 floats (a tile in memory) can be told from `float acc[4]` (registers).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import tree_sitter

from autoresearch_mcp.analysis import csyntax as cs

MAX_TREE_FILES = 300  # files followed from the scanned ones (a whole project is not pulled in)
MAX_DEPTH = 4  # levels of includes followed
ANCESTORS = 4  # folders above the including file searched for an include (ggml/src/ggml-cpu -> ggml/include)
MAX_FILE_BYTES = 4 * 2**20
IMPLEMENTATIONS = (".c", ".cpp", ".cc", ".cxx", ".cu")
INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"\n]+)[>"]', re.MULTILINE)
# names written before a parameter list that a body follows (`void f(int n) {`; also some calls in conditions,
# `if (f(x)) {`): a file is parsed for a name only when it may define it so
DEFINED = re.compile(rb"\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*(?:(?:const|noexcept|override|final)\b\s*)*\{")
DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\n]+?)[ \t]*(?://[^\n]*)?$", re.MULTILINE)
CONST = re.compile(r"\b(?:constexpr|const)\b[^;=(){}\n]*?\b([A-Za-z_]\w*)\s*(?:=\s*|\{\s*)([^;{}\n]+?)\s*[;}]")
CAST = re.compile(r"\(\s*(?:const\s+)?(?:(?:unsigned|signed|long|short)\s+)*[A-Za-z_]\w*\s*\)(?=\s*[\w(])")
SIZES = {"char": 1, "int8_t": 1, "uint8_t": 1, "short": 2, "int16_t": 2, "uint16_t": 2, "ggml_fp16_t": 2,
         "ggml_bf16_t": 2, "half": 2, "int": 4, "int32_t": 4, "uint32_t": 4, "float": 4, "double": 8,
         "int64_t": 8, "uint64_t": 8, "size_t": 8, "ggml_float": 8}
SIZEOF = re.compile(r"sizeof\s*\(\s*(\w+)\s*\)")
NUMBER = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b")


@dataclass
class SourceFile:
    """One file of the tree: its bytes, the names it may define, and (once asked for) its parse."""

    path: Path
    data: bytes
    names: set[bytes] = field(default_factory=set)
    index: cs.NodeIndex | None = None


Definition = tuple[tree_sitter.Node, cs.NodeIndex]


class SourceTree:
    """Definitions of the functions the scanned files define or reach through their includes, and the
    integer constants they define. `mirrors` are other copies of the same tree (the profiled build's
    copies of hot files beside the work tree): an include not found beside a copy is looked for in them."""

    def __init__(self, scanned: dict[Path, tuple[bytes, cs.NodeIndex]],
                 definitions: dict[str, Definition], mirrors: Iterable[Path] = ()) -> None:
        self._scanned = scanned
        self._definitions = dict(definitions)
        self._mirrors = [m.resolve() for m in mirrors]
        self._files: list[SourceFile] | None = None  # the reachable files, nearest first, once followed
        self._found: dict[str, Definition | None] = {}
        self._constants: dict[str, list[str]] | None = None
        self._values: dict[str, int | None] = {}

    # --- functions ---------------------------------------------------------------------------------

    def definition(self, name: str) -> Definition | None:
        """The definition of function `name` (template arguments dropped), or None; a qualified or member
        call (`ns::f`, `obj.f`, `T::apply`) is not resolved, since which overload or class it means is unknown."""
        if name in self._found:
            return self._found[name]
        plain = cs.without_template_arguments(name)  # `rotate_pairs<T>` is rotate_pairs
        found = self._definitions.get(plain)
        # a method of which class? not guessed; an upper-case name is a macro (GGML_F32_VEC_LOAD, MIN)
        if found is None and not any(c in plain for c in ":.>") and not cs.CONSTANT_NAME.match(plain):
            found = self._look_up(plain)
        self._found[name] = found
        return found

    def _look_up(self, name: str) -> Definition | None:
        key = name.encode()
        for f in self.files():
            if f.index is None and key in f.names:
                self._parse(f)
                if name in self._definitions:
                    return self._definitions[name]
        return None

    def _parse(self, f: SourceFile) -> None:
        cpp = f.path.suffix not in cs.C_SUFFIXES
        f.index = cs.NodeIndex(cs.parse(f.data, cpp).root_node, cpp)
        for fn in f.index.definitions():
            name = cs.function_name(fn)
            if name is not None and fn.child_by_field_name("body") is not None:
                self._definitions.setdefault(name, (fn, f.index))

    # --- files ---------------------------------------------------------------------------------------

    def files(self) -> list[SourceFile]:
        """Files reachable from the scanned ones through includes and the sources beside included headers,
        breadth first (what a file includes directly comes before what its headers include)."""
        if self._files is not None:
            return self._files
        seen = {p.resolve() for p in self._scanned}
        frontier = [(p, data) for p, (data, _) in self._scanned.items()]
        out: list[SourceFile] = []
        for _ in range(MAX_DEPTH):
            nxt: list[tuple[Path, bytes]] = []
            for path, data in frontier:
                for found in self._reached(path, data):
                    if found in seen or len(seen) >= MAX_TREE_FILES:
                        continue
                    seen.add(found)
                    try:
                        if found.stat().st_size > MAX_FILE_BYTES:
                            continue
                        content = found.read_bytes()
                    except OSError:
                        continue
                    out.append(SourceFile(found, content, set(DEFINED.findall(content))))
                    nxt.append((found, content))
            frontier = nxt
        self._files = out
        return out

    def _reached(self, path: Path, data: bytes) -> list[Path]:
        """What one file brings in: the files it includes, and for each included header the source that
        implements it (same name, same folder)."""
        out: list[Path] = []
        for m in INCLUDE.finditer(data):
            header = self._resolve(m.group(1).decode("utf-8", errors="replace").strip(), path)
            if header is None:
                continue
            out.append(header)
            if header.suffix in cs.HEADER_SUFFIXES:
                out.extend(impl for impl in (header.with_suffix(s) for s in IMPLEMENTATIONS) if impl.is_file())
        return out

    def _resolve(self, include: str, including: Path) -> Path | None:
        if include.startswith("/") or not include:
            return None
        for folder in self._search_folders(including.resolve().parent):
            for candidate in (folder / include, folder / "include" / include):
                if candidate.is_file():
                    return candidate.resolve()
        return None

    def _search_folders(self, folder: Path) -> list[Path]:
        starts = [folder]
        for mirror in self._mirrors:  # the same place in another copy of the tree
            for other in self._mirrors:
                if other != mirror and folder.is_relative_to(mirror):
                    starts.append(other / folder.relative_to(mirror))
        out: list[Path] = []
        for start in starts:
            out.extend([start, *list(start.parents)[:ANCESTORS]])
        return [f for f in dict.fromkeys(out) if f != Path(f.anchor) and f != Path.home()]

    # --- constants -----------------------------------------------------------------------------------

    def constant(self, expression: str) -> int | None:
        """The value of an integer constant expression (`TILE_Q * TILE_KV`, `cfg::Q`, `64`), or None when a
        name in it has no constant definition in the tree or the expression is not integer arithmetic."""
        return self._evaluate(expression, 0)

    def _evaluate(self, expression: str, depth: int) -> int | None:
        if depth > 8:
            return None
        expr = SIZEOF.sub(lambda m: str(SIZES.get(m.group(1), "sizeof_" + m.group(1))), expression)
        expr = CAST.sub("", expr).replace("::", "__scope__")
        expr = NUMBER.sub(lambda m: str(int(m.group(1), 0)), expr)
        expr = re.sub(r"(?<![/])/(?![/=])", "//", expr)
        try:
            tree = ast.parse(expr.strip(), mode="eval")
        except (SyntaxError, ValueError):
            return None
        return self._value(tree.body, depth)

    def _value(self, node: ast.expr, depth: int) -> int | None:
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, int) and not isinstance(node.value, bool) else None
        if isinstance(node, ast.Name):
            return self._named(node.id.replace("__scope__", "::"), depth)
        if isinstance(node, ast.UnaryOp):
            v = self._value(node.operand, depth)
            if v is None:
                return None
            return -v if isinstance(node.op, ast.USub) else ~v if isinstance(node.op, ast.Invert) else v
        if isinstance(node, ast.BinOp):
            a, b = self._value(node.left, depth), self._value(node.right, depth)
            return _arithmetic(node.op, a, b) if a is not None and b is not None else None
        return None

    def _named(self, name: str, depth: int) -> int | None:
        if name in self._values:
            return self._values[name]
        self._values[name] = None  # a definition that names itself is not a constant
        table = self._table()
        value = None
        for key in dict.fromkeys((name, name.rsplit("::", 1)[-1])):
            for expression in table.get(key, []):
                value = self._evaluate(expression, depth + 1)
                if value is not None:
                    break
            if value is not None:
                break
        self._values[name] = value
        return value

    def _table(self) -> dict[str, list[str]]:
        """Name -> the expressions it is defined as (#define, const/constexpr), scanned files first."""
        if self._constants is None:
            table: dict[str, list[str]] = {}
            texts = [data for data, _ in self._scanned.values()] + [f.data for f in self.files()]
            for data in texts:
                text = data.decode("utf-8", errors="replace")
                for rx in (DEFINE, CONST):
                    for m in rx.finditer(text):
                        table.setdefault(m.group(1), []).append(m.group(2))
            self._constants = table
        return self._constants


def _arithmetic(op: ast.operator, a: int, b: int) -> int | None:
    """C integer arithmetic on constants (no division by zero, no shift out of range)."""
    if isinstance(op, ast.Add):
        return a + b
    if isinstance(op, ast.Sub):
        return a - b
    if isinstance(op, ast.Mult):
        return a * b
    if isinstance(op, ast.FloorDiv | ast.Mod):
        return None if b == 0 else int(a / b) if isinstance(op, ast.FloorDiv) else a - b * int(a / b)
    if isinstance(op, ast.LShift | ast.RShift):
        return None if not 0 <= b < 64 else a << b if isinstance(op, ast.LShift) else a >> b
    if isinstance(op, ast.BitAnd):
        return a & b
    if isinstance(op, ast.BitOr):
        return a | b
    return None


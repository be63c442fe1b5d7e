"""Find consecutive passes over the same buffer inside C/C++ functions: candidates for fusion.

Memory-bound code pays for every pass over a row: `memcpy(y, x)` followed by an in-place scale of
`y` reads and writes `y` twice where `y[i] = x[i]*scale` would do it once. The finder parses each
file with tree-sitter (error-tolerant, so macro-heavy code such as ggml parses without its headers
or a preprocessor), and in every function lists the passes of each block in order:

- a loop nest (`for`, `while`, `do`) whose trip count is not a compile-time constant and which
  indexes a buffer with its loop variables (`x[i]`, `x + i` in a load or store) or walks a pointer
  along it (`while (n--) *p++ = ...`), counted as one pass over what it touches;
- a C++ range-for over a container of numbers (`for (auto & x : v)`), and `std::fill` / `copy` /
  `transform` / `for_each` and their kin over a range (`v.begin(), v.end()` or `y, y + n`);
- a `memcpy` / `memmove` / `memset` of more than one element;
- a vector helper that walks a row (`ggml_vec_*(n, out, in...)`): the first buffer after the
  length is written (and read when the helper updates in place), the others are read;
- a call of a function defined in the scanned files that walks some of its pointer parameters.

Not passes: debug-only code (assert arguments, `#ifndef NDEBUG`), local arrays (register
accumulators), single-element accesses (`y[0] = 0`, `memcpy(&eps, p, sizeof(float))`). A loop that
finishes another's range (a SIMD body and its scalar tail) is the same pass. A lambda's body is
scanned as a function of its own (named `f::<lambda at line N>`), seeing what it captures.

Two passes are reported when they touch the same buffer (pointers are followed back to what they
were last set to, by a declaration or an assignment, so `y`, `v.data()` and `dst->data` can be one
buffer, `VKQ32` and `VKQ32 + DV` two, as are `y[i]` and `y[n + i]` in loops over i) with no pass
over that buffer, no barrier and no exclusive branch (`if`/`else`, switch cases) between them, on
a path that does not return in between, and over the same range when both ranges are known (the
bound of the counted loop, the count of a helper or memcpy: `i < i1` and `i = i1 + 1` are not the
same elements). Branches of an `#if` are the same code for other builds: a pass written as a SIMD
path and again as a scalar `#else` is paired once, from its first version. Each report says
whether the second pass needs a value the first one reduced (a sum, a maximum): such pairs fuse
only with an online formulation (running max and sum, Welford), the others fuse directly.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import math
import os
import re
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import tree_sitter
import tree_sitter_c
import tree_sitter_cpp

from autoresearch_mcp.core import gitops
from autoresearch_mcp.errors import InputError
from autoresearch_mcp.models import FindPassesResult, PassFinding, PassSite, ProfileResult

C_SUFFIXES = {".c"}
CPP_SUFFIXES = {".cpp", ".cc", ".cxx", ".c++", ".h", ".hpp", ".hh", ".hxx", ".inl", ".inc", ".cu", ".cuh"}
SOURCE_SUFFIXES = C_SUFFIXES | CPP_SUFFIXES
MAX_FILE_BYTES = 8 * 2**20
MAX_FILES = 20_000
SKIP_DIRS = {".git", ".autoresearch", "build", "node_modules", "third_party", "vendor"}

LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")
COPIES = {"memcpy", "memmove", "std::memcpy", "std::memmove", "__builtin_memcpy", "__builtin_memmove"}
FILLS = {"memset", "std::memset", "__builtin_memset"}
VECTOR_HELPER = re.compile(r"^ggml_vec_\w+$")
IN_PLACE = re.compile(r"scale|mad|acc")
CONSTANT_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
CODE_CHARS = 100
ASSERTS = {"assert", "GGML_ASSERT", "static_assert", "GGML_UNUSED"}
# SIMD stores: x86 `_mm256_storeu_ps`, ggml `GGML_F32_VEC_STORE`, NEON `vst1q_f32`, SVE `svst1_f32`, RISC-V
# `__riscv_vse32_v_f32m8`, POWER `vec_xst`, LoongArch `__lasx_xvst`: every pointer they take is written
STORE = re.compile(r"(?i)store|(^|_)v?st1|^__riscv_vs|vec_xst|^__lasx?_x?vst")
# element containers: a pass over `v` walks its elements (`std::vector<std::thread>` is not a buffer)
CONTAINER = re.compile(r"^(std::)?(vector|valarray|span|array|deque|basic_string)<(const)?(unsigned|signed)?"
                       r"(float|double|half|int|long|short|char|bool|u?int\d+_t|size_t|ggml_fp16_t|ggml_bf16_t|"
                       r"ggml_float|_Float16|__fp16|__bf16|bfloat16|[A-Z]\w?)(,[^<>]*)?>$")
ACCESSORS = {"data", "begin", "end", "cbegin", "cend"}
# <algorithm> / <numeric> calls as passes: name -> (mode of the first range, index of an output iterator)
ALGORITHMS = {"fill": ("write", None), "fill_n": ("write", None), "generate": ("write", None),
              "generate_n": ("write", None), "iota": ("write", None), "copy": ("read", 2), "copy_n": ("read", 2),
              "move": ("read", 2), "transform": ("read", -2), "for_each": ("each", None),
              "for_each_n": ("each", None), "accumulate": ("read", None), "reduce": ("read", None),
              "inner_product": ("read", None), "max_element": ("read", None), "min_element": ("read", None),
              "minmax_element": ("read", None)}


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

    @property
    def is_pass(self) -> bool:
        return bool(self.reads or self.writes)

    def access(self, buf: str) -> str:
        if buf in self.writes:
            return "update" if buf in self.reads else "write"
        return "read"


@functools.cache
def _language(cpp: bool) -> tree_sitter.Language:
    return tree_sitter.Language(tree_sitter_cpp.language() if cpp else tree_sitter_c.language())


@functools.cache
def _parser(cpp: bool) -> tree_sitter.Parser:
    return tree_sitter.Parser(_language(cpp))


def _text(node: tree_sitter.Node | None) -> str:
    return node.text.decode("utf-8", errors="replace") if node is not None and node.text is not None else ""


def _walk(node: tree_sitter.Node, skip: frozenset[str] = frozenset()) -> Iterator[tree_sitter.Node]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if n is node or n.type not in skip:
            stack.extend(reversed(n.children))


def _identifiers(node: tree_sitter.Node) -> set[str]:
    return {_text(n) for n in _walk(node) if n.type == "identifier"}


INDEXED = (*LOOPS, "identifier", "call_expression", "subscript_expression", "pointer_expression", "init_declarator",
           "assignment_expression", "update_expression", "declaration", "parameter_declaration", "lambda_expression")


@functools.cache
def _index_query(cpp: bool) -> tree_sitter.Query:
    lang = _language(cpp)
    known = [t for t in INDEXED if lang.id_for_node_kind(t, True)]  # C has no lambdas nor range-for
    return tree_sitter.Query(lang, "[" + " ".join(f"({t})" for t in known) + "] @node")


class NodeIndex:
    """The nodes of one file the scan asks about, by type and position.

    One query (run by tree-sitter in C) replaces the many subtree walks a loop nest, a statement or
    a function would otherwise each make; a lookup is a bisection. `code` lookups leave out what a
    release build does not run or what belongs to another scope: assert arguments, lambda bodies.
    """

    def __init__(self, root: tree_sitter.Node, cpp: bool) -> None:
        found = tree_sitter.QueryCursor(_index_query(cpp)).captures(root).get("node", [])
        found.sort(key=lambda n: (n.start_byte, -n.end_byte))  # document order, parents first
        self._by_type: dict[str, tuple[list[int], list[tree_sitter.Node]]] = {}
        for n in found:
            starts, nodes = self._by_type.setdefault(n.type, ([], []))
            starts.append(n.start_byte)
            nodes.append(n)
        fences = [(n.start_byte, n.end_byte) for n in found
                  if n.type == "lambda_expression" or (n.type == "call_expression" and _callee(n) in ASSERTS)]
        self._fence_starts = [a for a, _ in fences]
        self._fences = fences

    def within(self, node: tree_sitter.Node, types: tuple[str, ...], code: bool = False) -> list[tree_sitter.Node]:
        """Nodes of `types` inside `node` (itself included), in document order."""
        out: list[tree_sitter.Node] = []
        for t in types:
            starts, nodes = self._by_type.get(t, ([], []))
            lo, hi = bisect.bisect_left(starts, node.start_byte), bisect.bisect_left(starts, node.end_byte)
            out.extend(n for n in nodes[lo:hi] if n.end_byte <= node.end_byte and not (code and self._fenced(n, node)))
        if len(types) > 1:
            out.sort(key=lambda n: (n.start_byte, -n.end_byte))
        return out

    def _fenced(self, n: tree_sitter.Node, scope: tree_sitter.Node) -> bool:
        """Whether n lies inside an assert's arguments or a lambda that lies inside scope."""
        i = bisect.bisect_right(self._fence_starts, n.start_byte)
        while i > 0:
            i -= 1
            a, b = self._fences[i]
            if a < scope.start_byte:
                return False
            inside_scope = b <= scope.end_byte and (a, b) != (scope.start_byte, scope.end_byte)
            if inside_scope and a <= n.start_byte and n.end_byte <= b and (a, b) != (n.start_byte, n.end_byte):
                return True
        return False

    def identifiers(self, node: tree_sitter.Node) -> set[str]:
        return {_text(n) for n in self.within(node, ("identifier",))}


def _unwrap(node: tree_sitter.Node) -> tree_sitter.Node:
    while node.type in ("parenthesized_expression", "cast_expression"):
        inner = node.child_by_field_name("value") if node.type == "cast_expression" else node.named_child(0)
        if inner is None:
            break
        node = inner
    return node


def _callee(call: tree_sitter.Node) -> str:
    fn = call.child_by_field_name("function")
    return re.sub(r"\s+", "", _text(fn)) if fn is not None else ""


def _arguments(call: tree_sitter.Node) -> list[tree_sitter.Node]:
    args = call.child_by_field_name("arguments")
    return [a for a in args.named_children if a.type != "comment"] if args is not None else []


def _declarator_name(decl: tree_sitter.Node | None) -> tuple[str | None, str]:
    """The declared name and its shape: 'pointer', 'array', 'fixed_array' (constant size) or 'scalar'."""
    shape = "scalar"
    while decl is not None and decl.type not in ("identifier", "field_identifier", "qualified_identifier"):
        if decl.type == "pointer_declarator" and shape == "scalar":
            shape = "pointer"
        elif decl.type == "array_declarator" and shape == "scalar":
            size = decl.child_by_field_name("size")
            constant = size is not None and all(
                n.type in ("number_literal", "binary_expression", "sizeof_expression", "parenthesized_expression")
                or (n.type == "identifier" and CONSTANT_NAME.match(_text(n))) or not n.is_named
                for n in _walk(size))
            shape = "fixed_array" if constant else "array"
        nxt = decl.child_by_field_name("declarator")
        if nxt is None:
            nxt = next((c for c in decl.named_children if c.type != "parameter_list"), None)
        decl = nxt
    return (_text(decl) if decl is not None else None), shape


def function_name(fn: tree_sitter.Node) -> str | None:
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    if decl is None:
        return None
    name = decl.child_by_field_name("declarator")
    return short_name(_text(name)) if name is not None else None


def short_name(name: str) -> str:
    """`ns::f<T>(int)` and perf's `f(ggml_tensor*) [clone .part.0]` both become `f`."""
    name = re.sub(r"\[clone[^\]]*\]|\(.*$", "", name).strip()
    depth, out = 0, []
    for ch in name:  # drop template arguments, nested ones too
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    plain = "".join(out).strip()
    return plain.split("::")[-1].split()[-1] if plain else name


class Helpers:
    """What the functions defined in the scanned files do to their pointer parameters.

    A call to a function that walks a parameter (a loop over it, a memcpy into it) is a pass over
    the argument, so `op(x, tmp); op2(tmp, y)` is two passes over tmp, whatever the helpers are called.
    Computed on first use, once per function; a recursive call is not followed.
    """

    def __init__(self, definitions: dict[str, tuple[tree_sitter.Node, NodeIndex]]) -> None:
        self.definitions = definitions
        self._modes: dict[str, dict[int, str]] = {}
        self._busy: set[str] = set()

    def modes(self, name: str) -> dict[int, str]:
        """Parameter index -> read / write / update, for the parameters the function walks."""
        known = self._modes.get(name)
        if known is not None:
            return known
        found = self.definitions.get(name)
        if found is None or name in self._busy:
            return {}
        fn, nodes = found
        self._busy.add(name)
        try:
            modes = walked_parameters(FunctionScan(fn, nodes, self))
        finally:
            self._busy.discard(name)
        self._modes[name] = modes
        return modes


def walked_parameters(scan: FunctionScan) -> dict[int, str]:
    """Parameter index -> read / write / update, for the pointer parameters a function (or lambda) walks."""
    body = scan.fn.child_by_field_name("body")
    items = scan.items(body) if body is not None else []
    modes: dict[int, str] = {}
    for index, param in enumerate(_parameters(scan.fn)):
        if param is None or scan.shapes.get(param) not in ("pointer", "array", "container"):
            continue
        reads = any(_of(key, param) for item in items for key in item.reads)
        writes = any(_of(key, param) for item in items for key in item.writes)
        if reads or writes:
            modes[index] = "update" if reads and writes else "write" if writes else "read"
    return modes


def _of(key: str, param: str) -> bool:
    """Whether a buffer identity is the parameter or an offset into it (`x`, `x+r*cols`)."""
    return key == param or key.startswith(param + "+") or key.startswith(param + "-")


def _parameters(fn: tree_sitter.Node) -> list[str | None]:
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type not in ("function_declarator", "abstract_function_declarator"):
        decl = decl.child_by_field_name("declarator")
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    if plist is None:
        return []
    return [_declarator_name(p.child_by_field_name("declarator"))[0] if p.type == "parameter_declaration" else None
            for p in plist.named_children if p.type != "comment"]


class FunctionScan:
    """The passes of one function definition, and the pairs of them that share a buffer."""

    def __init__(self, fn: tree_sitter.Node, index: NodeIndex, helpers: Helpers | None = None,
                 outer: FunctionScan | None = None) -> None:
        self.fn = fn
        self.index = index
        self.helpers = helpers
        self.shapes: dict[str, str] = {}
        # pointer -> (end of the statement that set it, the value it was set to), in document order
        self.aliases: dict[str, list[tuple[int, tree_sitter.Node]]] = {}
        self._cond = 0
        self.lambdas: dict[str, tree_sitter.Node] = {}  # local lambdas by name: helpers of this function
        self._lambda_modes: dict[str, dict[int, str]] = {}
        self._captured: dict[int, Item] = {}  # lambda node id -> what it walks of this function's buffers
        self._declarations()
        if outer is not None:  # a lambda sees what it captures from the enclosing function
            for name, shape in outer.shapes.items():
                if name not in self.shapes:
                    self.shapes[name] = shape
                    if name in outer.aliases:
                        self.aliases[name] = outer.aliases[name]

    # --- symbols -----------------------------------------------------------------------------------

    def _declarations(self) -> None:
        for n in self.index.within(self.fn, ("parameter_declaration", "declaration")):
            kind = re.sub(r"\s+", "", _text(n.child_by_field_name("type")))
            for d in n.children_by_field_name("declarator"):
                name, shape = _declarator_name(d)
                if name is None:
                    continue
                if shape == "array" and n.type == "declaration":
                    shape = "fixed_array"  # a local array: a stack temporary (registers, L1), not a buffer
                elif shape == "scalar" and CONTAINER.match(kind):
                    shape = "container"
                elif shape == "scalar" and kind == "auto":
                    shape = "auto"  # a pointer when its initializer is one (`auto y = v.data()`)
                self.shapes.setdefault(name, shape)
                value = d.child_by_field_name("value") if d.type == "init_declarator" else None
                if value is not None and value.type == "lambda_expression":
                    self.lambdas.setdefault(name, value)
                elif value is not None and shape in ("pointer", "auto"):
                    self.aliases.setdefault(name, []).append((d.end_byte, value))
        for n in self.index.within(self.fn, ("assignment_expression",)):
            left, value = n.child_by_field_name("left"), n.child_by_field_name("right")
            if left is None or value is None or left.type != "identifier" or _operator(n) != "=":
                continue
            name = _text(left)
            if self.shapes.get(name) in ("pointer", "auto") and name not in self.index.identifiers(value):
                self.aliases.setdefault(name, []).append((n.end_byte, value))  # `p = p + 8` walks p: no alias
        for defs in self.aliases.values():
            defs.sort(key=lambda d: d[0])

    def _alias(self, name: str, at: int) -> tree_sitter.Node | None:
        """What pointer `name` was last set to before byte `at` (in document order)."""
        defs = self.aliases.get(name, [])
        i = bisect.bisect_right(defs, at, key=lambda d: d[0])
        return defs[i - 1][1] if i > 0 else None

    def pointer(self, node: tree_sitter.Node, drop: frozenset[str] = frozenset(),
                depth: int = 0) -> tuple[str, str, str] | None:
        """(identity, name as written, base) of a pointer expression; None for a scalar or unknown.

        The identity is the expression the pointer was made from, with local pointers replaced by
        their initializers and casts removed, so `y` and `(float *)((char *) dst->data + i1*nb1)` are
        one buffer, while `VKQ32` and `VKQ32 + DV` are two. Offsets that use a variable in `drop` (the
        loop variables of a loop nest) are left out: the nest walks the whole buffer.
        """
        node = _unwrap(node)
        t = node.type
        if t == "identifier":
            name = _text(node)
            shape = self.shapes.get(name)
            if shape in (None, "scalar", "fixed_array"):
                return None
            alias = self._alias(name, node.start_byte)
            origin = self.pointer(alias, drop, depth + 1) if alias is not None and depth < 8 else None
            if origin is not None:
                return origin[0], name, origin[2]
            return None if shape == "auto" else (name, name, name)
        if t == "update_expression":  # *p++
            arg = node.child_by_field_name("argument")
            return self.pointer(arg, drop, depth) if arg is not None else None
        if t == "call_expression":  # v.data(), v.begin(), std::begin(v)
            fn, args = node.child_by_field_name("function"), _arguments(node)
            if fn is not None and fn.type == "field_expression" and not args and \
                    _text(fn.child_by_field_name("field")) in ACCESSORS:
                obj = fn.child_by_field_name("argument")
                return self.pointer(obj, drop, depth) if obj is not None else None
            if len(args) == 1 and _callee(node).removeprefix("std::") in ACCESSORS:
                return self.pointer(args[0], drop, depth)
            return None
        if t == "field_expression":
            text = _squash(node)
            return text, text, text
        if t == "subscript_expression":  # &x[k], or a row of an array of pointers
            base, index = node.child_by_field_name("argument"), _index(node)
            found = self.pointer(base, drop, depth) if base is not None else None
            if found is None or index is None or self.index.identifiers(index) & drop:
                return found
            return f"{found[0]}+{_squash(index).strip('[]')}", found[1], found[2]
        if t == "pointer_expression":
            arg = node.child_by_field_name("argument")
            if _operator(node) == "&" and arg is not None and _unwrap(arg).type == "subscript_expression":
                return self.pointer(arg, drop, depth)
            return None
        if t == "binary_expression" and _operator(node) in ("+", "-"):
            ptr, offsets = None, []
            for sign, term in _terms(node):
                found = self.pointer(term, drop, depth) if ptr is None else None
                if found is not None:
                    ptr = found
                elif not (self.index.identifiers(term) & drop):
                    offsets.append(sign + _squash(term))
            return (ptr[0] + "".join(offsets), ptr[1], ptr[2]) if ptr is not None else None
        return None

    # --- items -------------------------------------------------------------------------------------

    def items(self, block: tree_sitter.Node, alts: tuple[tuple[int, int], ...] = ()) -> list[Item]:
        """The statements of a block as items, with #if/#else and if/else branches flattened in place."""
        out: list[Item] = []
        for child in block.named_children:
            out.extend(self._statement(child, alts))
        return out

    def _branches(self, branches: list[tree_sitter.Node | None], alts: tuple[tuple[int, int], ...],
                  end: int | None = None) -> list[Item]:
        """The items of each branch; with `end` (an if statement's), a branch that returns never reaches it."""
        self._cond += 1
        cond = self._cond  # nested conditionals take the next ids
        out: list[Item] = []
        for i, branch in enumerate(branches):
            if branch is not None:
                items = self._statement(branch, (*alts, (cond, i)))
                if end is not None and _leaves(branch):
                    for item in items:
                        item.reaches = min(item.reaches, end)
                out.extend(items)
        return out

    def _statement(self, node: tree_sitter.Node, alts: tuple[tuple[int, int], ...]) -> list[Item]:
        t = node.type
        if t in ("compound_statement", "else_clause", "labeled_statement", "attributed_statement"):
            return self.items(node, alts)
        if t in ("preproc_if", "preproc_ifdef", "preproc_elif", "preproc_elifdef"):
            alternative = node.child_by_field_name("alternative")
            if t == "preproc_ifdef" and _text(node.child(0)) == "#ifndef" and \
                    _text(node.child_by_field_name("name")) == "NDEBUG":
                return self._statement(alternative, alts) if alternative is not None else []
            own = [c for c in node.named_children
                   if c != alternative and c != node.child_by_field_name("condition")
                   and c.type != "identifier"]  # the name of an #ifdef
            return self._preproc(own, alternative, alts)
        if t == "preproc_else":
            return self.items(node, alts)
        if t == "if_statement":
            cons, alt = node.child_by_field_name("consequence"), node.child_by_field_name("alternative")
            cond = node.child_by_field_name("condition")
            head = [self._plain(cond, alts)] if cond is not None else []
            return head + self._branches([cons, alt], alts, node.end_byte)
        if t == "switch_statement":
            body = node.child_by_field_name("body")
            cases = [c for c in body.named_children if c.type == "case_statement"] if body is not None else []
            return self._branches(list(cases), alts)
        if t == "case_statement":
            out: list[Item] = []
            for c in node.named_children:
                if c != node.child_by_field_name("value"):
                    out.extend(self._statement(c, alts))
            return out
        if t in LOOPS:
            return [self._loop(node, alts)]
        if t in ("comment", "preproc_include", "preproc_def", "preproc_function_def", "preproc_call"):
            if t == "preproc_call" and "barrier" in _text(node):
                return [Item(node, alts, what=_code(node), barrier=True)]
            return []
        return self._simple(node, alts)

    def _preproc(self, own: list[tree_sitter.Node], alternative: tree_sitter.Node | None,
                 alts: tuple[tuple[int, int], ...]) -> list[Item]:
        self._cond += 1
        cond = -self._cond  # negative: the branches of an #if are builds, not paths of one build
        out: list[Item] = []
        for c in own:
            out.extend(self._statement(c, (*alts, (cond, 0))))
        branch = 1
        while alternative is not None:  # #elif ... #else: each one more branch of the same conditional
            branch_alts = (*alts, (cond, branch))
            nxt = alternative.child_by_field_name("alternative")
            for c in alternative.named_children:
                if c != nxt and c != alternative.child_by_field_name("condition"):
                    out.extend(self._statement(c, branch_alts))
            alternative, branch = nxt, branch + 1
        return out

    def _plain(self, node: tree_sitter.Node, alts: tuple[tuple[int, int], ...]) -> Item:
        item = Item(node, alts)
        item.uses = self.index.identifiers(node)
        item.defines = self._assigned_scalars(node)
        return item

    def _simple(self, node: tree_sitter.Node, alts: tuple[tuple[int, int], ...]) -> list[Item]:
        """An expression statement, declaration or return: its helper calls are passes."""
        out: list[Item] = []
        for call in self.index.within(node, ("call_expression",), code=True):
            name = _callee(call)
            if "barrier" in name.lower() or name == "__syncthreads":
                out.append(Item(node, alts, what=_code(node), barrier=True))
                continue
            item = self._call_pass(call, name, alts)
            if item is not None:
                item.node = node
                item.what = _code(node)
                item.uses = self.index.identifiers(node)
                item.defines |= self._assigned_scalars(node)
                out.append(item)
        if not out:
            out.append(self._plain(node, alts))
        return out

    def _assigned_scalars(self, node: tree_sitter.Node) -> set[str]:
        """Scalars (and register arrays) a statement sets: by assignment, `sum[j] = FMA(...)` into a local
        array, or a statement-level macro such as `GGML_F32_VEC_REDUCE(sumf, sum)` that sets its arguments."""
        names: set[str] = set()
        call = node.named_children[0] if node.type == "expression_statement" and node.named_children else None
        if call is not None and call.type == "call_expression" and CONSTANT_NAME.match(_callee(call)):
            names |= {_text(a) for a in _arguments(call) if a.type == "identifier"}
        for n in self.index.within(node, ("init_declarator", "assignment_expression", "update_expression"), code=True):
            target = None
            if n.type == "init_declarator":
                target = n.child_by_field_name("declarator")
            elif n.type == "assignment_expression":
                target = n.child_by_field_name("left")
            elif n.type == "update_expression":
                target = n.child_by_field_name("argument")
            if target is not None and target.type == "subscript_expression":
                target = _unwrap(target.child_by_field_name("argument") or target)
                if self.shapes.get(_text(target)) != "fixed_array":
                    continue
            if target is not None and target.type == "identifier":
                names.add(_text(target))
        return names

    def _call_pass(self, call: tree_sitter.Node, name: str, alts: tuple[tuple[int, int], ...],
                   drop: frozenset[str] = frozenset()) -> Item | None:
        """memcpy/memmove/memset of more than one element, a ggml_vec_* helper, or a call of a function
        of the scanned files that walks its pointer parameters, as a pass."""
        args = _arguments(call)
        item = Item(call, alts)
        if name in COPIES or name in FILLS:
            if len(args) < 3 or _unwrap(args[-1]).type in ("sizeof_expression", "number_literal"):
                return None  # one element (memcpy(&eps, params, sizeof(float))): not a pass
            dst = self.pointer(args[0], drop)
            if dst is None:
                return None
            counted = _byte_count(args[2])
            _record(item, dst, "write", counted)
            src = self.pointer(args[1], drop) if name in COPIES else None
            if src is not None:
                _record(item, src, "read", counted)
            return item
        if name.startswith("std::") and name.split("::")[-1] in ALGORITHMS:
            return self._algorithm_pass(item, name.split("::")[-1], args, drop, ranged=name.startswith("std::ranges::"))
        if not VECTOR_HELPER.match(name) or len(args) < 2:
            return self._helper_pass(item, name, args, drop)
        extent: Extent | None = ("0", _bound(args[0]))
        buffers: list[tuple[int, tuple[str, str, str]]] = []
        for i, arg in enumerate(args[1:], start=1):
            a = _unwrap(arg)
            target = _unwrap(a.child_by_field_name("argument") or a) if a.type == "pointer_expression" else None
            if target is not None and _operator(a) == "&" and target.type == "identifier":
                item.defines.add(_text(target))  # ggml_vec_max_f32(n, &max, x): a reduction into max
                continue
            found = self.pointer(arg, drop)
            if found is not None:
                buffers.append((i, found))
        if not buffers:
            return None
        rest = buffers
        if buffers[0][0] == 1:  # ggml's convention: (n, out, in...)
            out = buffers[0][1]
            in_place = (len(buffers) == 1 and "set" not in name) or bool(IN_PLACE.search(name))
            _record(item, out, "update" if in_place else "write", extent)
            rest = buffers[1:]
        for _, found in rest:
            _record(item, found, "read", extent)
        return item

    def _algorithm_pass(self, item: Item, name: str, args: list[tree_sitter.Node], drop: frozenset[str],
                        ranged: bool) -> Item | None:
        """`std::fill(y, y + n, 0)`, `std::transform(v.begin(), v.end(), v.begin(), f)`, `std::ranges::fill(v, 0)`:
        a pass over each range; the extent is the whole container, [first, last), or first's n elements."""
        step = 1 if ranged else 2  # a range is one argument, an iterator pair two
        if len(args) < step:
            return None
        mode, out = ALGORITHMS[name]
        first = self.pointer(args[0], drop)
        if first is None:
            return None
        if ranged:
            extent: Extent | None = ("0", f"size({first[0]})")
        elif name.endswith("_n"):
            extent = ("0", _bound(args[1]))
        else:
            extent = self._span(first, args[1], drop)
        if mode == "each":
            fn = _unwrap(args[-1])
            mode = self._element_mode(fn) if fn.type == "lambda_expression" else "read"
        _record(item, first, mode, extent)
        inputs, outputs = [], []
        if out is not None:  # (first, last, d_first), (first, last, first2, d_first, op), (range, d_first, op)
            at = step if name != "transform" or len(args) - step < 3 else step + 1
            inputs, outputs = args[step:at], args[at:at + 1]
        for arg, how in [*((a, "read") for a in inputs), *((a, "write") for a in outputs)]:
            found = self.pointer(arg, drop)
            if found is not None:
                _record(item, found, how, extent)
        return item

    def _span(self, first: tuple[str, str, str], last: tree_sitter.Node, drop: frozenset[str]) -> Extent | None:
        """The extent of [first, last): `v.end()` is the whole of v, `y + n` is n elements from y."""
        last = _unwrap(last)
        end = self.pointer(last, drop)
        if end is None:
            return None
        if end[0] == first[0]:
            return ("0", f"size({first[0]})") if last.type == "call_expression" else None
        terms = _terms(last)
        rest = [(sign, t) for sign, t in terms if self.pointer(t, drop) is None]
        if len(rest) != len(terms) - 1:
            return None
        return ("0", "".join(sign + _squash(t) for sign, t in rest if _unwrap(t).type != "number_literal") or "0")

    def _element_mode(self, owner: tree_sitter.Node) -> str:
        """How a range-for body or a for_each lambda uses its element (the loop's variable, the lambda's
        first parameter): written, updated, or only read (also when taken by value: nothing is written back)."""
        if owner.type == "lambda_expression":
            decl = owner.child_by_field_name("declarator")
            plist = decl.child_by_field_name("parameters") if decl is not None else None
            param = plist.named_children[0] if plist is not None and plist.named_children else None
            element = param.child_by_field_name("declarator") if param is not None else None
        else:
            element = owner.child_by_field_name("declarator")
        var = _declarator_name(element)[0] if element is not None else None
        body = owner.child_by_field_name("body")
        if var is None or body is None or element is None or element.type != "reference_declarator":
            return "read"
        modes = [_assignment_mode(n) for n in self.index.within(body, ("identifier",)) if _text(n) == var]
        if "write" not in modes and "update" not in modes:
            return "read"
        return "write" if all(m == "write" for m in modes) else "update"

    def _helper_pass(self, item: Item, name: str, args: list[tree_sitter.Node], drop: frozenset[str]) -> Item | None:
        """A call of a function defined in the scanned files that walks some of its pointer parameters."""
        lam = self.lambdas.get(name)
        if lam is not None:  # `auto body = [&](float * out) {...}; body(y);`
            if name not in self._lambda_modes:
                self._lambda_modes[name] = {}  # a lambda that calls itself is not followed
                self._lambda_modes[name] = walked_parameters(FunctionScan(lam, self.index, self.helpers, outer=self))
            modes = self._lambda_modes[name]
        else:
            modes = self.helpers.modes(name) if self.helpers is not None else {}
        for index, mode in modes.items():
            found = self.pointer(args[index], drop) if index < len(args) else None
            if found is not None:
                _record(item, found, mode)
        for arg in args:  # parallel_for(n, [&](int b, int e) {...}): the lambda walks what it captures
            if arg.type == "lambda_expression":
                walks = self._captured_walks(arg)
                for key, label in walks.reads.items():
                    item.reads.setdefault(key, _outer_name(label))
                for key, label in walks.writes.items():
                    item.writes.setdefault(key, _outer_name(label))
                item.extents.update(dict.fromkeys(walks.extents))
        return item if item.is_pass else None

    def _captured_walks(self, lam: tree_sitter.Node) -> Item:
        """The buffers of this function that a lambda passed as an argument walks (not its own parameters)."""
        known = self._captured.get(lam.id)
        if known is not None:
            return known
        walks = Item(lam, ())
        self._captured[lam.id] = walks  # a lambda reached again while scanning itself adds nothing
        scan = FunctionScan(lam, self.index, self.helpers, outer=self)
        body = lam.child_by_field_name("body")
        own = {name for n in self.index.within(lam, ("parameter_declaration", "declaration"))
               for d in n.children_by_field_name("declarator") for name in [_declarator_name(d)[0]] if name}
        for inner in scan.items(body) if body is not None else []:
            _merge(walks, inner)
        for table in (walks.reads, walks.writes, walks.extents):
            for key in [k for k in table if re.match(r"\w*", k).group() in own]:  # type: ignore[union-attr]
                del table[key]
        walks.defines.clear()
        return walks

    def _loop(self, node: tree_sitter.Node, alts: tuple[tuple[int, int], ...]) -> Item:
        """A loop nest as one item: a pass when a non-constant loop in it indexes a buffer, walks a pointer
        over one (`*p++`), or ranges over a container (`for (auto & x : v)`)."""
        item = Item(node, alts, what=_code(node))
        names: set[str] = set()
        spans: dict[str, Extent | None] = {}  # loop variable -> the range its loop walks
        lanes: set[str] = set()  # variables of constant-trip loops: SIMD registers, not a walk
        for n in self.index.within(node, LOOPS, code=True):
            if n.type == "for_range_loop":
                names |= self._range_pass(n, item)
                continue
            own = _loop_vars(n) | self._advanced(n)
            names |= own
            if _constant_trip(n, self.shapes):
                lanes |= own
                continue
            if self._searches(n, own):
                continue
            counted = _loop_extent(n)
            for var in own:
                spans[var] = counted[1] if counted is not None and counted[0] == var else None
        loop_vars = frozenset(names)
        if len(spans) > 1:  # a nest walks rows of rows (often through row pointers): its range is not one bound
            spans = dict.fromkeys(spans)
        walk = _Walk(loop_vars, spans, lanes)
        for n in self.index.within(node, ("call_expression",), code=True):
            name = _callee(n)
            if "barrier" in name.lower():
                item.barrier = True
            call_item = self._call_pass(n, name, alts, loop_vars)
            if call_item is not None:
                if self.index.identifiers(n) & loop_vars:  # a call per row: the loop's range is more
                    call_item.extents = dict.fromkeys(call_item.extents)
                _merge(item, call_item)
            elif spans:
                self._pointer_args(n, name, walk, item)
        if spans:
            for n in self.index.within(node, ("subscript_expression",), code=True):
                self._subscript(n, walk, item)
            for n in self.index.within(node, ("pointer_expression",), code=True):
                arg = n.child_by_field_name("argument")
                if _operator(n) == "*" and arg is not None and self.index.identifiers(arg) & loop_vars:
                    found = self.pointer(arg, loop_vars)
                    if found is not None:
                        _record(item, found, _assignment_mode(n), walk.extent(self.index.identifiers(arg)))
        declared_inside = {
            name for n in self.index.within(node, ("declaration", "parameter_declaration"))
            for d in n.children_by_field_name("declarator") for name in [_declarator_name(d)[0]] if name}
        item.uses = self.index.identifiers(node) - declared_inside
        item.defines |= self._assigned_scalars(node) - declared_inside - loop_vars
        if item.barrier:  # threads meet inside: its passes cannot be merged with a neighbour's
            item.reads.clear()
            item.writes.clear()
        return item

    def _range_pass(self, loop: tree_sitter.Node, item: Item) -> set[str]:
        """`for (auto & x : v)` over a container of numbers: a pass over all of v. Returns the element's name."""
        element = loop.child_by_field_name("declarator")
        var = _declarator_name(element)[0] if element is not None else None
        right = loop.child_by_field_name("right")
        r = _unwrap(right) if right is not None else None
        if r is not None and r.type == "identifier" and self.shapes.get(_text(r)) in ("container", "auto"):
            found = self.pointer(r)
            if found is not None:
                _record(item, found, self._element_mode(loop), ("0", f"size({found[0]})"))
        return {var} if var else set()

    def _searches(self, loop: tree_sitter.Node, own: set[str]) -> bool:
        """`while (*p && *p != ']') p++`, `i < n && x[i] < 0`: the loop stops where the data says, a search
        that may end anywhere rather than a pass over the buffer."""
        cond = loop.child_by_field_name("condition")
        if cond is None:
            return False
        for n in self.index.within(cond, ("subscript_expression", "pointer_expression")):
            if n.type == "pointer_expression" and _operator(n) != "*":
                continue
            if self.index.identifiers(n) & own:
                return True
        return False

    def _advanced(self, loop: tree_sitter.Node) -> set[str]:
        """Pointers the loop moves along a buffer: `p++`, `p += 8`, `p = p + stride`."""
        moved: set[str] = set()
        for n in self.index.within(loop, ("update_expression", "assignment_expression"), code=True):
            target = n.child_by_field_name("argument" if n.type == "update_expression" else "left")
            if target is None or target.type != "identifier":
                continue
            name = _text(target)
            if self.shapes.get(name) not in ("pointer", "auto"):
                continue
            value = n.child_by_field_name("right")
            if n.type == "update_expression" or _operator(n) in ("+=", "-=") or (
                    value is not None and name in self.index.identifiers(value)):
                moved.add(name)
        return moved

    def _subscript(self, n: tree_sitter.Node, walk: _Walk, item: Item) -> None:
        """`x[i]` with a loop variable in the index, or `p[k]` with p moved by the loop: the loop walks x."""
        base, index = n.child_by_field_name("argument"), _index(n)
        if base is None or index is None:
            return
        b = _unwrap(base)
        name = _text(b) if b.type == "identifier" else None
        in_index = self.index.identifiers(index) & walk.vars
        if not in_index and name not in walk.vars:
            return
        if name is not None and self.shapes.get(name) in ("scalar", "fixed_array"):
            return
        found = self.pointer(base, walk.vars)
        if found is None and name is not None and name not in self.shapes:
            found = (name, name, name)  # an array declared outside the function
        if found is not None:
            # `y[n + i]` walks another row than `y[i]`: the loop-invariant terms of the index are part of the
            # buffer, as in `y + n` (a literal, `y[i + 1]`, stays within the same row)
            inner = index.named_child(0) if index.type == "subscript_argument_list" else index
            offsets = "".join(sign + _squash(term) for sign, term in _terms(_unwrap(inner)) if inner is not None
                              and not (self.index.identifiers(term) & walk.vars) and term.type != "number_literal")
            moved = {name} if name in walk.vars else set()
            _record(item, (found[0] + offsets, found[1], found[2]), _assignment_mode(n), walk.extent(in_index | moved))

    def _pointer_args(self, call: tree_sitter.Node, name: str, walk: _Walk, item: Item) -> None:
        """`LOAD(x + i)` / `STORE(y + i, v)` / `svst1_f32(pg, y + i, v)`: pointer arithmetic on a loop variable
        inside a call; every pointer a SIMD store takes is written."""
        store = bool(STORE.search(name))
        for arg in _arguments(call):
            a = _unwrap(arg)
            if a.type not in ("binary_expression", "pointer_expression"):
                continue
            used = self.index.identifiers(a) & walk.vars
            if not used or (a.type == "pointer_expression" and (_operator(a) != "&" or not store)):
                continue  # `&y[i]` as a load's argument is already read as a subscript
            found = self.pointer(a, walk.vars)
            if found is not None:
                _record(item, found, "write" if store else "read", walk.extent(used))

    # --- pairs -------------------------------------------------------------------------------------

    def blocks(self) -> Iterator[list[Item]]:
        """The function body and every loop body in it, each as its sequence of items."""
        body = self.fn.child_by_field_name("body")
        if body is None:
            return
        yield self.items(body)
        for n in self.index.within(body, LOOPS, code=True):
            if n != body:
                inner = n.child_by_field_name("body")
                if inner is not None:
                    yield self.items(inner) if inner.type == "compound_statement" else self._statement(inner, ())


@dataclass
class _Walk:
    """The variables a loop nest walks with, and the range each walks (None: unknown)."""

    vars: frozenset[str]
    spans: dict[str, Extent | None]
    lanes: set[str]

    def extent(self, used: set[str]) -> Extent | None:
        """The range an access indexed by `used` covers: known when one counted loop alone drives it (with a
        register lane or a second loop in the index, `y[i + j*EPR]`, it is more than that loop's bound)."""
        return self.spans.get(next(iter(used))) if len(used) == 1 else None


def _outer_name(label: str) -> str:
    """`row (y)` as the caller of a lambda that made row from y sees it: y."""
    return label.split(" (", 1)[1].rstrip(")") if " (" in label else label


def _record(item: Item, found: tuple[str, str, str], mode: str, extent: Extent | None = None) -> None:
    identity, name, base = found
    label = name if name == base else f"{name} ({base})"
    if mode in ("write", "update"):
        item.writes.setdefault(identity, label)
    if mode in ("read", "update"):
        item.reads.setdefault(identity, label)
    _extend(item, identity, extent)


def _extend(item: Item, identity: str, extent: Extent | None) -> None:
    """One item walking a buffer over two different ranges: its extent is unknown."""
    if identity in item.extents and item.extents[identity] != extent:
        item.extents[identity] = None
    else:
        item.extents[identity] = extent


def _bound(node: tree_sitter.Node) -> str:
    """A loop bound or element count as compared between passes: casts, parentheses, whitespace and literal
    terms dropped (`n - 1` is `n`: the same row), `v.size()` and `std::size(v)` as size(v)."""
    node = _unwrap(node)
    if node.type == "call_expression":
        fn, args = node.child_by_field_name("function"), _arguments(node)
        if fn is not None and fn.type == "field_expression" and _text(fn.child_by_field_name("field")) == "size":
            return f"size({_squash(fn.child_by_field_name('argument') or fn)})"
        if _callee(node) in ("std::size", "size") and len(args) == 1:
            return f"size({_squash(args[0])})"
    return "".join(sign + _squash(t) for sign, t in _terms(node) if _unwrap(t).type != "number_literal") or "0"


def _byte_count(size: tree_sitter.Node) -> Extent | None:
    """`n * sizeof(float)` is n elements; a count of bytes alone (`nb1`) cannot be compared with a loop's."""
    size = _unwrap(size)
    if size.type == "binary_expression" and _operator(size) == "*":
        left, right = size.child_by_field_name("left"), size.child_by_field_name("right")
        for a, b in ((left, right), (right, left)):
            if a is not None and b is not None and _unwrap(a).type == "sizeof_expression":
                return ("0", _bound(b))
    return None


def _loop_extent(loop: tree_sitter.Node) -> tuple[str, Extent] | None:
    """(variable, (start, bound)) of a counted for loop: `for (int i = s; i < n; ...)`."""
    cond = loop.child_by_field_name("condition")
    if loop.type != "for_statement" or cond is None or cond.type != "binary_expression":
        return None
    left, right, op = cond.child_by_field_name("left"), cond.child_by_field_name("right"), _operator(cond)
    if left is None or right is None:
        return None
    if op in (">", ">="):
        left, right = right, left
    elif op not in ("<", "<=", "!="):
        return None
    if _unwrap(left).type != "identifier":
        return None
    var, start = _text(_unwrap(left)), None
    for n in loop.children_by_field_name("initializer"):
        for m in _walk(n):
            if m.type == "init_declarator" and _declarator_name(m.child_by_field_name("declarator"))[0] == var:
                start = m.child_by_field_name("value")
            elif m.type == "assignment_expression" and _text(m.child_by_field_name("left")) == var:
                start = m.child_by_field_name("right")
    return var, (_bound(start) if start is not None else None, _bound(right))


def _squash(node: tree_sitter.Node) -> str:
    return re.sub(r"\s+", "", _text(node))


def _operator(node: tree_sitter.Node) -> str:
    return _text(node.child_by_field_name("operator"))


def _index(node: tree_sitter.Node) -> tree_sitter.Node | None:
    return node.child_by_field_name("indices") or node.child_by_field_name("index")


def _terms(node: tree_sitter.Node, sign: str = "+") -> list[tuple[str, tree_sitter.Node]]:
    """`a + b - c` as [(+, a), (+, b), (-, c)] (casts and parentheses around a sum are kept whole)."""
    if node.type == "binary_expression" and _operator(node) in ("+", "-"):
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if left is not None and right is not None:
            flip = "-" if sign == "-" else "+"
            second = _operator(node) if sign == "+" else ("+" if _operator(node) == "-" else "-")
            return _terms(left, flip) + _terms(right, second)
    return [(sign, node)]


def _merge(into: Item, other: Item) -> None:
    for k, v in other.reads.items():
        into.reads.setdefault(k, v)
    for k, v in other.writes.items():
        into.writes.setdefault(k, v)
    for k, e in other.extents.items():
        _extend(into, k, e)
    into.defines |= other.defines


def _assignment_mode(n: tree_sitter.Node) -> str:
    """How an lvalue-capable expression is used: written, updated (+=, ++) or read."""
    child, parent = n, n.parent
    while parent is not None and parent.type == "parenthesized_expression":
        child, parent = parent, parent.parent
    if parent is None:
        return "read"
    if parent.type == "assignment_expression" and parent.child_by_field_name("left") == child:
        return "write" if _text(parent.child_by_field_name("operator")) == "=" else "update"
    if parent.type == "update_expression":
        return "update"
    return "read"


def _loop_vars(loop: tree_sitter.Node) -> set[str]:
    if loop.type == "for_statement":
        names: set[str] = set()
        for part in ("initializer", "update"):
            for node in loop.children_by_field_name(part):
                for n in _walk(node):
                    if n.type == "init_declarator":
                        name, _ = _declarator_name(n.child_by_field_name("declarator"))
                        if name:
                            names.add(name)
                    elif n.type in ("assignment_expression", "update_expression"):
                        target = n.child_by_field_name("left") or n.child_by_field_name("argument")
                        if target is not None and target.type == "identifier":
                            names.add(_text(target))
        return names
    if loop.type in ("while_statement", "do_statement"):
        cond = loop.child_by_field_name("condition")
        body = loop.child_by_field_name("body")
        if cond is None or body is None:
            return set()
        updated = {
            _text(t) for part in (body, cond) for n in _walk(part)
            if n.type in ("update_expression", "assignment_expression")
            for t in [n.child_by_field_name("argument") or n.child_by_field_name("left")]
            if t is not None and t.type == "identifier"}
        return updated & _identifiers(cond)
    return set()


def _continues(first: tree_sitter.Node, second: tree_sitter.Node) -> bool:
    """Whether loop `second` finishes the range of loop `first` instead of walking it again: a SIMD
    body and its scalar tail, `for (; i < n; ++i)` or `for (int i = np; i < n; ++i)` after `i < np`, also
    when the tail runs once per register lane (`for (k = 0; k < UNROLL; ++k) for (i = np; i < n; ++i)`)."""
    if first.type not in LOOPS or second.type != "for_statement":
        return False
    if _loop_vars(first) & _loop_vars(second):
        init = second.child_by_field_name("initializer")
        if init is None:
            return True
        cond = first.child_by_field_name("condition")
        bound = cond.child_by_field_name("right") if cond is not None and cond.type == "binary_expression" else None
        starts = [n.child_by_field_name("value") or n.child_by_field_name("right")
                  for n in _walk(init) if n.type in ("init_declarator", "assignment_expression")]
        if bound is not None and any(v is not None and _squash(v) == _squash(bound) for v in starts):
            return True
    if _constant_trip(second):
        body = second.child_by_field_name("body")
        inner = [c for c in body.named_children if c.type != "comment"] if body is not None and \
            body.type == "compound_statement" else [body]
        return len(inner) == 1 and inner[0] is not None and _continues(first, inner[0])
    return False


def _constant_trip(loop: tree_sitter.Node, variables: Collection[str] = ()) -> bool:
    """`for (j = 0; j < GGML_F32_ARR; j++)`: a bound fixed at compile time (registers, not memory). An
    upper-case name among the function's own `variables` (llm.c's `int C` channels) is not a constant."""
    cond = loop.child_by_field_name("condition")
    if loop.type != "for_statement" or cond is None or cond.type != "binary_expression":
        return False
    right = _unwrap(cond.child_by_field_name("right") or cond)
    return right.type in ("number_literal", "sizeof_expression") or (
        right.type == "identifier" and bool(CONSTANT_NAME.match(_text(right))) and _text(right) not in variables)


def _code(node: tree_sitter.Node) -> str:
    first = _text(node).split("\n", 1)[0].strip()
    return first if len(first) <= CODE_CHARS else first[: CODE_CHARS - 3] + "..."


def _leaves(branch: tree_sitter.Node) -> bool:
    """Whether a branch ends by leaving the block: `return`, `break`, `continue`, `GGML_ABORT(...)`."""
    last = branch
    while last.type in ("compound_statement", "else_clause"):
        body = [c for c in last.named_children if c.type != "comment"]
        if not body:
            return False
        last = body[-1]
    if last.type in ("return_statement", "break_statement", "continue_statement", "goto_statement"):
        return True
    call = last.named_children[0] if last.type == "expression_statement" and last.named_children else None
    return call is not None and call.type == "call_expression" and _callee(call) in ("GGML_ABORT", "abort", "exit")


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
    """Known and different: another bound, or another non-literal start (`i0 < i1` then `i0 = i1 + 1`).
    A whole container (`size(v)`) may well be `n` elements: only another container's size differs from it."""
    if a is None or b is None:
        return False
    whole = a[1].startswith("size(") + b[1].startswith("size(")
    return (a[1] != b[1] and whole != 1) or (a[0] is not None and b[0] is not None and a[0] != b[0])


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
        while found is not None and j in following and _continues(sequence[j].node, sequence[following[j]].node):
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
        tail_of = {*body.reads, *body.writes} if body is not None and _continues(body.node, first.node) else set()
        for buf in sorted({*first.reads, *first.writes} - tail_of):
            hits: list[Item] = []  # the next pass on each path: more than one after an if/else
            for j in range(i + 1, len(sequence)):
                second = sequence[j]
                if second.node.start_byte >= first.reaches:
                    break
                if not _compatible(first, second) or any(_compatible(h, second) or _builds_apart(h, second)
                                                         for h in hits):
                    continue
                if second.barrier:
                    break
                if second.node == first.node or _continues(first.node, second.node):
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
                files.extend(f for n in sorted(names) if Path(n).suffix in SOURCE_SUFFIXES
                             for f in [Path(folder, n)] if f.is_file())
                if len(files) > MAX_FILES:
                    raise InputError(f"more than {MAX_FILES} C/C++ files under {path}: name smaller folders, "
                                     "files, or functions")
        else:
            raise InputError(f"{path} does not exist: give C/C++ files or folders (absolute, or relative to "
                             "the session repository)")
    return files


def _functions(tree: tree_sitter.Tree) -> Iterator[tree_sitter.Node]:
    for n in _walk(tree.root_node, frozenset({"function_definition"})):
        if n.type == "function_definition":
            yield n


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
    parsed: list[tuple[Path, NodeIndex, list[tuple[str, tree_sitter.Node]]]] = []
    definitions: dict[str, tuple[tree_sitter.Node, NodeIndex]] = {}
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
        cpp = path.suffix not in C_SUFFIXES
        tree = _parser(cpp).parse(data)
        index = NodeIndex(tree.root_node, cpp)
        named = [(name, fn) for fn in _functions(tree) for name in [function_name(fn)] if name is not None]
        for name, fn in named:
            definitions.setdefault(name, (fn, index))
        parsed.append((path, index, named))
    helpers = Helpers(definitions)
    for path, index, named in parsed:
        shown = next((str(path.relative_to(b)) for b in bases or [] if path.is_relative_to(b)), str(path))
        for name, fn in named:
            share = hotness.of(name, path, fn) if hotness is not None else None
            if selective and share is None and name not in (functions or ()):
                continue
            found_names.add(name)
            scan = FunctionScan(fn, index, helpers)
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
    findings.sort(key=lambda f: (-(f.hot_share_pct or 0.0), not f.fusable, f.file, f.passes[0].start_line))
    return FindPassesResult(
        findings=findings[:limit], total_findings=len(findings), files_scanned=len(files),
        functions_scanned=scanned, elapsed_s=round(time.perf_counter() - t0, 3), notes=notes)


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
    names = {short_name(f) for f in functions} if functions else None
    hotness = None
    files: list[Path] = []
    unplaced: set[str] = set()  # hot functions without source lines: found by name
    if profile is not None:
        hotness = Hotness()
        for f in [f for f in profile.functions if not f.dso.startswith("[")][:top_functions]:
            hotness.by_name[short_name(f.name)] = max(hotness.by_name.get(short_name(f.name), 0.0), f.share_pct)
            if not f.lines:
                unplaced.add(short_name(f.name))
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
    unique = sorted({f.resolve(): f for f in files if f.suffix in SOURCE_SUFFIXES}.values())
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
            return [root / p for p in gitops.grep_files(root, names, [f"*{s}" for s in sorted(SOURCE_SUFFIXES)])]
    encoded = [n.encode() for n in names]
    return [f for f in source_files([root]) if any(n in f.read_bytes() for n in encoded)]

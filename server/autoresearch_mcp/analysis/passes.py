"""Find consecutive passes over the same buffer inside C/C++ functions: candidates for fusion.

Memory-bound code pays for every pass over a row: `memcpy(y, x)` followed by an in-place scale of
`y` reads and writes `y` twice where `y[i] = x[i]*scale` would do it once. The finder parses each
file with tree-sitter (error-tolerant, so macro-heavy code such as ggml parses without its headers
or a preprocessor), and in every function lists the passes of each block in order:

- a loop nest whose trip count is not a compile-time constant and which indexes a buffer with its
  loop variables (`x[i]`, `x + i` in a load or store), counted as one pass over what it touches;
- a `memcpy` / `memmove` / `memset` of more than one element;
- a vector helper that walks a row (`ggml_vec_*(n, out, in...)`): the first buffer after the
  length is written (and read when the helper updates in place), the others are read;
- a call of a function defined in the scanned files that walks some of its pointer parameters.

Not passes: debug-only code (assert arguments, `#ifndef NDEBUG`), local arrays (register
accumulators), single-element copies. A loop that finishes another's range (a SIMD body and its
scalar tail) is the same pass.

Two passes are reported when they touch the same buffer (pointers are followed back to what they
were initialized from, so `y` and `dst->data` are one buffer, `VKQ32` and `VKQ32 + DV` two, as are
`y[i]` and `y[n + i]` in loops over i) with no
pass over that buffer, no barrier and no exclusive branch (`#if`/`#else`, `if`/`else`, switch
cases) between them. Each report says
whether the second pass needs a value the first one reduced (a sum, a maximum): such pairs fuse
only with an online formulation (running max and sum, Welford), the others fuse directly.
"""

from __future__ import annotations

import bisect
import functools
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import tree_sitter
import tree_sitter_c
import tree_sitter_cpp

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


@dataclass
class Item:
    """A statement of a block, in order: a pass, a barrier, or plain code that defines scalars."""

    node: tree_sitter.Node
    alts: tuple[tuple[int, int], ...]  # (conditional id, branch index) of each enclosing #if / if
    what: str = ""
    reads: dict[str, str] = field(default_factory=dict)  # canonical buffer -> name as written
    writes: dict[str, str] = field(default_factory=dict)
    defines: set[str] = field(default_factory=set)
    uses: set[str] = field(default_factory=set)
    barrier: bool = False

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
            scan = FunctionScan(fn, nodes, self)
            body = fn.child_by_field_name("body")
            items = scan.items(body) if body is not None else []
        finally:
            self._busy.discard(name)
        modes: dict[int, str] = {}
        for index, param in enumerate(_parameters(fn)):
            if param is None or scan.shapes.get(param) not in ("pointer", "array"):
                continue
            reads = any(_of(key, param) for item in items for key in item.reads)
            writes = any(_of(key, param) for item in items for key in item.writes)
            if reads or writes:
                modes[index] = "update" if reads and writes else "write" if writes else "read"
        self._modes[name] = modes
        return modes


def _of(key: str, param: str) -> bool:
    """Whether a buffer identity is the parameter or an offset into it (`x`, `x+r*cols`)."""
    return key == param or key.startswith(param + "+") or key.startswith(param + "-")


def _parameters(fn: tree_sitter.Node) -> list[str | None]:
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    if plist is None:
        return []
    return [_declarator_name(p.child_by_field_name("declarator"))[0] if p.type == "parameter_declaration" else None
            for p in plist.named_children if p.type != "comment"]


class FunctionScan:
    """The passes of one function definition, and the pairs of them that share a buffer."""

    def __init__(self, fn: tree_sitter.Node, index: NodeIndex, helpers: Helpers | None = None) -> None:
        self.fn = fn
        self.index = index
        self.helpers = helpers
        self.shapes: dict[str, str] = {}
        self.aliases: dict[str, tree_sitter.Node] = {}
        self._cond = 0
        self._declarations()

    # --- symbols -----------------------------------------------------------------------------------

    def _declarations(self) -> None:
        for n in self.index.within(self.fn, ("parameter_declaration", "declaration")):
            for d in n.children_by_field_name("declarator"):
                name, shape = _declarator_name(d)
                if name is None:
                    continue
                if shape == "array" and n.type == "declaration":
                    shape = "fixed_array"  # a local array: a stack temporary (registers, L1), not a buffer
                self.shapes.setdefault(name, shape)
                value = d.child_by_field_name("value") if d.type == "init_declarator" else None
                if value is not None and shape == "pointer":
                    self.aliases.setdefault(name, value)

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
            if self.shapes.get(name) in (None, "scalar", "fixed_array"):
                return None
            alias = self.aliases.get(name)
            origin = self.pointer(alias, drop, depth + 1) if alias is not None and depth < 8 else None
            return (origin[0], name, origin[2]) if origin is not None else (name, name, name)
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

    def _branches(self, branches: list[tree_sitter.Node | None], alts: tuple[tuple[int, int], ...]) -> list[Item]:
        self._cond += 1
        cond = self._cond  # nested conditionals take the next ids
        out: list[Item] = []
        for i, branch in enumerate(branches):
            if branch is not None:
                out.extend(self._statement(branch, (*alts, (cond, i))))
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
            return head + self._branches([cons, alt], alts)
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
        cond = self._cond
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
        names: set[str] = set()
        for n in self.index.within(node, ("init_declarator", "assignment_expression", "update_expression"), code=True):
            target = None
            if n.type == "init_declarator":
                target = n.child_by_field_name("declarator")
            elif n.type == "assignment_expression":
                target = n.child_by_field_name("left")
            elif n.type == "update_expression":
                target = n.child_by_field_name("argument")
            if target is not None and target.type == "identifier":
                names.add(_text(target))
        return names

    def _call_pass(self, call: tree_sitter.Node, name: str, alts: tuple[tuple[int, int], ...],
                   drop: frozenset[str] = frozenset()) -> Item | None:
        """memcpy/memmove/memset of more than one element, a ggml_vec_* helper, or a call of a function
        of the scanned files that walks its pointer parameters, as a pass."""
        args_node = call.child_by_field_name("arguments")
        args = [a for a in args_node.named_children if a.type != "comment"] if args_node is not None else []
        item = Item(call, alts)
        if name in COPIES or name in FILLS:
            if len(args) < 3 or _unwrap(args[-1]).type in ("sizeof_expression", "number_literal"):
                return None  # one element (memcpy(&eps, params, sizeof(float))): not a pass
            dst = self.pointer(args[0], drop)
            if dst is None:
                return None
            _record(item, dst, "write")
            src = self.pointer(args[1], drop) if name in COPIES else None
            if src is not None:
                _record(item, src, "read")
            return item
        if not VECTOR_HELPER.match(name) or len(args) < 2:
            return self._helper_pass(item, name, args, drop)
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
            _record(item, out, "update" if in_place else "write")
            rest = buffers[1:]
        for _, found in rest:
            _record(item, found, "read")
        return item

    def _helper_pass(self, item: Item, name: str, args: list[tree_sitter.Node], drop: frozenset[str]) -> Item | None:
        """A call of a function defined in the scanned files that walks some of its pointer parameters."""
        modes = self.helpers.modes(name) if self.helpers is not None else {}
        for index, mode in modes.items():
            found = self.pointer(args[index], drop) if index < len(args) else None
            if found is not None:
                _record(item, found, mode)
        return item if item.is_pass else None

    def _loop(self, node: tree_sitter.Node, alts: tuple[tuple[int, int], ...]) -> Item:
        """A loop nest as one item: a pass when a non-constant loop in it indexes a buffer."""
        item = Item(node, alts, what=_code(node))
        names: set[str] = set()
        walking = False
        for n in self.index.within(node, LOOPS, code=True):
            own = _loop_vars(n)
            names |= own
            walking = walking or (bool(own) and not _constant_trip(n))
        loop_vars = frozenset(names)
        for n in self.index.within(node, ("call_expression",), code=True):
            name = _callee(n)
            if "barrier" in name.lower():
                item.barrier = True
            call_item = self._call_pass(n, name, alts, loop_vars)
            if call_item is not None:
                _merge(item, call_item)
            elif walking:
                self._pointer_args(n, name, loop_vars, item)
        if walking:
            for n in self.index.within(node, ("subscript_expression",), code=True):
                self._subscript(n, loop_vars, item)
            for n in self.index.within(node, ("pointer_expression",), code=True):
                arg = n.child_by_field_name("argument")
                if _operator(n) == "*" and arg is not None and self.index.identifiers(arg) & loop_vars:
                    found = self.pointer(arg, loop_vars)
                    if found is not None:
                        _record(item, found, _assignment_mode(n))
        declared_inside = {
            name for n in self.index.within(node, ("declaration", "parameter_declaration"))
            for d in n.children_by_field_name("declarator") for name in [_declarator_name(d)[0]] if name}
        item.uses = self.index.identifiers(node) - declared_inside
        item.defines |= self._assigned_scalars(node) - declared_inside - loop_vars
        if item.barrier:  # threads meet inside: its passes cannot be merged with a neighbour's
            item.reads.clear()
            item.writes.clear()
        return item

    def _subscript(self, n: tree_sitter.Node, loop_vars: frozenset[str], item: Item) -> None:
        """`x[i]` with a loop variable in the index: the loop walks x."""
        base, index = n.child_by_field_name("argument"), _index(n)
        if base is None or index is None or not (self.index.identifiers(index) & loop_vars):
            return
        b = _unwrap(base)
        name = _text(b) if b.type == "identifier" else None
        if name is not None and self.shapes.get(name) in ("scalar", "fixed_array"):
            return
        found = self.pointer(base, loop_vars)
        if found is None and name is not None and name not in self.shapes:
            found = (name, name, name)  # an array declared outside the function
        if found is not None:
            # `y[n + i]` walks another row than `y[i]`: the loop-invariant terms of the index are part of the
            # buffer, as in `y + n` (a literal, `y[i + 1]`, stays within the same row)
            inner = index.named_child(0) if index.type == "subscript_argument_list" else index
            offsets = "".join(sign + _squash(term) for sign, term in _terms(_unwrap(inner)) if inner is not None
                              and not (self.index.identifiers(term) & loop_vars) and term.type != "number_literal")
            _record(item, (found[0] + offsets, found[1], found[2]), _assignment_mode(n))

    def _pointer_args(self, call: tree_sitter.Node, name: str, loop_vars: frozenset[str], item: Item) -> None:
        """`LOAD(x + i)` / `STORE(y + i, v)`: pointer arithmetic on a loop variable inside a call."""
        args_node = call.child_by_field_name("arguments")
        if args_node is None:
            return
        store = "store" in name.lower()
        for i, arg in enumerate(args_node.named_children):
            a = _unwrap(arg)
            if a.type != "binary_expression" or not (self.index.identifiers(a) & loop_vars):
                continue
            found = self.pointer(a, loop_vars)
            if found is not None:
                _record(item, found, "write" if store and i == 0 else "read")

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


def _record(item: Item, found: tuple[str, str, str], mode: str) -> None:
    identity, name, base = found
    label = name if name == base else f"{name} ({base})"
    if mode in ("write", "update"):
        item.writes.setdefault(identity, label)
    if mode in ("read", "update"):
        item.reads.setdefault(identity, label)


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
            _text(t) for n in _walk(body) if n.type in ("update_expression", "assignment_expression")
            for t in [n.child_by_field_name("argument") or n.child_by_field_name("left")]
            if t is not None and t.type == "identifier"}
        return updated & _identifiers(cond)
    return set()


def _continues(first: tree_sitter.Node, second: tree_sitter.Node) -> bool:
    """Whether loop `second` finishes the range of loop `first` instead of walking it again: a SIMD
    body and its scalar tail, `for (; i < n; ++i)` or `for (int i = np; i < n; ++i)` after `i < np`."""
    if first.type not in LOOPS or second.type != "for_statement":
        return False
    if not _loop_vars(first) & _loop_vars(second):
        return False
    init = second.child_by_field_name("initializer")
    if init is None:
        return True
    cond = first.child_by_field_name("condition")
    bound = cond.child_by_field_name("right") if cond is not None and cond.type == "binary_expression" else None
    starts = [n.child_by_field_name("value") or n.child_by_field_name("right")
              for n in _walk(init) if n.type in ("init_declarator", "assignment_expression")]
    return bound is not None and any(v is not None and _squash(v) == _squash(bound) for v in starts)


def _constant_trip(loop: tree_sitter.Node) -> bool:
    """`for (j = 0; j < GGML_F32_ARR; j++)`: a bound fixed at compile time (registers, not memory)."""
    cond = loop.child_by_field_name("condition")
    if loop.type != "for_statement" or cond is None or cond.type != "binary_expression":
        return False
    right = _unwrap(cond.child_by_field_name("right") or cond)
    return right.type in ("number_literal", "sizeof_expression") or (
        right.type == "identifier" and bool(CONSTANT_NAME.match(_text(right))))


def _code(node: tree_sitter.Node) -> str:
    first = _text(node).split("\n", 1)[0].strip()
    return first if len(first) <= CODE_CHARS else first[: CODE_CHARS - 3] + "..."


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


def pairs(sequence: list[Item]) -> Iterator[tuple[str, Item, Item, list[str]]]:
    """(buffer, first, second, depends_on) for consecutive passes of a block over the same buffer."""
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
                if not _compatible(first, second) or any(_compatible(h, second) for h in hits):
                    continue
                if second.barrier:
                    break
                if second.node == first.node or _continues(first.node, second.node):
                    continue  # calls within one statement (often the arms of a ?:), or a loop's tail
                if buf in second.reads or buf in second.writes:
                    yield buf, first, second, _depends(sequence, i, j)
                    hits.append(second)


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
            scanned += 1
            findings.extend(_scan(FunctionScan(fn, index, helpers), name, shown, share))
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
        patterns = [f"*{suffix}" for suffix in sorted(SOURCE_SUFFIXES)]
        args = ["git", "-C", str(root), "grep", "-l", "-F", "-w"]
        for name in sorted(names):
            args += ["-e", name]
        proc = subprocess.run([*args, "--", *patterns], capture_output=True, text=True, timeout=60, check=False)
        if proc.returncode in (0, 1):
            return [root / line for line in proc.stdout.splitlines() if line]
    encoded = [n.encode() for n in names]
    return [f for f in source_files([root]) if any(n in f.read_bytes() for n in encoded)]

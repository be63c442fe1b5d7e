"""C/C++ syntax as the pass finder reads it: tree-sitter parsers, node text, names and an index.

Everything here is about one parsed file and is free of any idea of passes: the text of a node, a
call's callee and arguments, a declarator's name and shape, a function's name and parameters, the
terms of a sum, and `NodeIndex`, which answers "which nodes of these types lie inside this one"
with a bisection instead of a walk.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterator

import tree_sitter
import tree_sitter_c
import tree_sitter_cpp

C_SUFFIXES = {".c"}
CPP_SUFFIXES = {".cpp", ".cc", ".cxx", ".c++", ".h", ".hpp", ".hh", ".hxx", ".inl", ".inc", ".cu", ".cuh"}
SOURCE_SUFFIXES = C_SUFFIXES | CPP_SUFFIXES
HEADER_SUFFIXES = {".h", ".hpp", ".hh", ".hxx", ".inl", ".inc", ".cuh"}
LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")
CONSTANT_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
CODE_CHARS = 100
ASSERTS = {"assert", "GGML_ASSERT", "static_assert", "GGML_UNUSED"}


def _language(cpp: bool) -> tree_sitter.Language:
    return tree_sitter.Language(tree_sitter_cpp.language() if cpp else tree_sitter_c.language())


@functools.cache
def parser(cpp: bool) -> tree_sitter.Parser:
    return tree_sitter.Parser(_language(cpp))


# `float * GGML_RESTRICT y`: a qualifier macro between `*` and the name is an error for a parser that does not
# expand macros (the parameter would be named GGML_RESTRICT). No valid C puts an upper-case word there
# otherwise, so it is blanked (same length: every byte offset and line number stays)
QUALIFIER_MACRO = re.compile(rb"(?<=\*)([ \t]*(?:const[ \t]+)?)([A-Z_][A-Z0-9_]*)(?=[ \t]+[A-Za-z_]\w*[ \t]*[,)=;\[])")


def parse(data: bytes, cpp: bool) -> tree_sitter.Tree:
    """The syntax tree of a C (cpp=False) or C++ file, qualifier macros blanked first."""
    if b"*" in data:
        data = QUALIFIER_MACRO.sub(lambda m: m.group(1) + b" " * len(m.group(2)), data)
    return parser(cpp).parse(data)


def text(node: tree_sitter.Node | None) -> str:
    return node.text.decode("utf-8", errors="replace") if node is not None and node.text is not None else ""


def walk(node: tree_sitter.Node, skip: frozenset[str] = frozenset()) -> Iterator[tree_sitter.Node]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if n is node or n.type not in skip:
            stack.extend(reversed(n.children))


def identifiers(node: tree_sitter.Node) -> set[str]:
    return {text(n) for n in walk(node) if n.type == "identifier"}


INDEXED = (*LOOPS, "identifier", "call_expression", "subscript_expression", "pointer_expression", "init_declarator",
           "assignment_expression", "update_expression", "declaration", "parameter_declaration", "lambda_expression",
           "function_definition")


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
        starts, nodes = self._by_type.get("identifier", ([], []))
        self._identifier_texts = [text(n) for n in nodes]  # leaves: decoded once, sliced by position
        fences = [(n.start_byte, n.end_byte) for n in found
                  if n.type == "lambda_expression" or (n.type == "call_expression" and callee(n) in ASSERTS)]
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
        """The names used inside `node` (asserts and lambdas included)."""
        starts = self._by_type.get("identifier", ([], []))[0]
        lo, hi = bisect.bisect_left(starts, node.start_byte), bisect.bisect_left(starts, node.end_byte)
        return set(self._identifier_texts[lo:hi])

    def definitions(self) -> list[tree_sitter.Node]:
        """Every function definition of the file (methods and templates too), in document order."""
        return list(self._by_type.get("function_definition", ([], []))[1])


def unwrap(node: tree_sitter.Node) -> tree_sitter.Node:
    while node.type in ("parenthesized_expression", "cast_expression"):
        inner = node.child_by_field_name("value") if node.type == "cast_expression" else node.named_child(0)
        if inner is None:
            break
        node = inner
    return node


def callee(call: tree_sitter.Node) -> str:
    fn = call.child_by_field_name("function")
    return re.sub(r"\s+", "", text(fn)) if fn is not None else ""


def arguments(call: tree_sitter.Node) -> list[tree_sitter.Node]:
    args = call.child_by_field_name("arguments")
    return [a for a in args.named_children if a.type != "comment"] if args is not None else []


def declarator_name(decl: tree_sitter.Node | None) -> tuple[str | None, str]:
    """The declared name and its shape: 'pointer', 'array', 'fixed_array' (constant size) or 'scalar'."""
    shape = "scalar"
    while decl is not None and decl.type not in ("identifier", "field_identifier", "qualified_identifier"):
        if decl.type == "pointer_declarator" and shape == "scalar":
            shape = "pointer"
        elif decl.type == "array_declarator" and shape == "scalar":
            size = decl.child_by_field_name("size")
            constant = size is not None and all(
                n.type in ("number_literal", "binary_expression", "sizeof_expression", "parenthesized_expression")
                or (n.type == "identifier" and CONSTANT_NAME.match(text(n))) or not n.is_named
                for n in walk(size))
            shape = "fixed_array" if constant else "array"
        nxt = decl.child_by_field_name("declarator")
        if nxt is None:
            nxt = next((c for c in decl.named_children if c.type != "parameter_list"), None)
        decl = nxt
    return (text(decl) if decl is not None else None), shape


def function_name(fn: tree_sitter.Node) -> str | None:
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    if decl is None:
        return None
    name = decl.child_by_field_name("declarator")
    return short_name(text(name)) if name is not None else None


def short_name(name: str) -> str:
    """`ns::f<T>(int)` and perf's `f(ggml_tensor*) [clone .part.0]` both become `f`."""
    name = re.sub(r"\[clone[^\]]*\]|\(.*$", "", name).strip()
    plain = without_template_arguments(name).strip()
    return plain.split("::")[-1].split()[-1] if plain else name


def without_template_arguments(name: str) -> str:
    """`rotate_pairs<T>` -> `rotate_pairs`, nested arguments too."""
    depth, out = 0, []
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def parameters(fn: tree_sitter.Node) -> list[str | None]:
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type not in ("function_declarator", "abstract_function_declarator"):
        decl = decl.child_by_field_name("declarator")
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    if plist is None:
        return []
    return [declarator_name(p.child_by_field_name("declarator"))[0] if p.type == "parameter_declaration" else None
            for p in plist.named_children if p.type != "comment"]



def squash(node: tree_sitter.Node) -> str:
    return re.sub(r"\s+", "", text(node))


def operator(node: tree_sitter.Node) -> str:
    return text(node.child_by_field_name("operator"))


def subscript_index(node: tree_sitter.Node) -> tree_sitter.Node | None:
    return node.child_by_field_name("indices") or node.child_by_field_name("index")


def terms(node: tree_sitter.Node, sign: str = "+") -> list[tuple[str, tree_sitter.Node]]:
    """`a + b - c` as [(+, a), (+, b), (-, c)] (casts and parentheses around a sum are kept whole)."""
    if node.type == "binary_expression" and operator(node) in ("+", "-"):
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if left is not None and right is not None:
            flip = "-" if sign == "-" else "+"
            second = operator(node) if sign == "+" else ("+" if operator(node) == "-" else "-")
            return terms(left, flip) + terms(right, second)
    return [(sign, node)]



def first_line(node: tree_sitter.Node) -> str:
    first = text(node).split("\n", 1)[0].strip()
    return first if len(first) <= CODE_CHARS else first[: CODE_CHARS - 3] + "..."


def functions(tree: tree_sitter.Tree) -> Iterator[tree_sitter.Node]:
    for n in walk(tree.root_node, frozenset({"function_definition"})):
        if n.type == "function_definition":
            yield n


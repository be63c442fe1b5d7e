"""The names a C function declares, their shapes, and which buffer a pointer expression is."""

from __future__ import annotations

import bisect
import re

import tree_sitter

from autoresearch_mcp.analysis import csyntax as cs
from autoresearch_mcp.analysis.csources import SourceTree

# element containers: a pass over `v` walks its elements (`std::vector<std::thread>` is not a buffer)
CONTAINER = re.compile(r"^(std::)?(vector|valarray|span|array|deque|basic_string)<(const)?(unsigned|signed)?"
                       r"(float|double|half|int|long|short|char|bool|u?int\d+_t|size_t|ggml_fp16_t|ggml_bf16_t|"
                       r"ggml_float|_Float16|__fp16|__bf16|bfloat16|[A-Z]\w?)(,[^<>]*)?>$")
ACCESSORS = {"data", "begin", "end", "cbegin", "cend"}
# a local array of at least this many elements is a tile in memory (64x64 scores, a row), not registers
# (`float acc[8]`, `GGML_F32_VEC sum[GGML_F32_ARR]`)
TILE_MIN_ELEMENTS = 1024
SCALAR_TYPE = re.compile(r"^(const|volatile|unsigned|signed)*(float|double|half|int|long|short|char|bool|u?int\d+_t|"
                         r"size_t|ggml_fp16_t|ggml_bf16_t|ggml_float|_Float16|__fp16|__bf16)$")


class Names:
    """The names of one function definition (or lambda): their shapes, the values its pointers were set to,
    and its local lambdas. `tree` evaluates the constants that size a local array; `outer` is the enclosing
    function of a lambda, whose names it sees."""

    def __init__(self, fn: tree_sitter.Node, index: cs.NodeIndex, tree: SourceTree | None = None,
                 outer: Names | None = None) -> None:
        self.fn = fn
        self.index = index
        self.tree = tree
        self.shapes: dict[str, str] = {}
        # pointer -> (end of the statement that set it, the value it was set to), in document order
        self.aliases: dict[str, list[tuple[int, tree_sitter.Node]]] = {}
        self.lambdas: dict[str, tree_sitter.Node] = {}  # local lambdas by name: helpers of this function
        self._declarations()
        if outer is not None:  # a lambda sees what it captures from the enclosing function
            for name, shape in outer.shapes.items():
                if name not in self.shapes:
                    self.shapes[name] = shape
                    if name in outer.aliases:
                        self.aliases[name] = outer.aliases[name]

    def _declarations(self) -> None:
        for n in self.index.within(self.fn, ("parameter_declaration", "declaration")):
            kind = re.sub(r"\s+", "", cs.text(n.child_by_field_name("type")))
            for d in n.children_by_field_name("declarator"):
                name, shape = cs.declarator_name(d)
                if name is None:
                    continue
                if shape in ("array", "fixed_array") and n.type == "declaration":
                    shape = "tile" if self._tile(kind, d) else "fixed_array"  # else registers, not a buffer
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
            if left is None or value is None or left.type != "identifier" or cs.operator(n) != "=":
                continue
            name = cs.text(left)
            if self.shapes.get(name) in ("pointer", "auto") and name not in self.index.identifiers(value):
                self.aliases.setdefault(name, []).append((n.end_byte, value))  # `p = p + 8` walks p: no alias
        for defs in self.aliases.values():
            defs.sort(key=lambda d: d[0])

    def _tile(self, kind: str, declarator: tree_sitter.Node) -> bool:
        """A local array of numbers held in memory: a size of at least TILE_MIN_ELEMENTS, as the constants of
        the tree evaluate it (`float kq[Q_TILE*KV_TILE]`, `float t[64][64]`)."""
        if not SCALAR_TYPE.match(kind):
            return False  # vector registers (`__m256 acc[4]`), structs, pointers
        elements = 1
        for d in cs.walk(declarator):
            if d.type != "array_declarator":
                continue
            size = d.child_by_field_name("size")
            if size is None:
                return False  # `float w[] = {...}`: a table of constants
            count = self._constant(size)
            if count is None:
                return False  # unknown here (a template parameter, a macro of another build): left as registers
            elements *= count
        return elements >= TILE_MIN_ELEMENTS

    def _constant(self, node: tree_sitter.Node) -> int | None:
        return self.tree.constant(cs.text(node)) if self.tree is not None else None
    def alias(self, name: str, at: int) -> tree_sitter.Node | None:
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
        node = cs.unwrap(node)
        t = node.type
        if t == "identifier":
            name = cs.text(node)
            shape = self.shapes.get(name)
            if shape in (None, "scalar", "fixed_array"):
                return None
            alias = self.alias(name, node.start_byte)
            origin = self.pointer(alias, drop, depth + 1) if alias is not None and depth < 8 else None
            if origin is not None:
                return origin[0], name, origin[2]
            return None if shape == "auto" else (name, name, name)
        if t == "update_expression":  # *p++
            arg = node.child_by_field_name("argument")
            return self.pointer(arg, drop, depth) if arg is not None else None
        if t == "call_expression":  # v.data(), v.begin(), std::begin(v)
            fn, args = node.child_by_field_name("function"), cs.arguments(node)
            if fn is not None and fn.type == "field_expression" and not args and \
                    cs.text(fn.child_by_field_name("field")) in ACCESSORS:
                obj = fn.child_by_field_name("argument")
                return self.pointer(obj, drop, depth) if obj is not None else None
            if len(args) == 1 and cs.callee(node).removeprefix("std::") in ACCESSORS:
                return self.pointer(args[0], drop, depth)
            return None
        if t == "field_expression":
            text = cs.squash(node)
            return text, text, text
        if t == "subscript_expression":  # &x[k], or a row of an array of pointers
            base, index = node.child_by_field_name("argument"), cs.subscript_index(node)
            found = self.pointer(base, drop, depth) if base is not None else None
            if found is None or index is None or self.index.identifiers(index) & drop:
                return found
            return f"{found[0]}+{cs.squash(index).strip('[]')}", found[1], found[2]
        if t == "pointer_expression":
            arg = node.child_by_field_name("argument")
            if cs.operator(node) == "&" and arg is not None and cs.unwrap(arg).type == "subscript_expression":
                return self.pointer(arg, drop, depth)
            return None
        if t == "binary_expression" and cs.operator(node) in ("+", "-"):
            ptr, offsets = None, []
            for sign, term in cs.terms(node):
                found = self.pointer(term, drop, depth) if ptr is None else None
                if found is not None:
                    ptr = found
                elif not (self.index.identifiers(term) & drop):
                    offsets.append(sign + cs.squash(term))
            return (ptr[0] + "".join(offsets), ptr[1], ptr[2]) if ptr is not None else None
        return None

    def varies(self, node: tree_sitter.Node, names: frozenset[str], depth: int = 0) -> bool:
        """Whether an expression changes with `names` (a loop's variables), also through the pointers it uses
        (`kq_row`, set to `KQ + tq*KV` inside the loop over tq)."""
        used = self.index.identifiers(node)
        if used & names:
            return True
        if depth >= 4:
            return False
        for name in used:
            alias = self.alias(name, node.start_byte)
            if alias is not None and self.varies(alias, names, depth + 1):
                return True
        return False

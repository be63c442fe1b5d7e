"""A C/C++ function read as a sequence of passes: which statements walk which buffers, and how.

`FunctionScan` turns each block of a function into items in order: a pass (a loop nest that walks a
buffer, a memcpy/memset, a std algorithm over a range, a call of a helper that walks its pointer
arguments), a barrier, or plain code that defines scalars (`passitems`). Pointers are followed back to
what they were set to, so one buffer has one identity however it is written (`cnames`). `Helpers` says
what a called function does to its pointer parameters, computed from its definition wherever the
source tree holds it (see `csources`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import tree_sitter

from autoresearch_mcp.analysis import csyntax as cs
from autoresearch_mcp.analysis.cnames import Names
from autoresearch_mcp.analysis.csources import SourceTree
from autoresearch_mcp.analysis.loopforms import (
    bound,
    breaks,
    byte_count,
    constant_trip,
    leaves,
    loop_extent,
    loop_variables,
)
from autoresearch_mcp.analysis.passitems import Extent, Item, Walked, merge, record

COPIES = {"memcpy", "memmove", "std::memcpy", "std::memmove", "__builtin_memcpy", "__builtin_memmove"}
FILLS = {"memset", "std::memset", "__builtin_memset"}
VECTOR_HELPER = re.compile(r"^ggml_vec_\w+$")
IN_PLACE = re.compile(r"scale|mad|acc")
# SIMD stores: x86 `_mm256_storeu_ps`, ggml `GGML_F32_VEC_STORE`, NEON `vst1q_f32`, SVE `svst1_f32`,
# RISC-V `__riscv_vse32_v_f32m8`, POWER `vec_xst`, LoongArch `__lasx_xvst`: every pointer they take is written
STORE = re.compile(r"(?i)store|(^|_)v?st1|^svst|^__riscv_vs|vec_xst|^__lasx?_x?vst")
# <algorithm> / <numeric> calls as passes: name -> (mode of the first range, index of an output iterator)
ALGORITHMS = {"fill": ("write", None), "fill_n": ("write", None), "generate": ("write", None),
              "generate_n": ("write", None), "iota": ("write", None), "copy": ("read", 2), "copy_n": ("read", 2),
              "move": ("read", 2), "transform": ("read", -2), "for_each": ("each", None),
              "for_each_n": ("each", None), "accumulate": ("read", None), "reduce": ("read", None),
              "inner_product": ("read", None), "max_element": ("read", None), "min_element": ("read", None),
              "minmax_element": ("read", None)}


class Helpers:
    """What the functions a scanned function calls do to their pointer parameters, read from their
    definitions wherever the source tree holds them (the scanned files, the headers they include and the
    sources that implement those headers).

    A call to a function that walks a parameter (a loop over it, a memcpy into it) is a pass over
    the argument, so `op(x, tmp); op2(tmp, y)` is two passes over tmp, whatever the helpers are called.
    Computed on first use, once per function; a recursive call is not followed.
    """

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self._modes: dict[int, dict[int, Walked]] = {}
        self._busy: set[int] = set()
        self._scans: dict[int, FunctionScan] = {}

    def defined(self, name: str) -> bool:
        return self.tree.definition(name) is not None

    def scan(self, fn: tree_sitter.Node, index: cs.NodeIndex) -> FunctionScan:
        """The scan of a function definition, made once whether it is read as a helper or for findings."""
        known = self._scans.get(fn.id)
        if known is None:
            known = self._scans[fn.id] = FunctionScan(fn, index, self)
        return known

    def modes(self, name: str) -> dict[int, Walked]:
        """Parameter index -> how the function walks it, for the pointer parameters it walks."""
        found = self.tree.definition(name)
        if found is None:
            return {}
        fn, nodes = found
        known = self._modes.get(fn.id)
        if known is not None:
            return known
        if fn.id in self._busy:
            return {}
        self._busy.add(fn.id)
        try:
            modes = walked_parameters(self.scan(fn, nodes))
        finally:
            self._busy.discard(fn.id)
        self._modes[fn.id] = modes
        return modes


def walked_parameters(scan: FunctionScan) -> dict[int, Walked]:
    """Parameter index -> how a function (or lambda) walks it, for the pointer parameters it walks."""
    items = scan.body_items()
    names = cs.parameters(scan.fn)
    modes: dict[int, Walked] = {}
    for index, param in enumerate(names):
        if param is None or scan.names.shapes.get(param) not in ("pointer", "array", "container"):
            continue
        reads = any(_of(key, param) for item in items for key in item.reads)
        writes = any(_of(key, param) for item in items for key in item.writes)
        if not (reads or writes):
            continue
        bounds = {extent[1] for item in items for key, extent in item.extents.items()
                  if _of(key, param) and extent is not None}
        counts = {names.index(b[1:]) for b in bounds if b.startswith("+") and b[1:] in names}
        modes[index] = Walked("update" if reads and writes else "write" if writes else "read",
                              counts.pop() if len(counts) == 1 else None)
    return modes


def _of(key: str, param: str) -> bool:
    """Whether a buffer identity is the parameter or an offset into it (`x`, `x+r*cols`)."""
    return key == param or key.startswith(param + "+") or key.startswith(param + "-")


class FunctionScan:
    """The passes of one function definition, and the pairs of them that share a buffer."""

    def __init__(self, fn: tree_sitter.Node, index: cs.NodeIndex, helpers: Helpers | None = None,
                 outer: FunctionScan | None = None) -> None:
        self.fn = fn
        self.index = index
        self.helpers = helpers
        self.names: Names = Names(fn, index, helpers.tree if helpers is not None else None,
                                  outer.names if outer is not None else None)
        self._cond = 0
        self._lambda_modes: dict[str, dict[int, Walked]] = {}
        self._captured: dict[int, Item] = {}  # lambda node id -> what it walks of this function's buffers
        self._body_items: list[Item] | None = None

    # --- items -------------------------------------------------------------------------------------

    def items(self, block: tree_sitter.Node, alts: tuple[tuple[int, int], ...] = ()) -> list[Item]:
        """The statements of a block as items, with #if/#else and if/else branches flattened in place."""
        out: list[Item] = []
        for child in block.named_children:
            out.extend(self._statement(child, alts))
        return out

    def _branches(self, branches: list[tree_sitter.Node | None], alts: tuple[tuple[int, int], ...],
                  end: int | None = None, memo: bool = False) -> list[Item]:
        """The items of each branch; with `end` (an if statement's), a branch that returns never reaches it;
        with `memo`, the first branch is a memo (see _memo)."""
        self._cond += 1
        cond = self._cond  # nested conditionals take the next ids
        out: list[Item] = []
        for i, branch in enumerate(branches):
            if branch is not None:
                items = self._statement(branch, (*alts, (cond, i)))
                if end is not None and leaves(branch):
                    for item in items:
                        item.reaches = min(item.reaches, end)
                if memo and i == 0:
                    for item in items:
                        item.memos = item.memos | {cond}
                out.extend(items)
        return out

    def _memo(self, cond: tree_sitter.Node, branch: tree_sitter.Node) -> bool:
        """`if (last != key) { fill cache; last = key; }`: the branch runs only when what its condition
        remembers changed, and records the new value. What it computes is made once for many later uses
        (rope's sin/cos cache, once per position, read for every head), not one more pass over each row.
        An ordering test (`if (s > M) { M = s; ... }`, a running maximum) is no memo."""
        c = cond.child_by_field_name("value") or cond.named_child(0) if cond.type == "condition_clause" else cond
        c = cs.unwrap(c) if c is not None else cond
        if c.type == "binary_expression" and cs.operator(c) not in ("!=", "=="):
            return False
        if c.type not in ("binary_expression", "identifier", "unary_expression", "field_expression"):
            return False
        tested = self.index.identifiers(c)
        for n in self.index.within(branch, ("assignment_expression",), code=True):
            left = n.child_by_field_name("left")
            if left is not None and cs.unwrap(left).type == "identifier" and cs.text(cs.unwrap(left)) in tested:
                return True
        return False

    def _statement(self, node: tree_sitter.Node, alts: tuple[tuple[int, int], ...]) -> list[Item]:
        t = node.type
        if t == "compound_statement":  # `{ ...; return; }`: nothing after the block follows what it holds
            return _ending(self.items(node, alts), [node], node.end_byte)
        if t in ("else_clause", "labeled_statement", "attributed_statement"):
            return self.items(node, alts)
        if t in ("preproc_if", "preproc_ifdef", "preproc_elif", "preproc_elifdef"):
            alternative = node.child_by_field_name("alternative")
            if t == "preproc_ifdef" and cs.text(node.child(0)) == "#ifndef" and \
                    cs.text(node.child_by_field_name("name")) == "NDEBUG":
                return self._statement(alternative, alts) if alternative is not None else []
            own = [c for c in node.named_children
                   if c != alternative and c != node.child_by_field_name("condition")
                   and c.type != "identifier"]  # the name of an #ifdef
            return self._preproc(own, alternative, alts, node.end_byte)
        if t == "preproc_else":
            return self.items(node, alts)
        if t == "if_statement":
            cons, alt = node.child_by_field_name("consequence"), node.child_by_field_name("alternative")
            cond = node.child_by_field_name("condition")
            head = [self._plain(cond, alts)] if cond is not None else []
            memo = cond is not None and cons is not None and self._memo(cond, cons)
            return head + self._branches([cons, alt], alts, node.end_byte, memo)
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
        if t in cs.LOOPS:
            return [self._loop(node, alts)]
        if t in ("comment", "preproc_include", "preproc_def", "preproc_function_def", "preproc_call"):
            if t == "preproc_call" and "barrier" in cs.text(node):
                return [Item(node, alts, what=cs.first_line(node), barrier=True)]
            return []
        return self._simple(node, alts)

    def _preproc(self, own: list[tree_sitter.Node], alternative: tree_sitter.Node | None,
                 alts: tuple[tuple[int, int], ...], end: int) -> list[Item]:
        """The branches of an #if as builds; a branch that returns (`#if SIMD ... return; #endif` before a
        generic fallback) is not followed by the code after the #endif."""
        self._cond += 1
        cond = -self._cond  # negative: the branches of an #if are builds, not paths of one build
        out = _ending([i for c in own for i in self._statement(c, (*alts, (cond, 0)))], own, end)
        branch = 1
        while alternative is not None:  # #elif ... #else: each one more branch of the same conditional
            branch_alts = (*alts, (cond, branch))
            nxt = alternative.child_by_field_name("alternative")
            body = [c for c in alternative.named_children
                    if c != nxt and c != alternative.child_by_field_name("condition")]
            out.extend(_ending([i for c in body for i in self._statement(c, branch_alts)], body, end))
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
            name = cs.callee(call)
            if "barrier" in name.lower() or name == "__syncthreads":
                out.append(Item(node, alts, what=cs.first_line(node), barrier=True))
                continue
            item = self._call_pass(call, name, alts)
            if item is not None:
                item.node = node
                item.what = cs.first_line(node)
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
        if call is not None and call.type == "call_expression" and cs.CONSTANT_NAME.match(cs.callee(call)):
            names |= {cs.text(a) for a in cs.arguments(call) if a.type == "identifier"}
        for n in self.index.within(node, ("init_declarator", "assignment_expression", "update_expression"), code=True):
            target = None
            if n.type == "init_declarator":
                target = n.child_by_field_name("declarator")
            elif n.type == "assignment_expression":
                target = n.child_by_field_name("left")
            elif n.type == "update_expression":
                target = n.child_by_field_name("argument")
            if target is not None and target.type == "subscript_expression":
                target = cs.unwrap(target.child_by_field_name("argument") or target)
                if self.names.shapes.get(cs.text(target)) != "fixed_array":
                    continue
            if target is not None and target.type == "identifier":
                names.add(cs.text(target))
        return names

    def _call_pass(self, call: tree_sitter.Node, name: str, alts: tuple[tuple[int, int], ...],
                   drop: frozenset[str] = frozenset()) -> Item | None:
        """memcpy/memmove/memset of more than one element, a ggml_vec_* helper, or a call of a function
        of the scanned files that walks its pointer parameters, as a pass."""
        args = cs.arguments(call)
        item = Item(call, alts)
        if name in COPIES or name in FILLS:
            if len(args) < 3 or cs.unwrap(args[-1]).type in ("sizeof_expression", "number_literal"):
                return None  # one element (memcpy(&eps, params, sizeof(float))): not a pass
            dst = self.names.pointer(args[0], drop)
            if dst is None:
                return None
            counted = byte_count(args[2])
            record(item, dst, "write", counted)
            src = self.names.pointer(args[1], drop) if name in COPIES else None
            if src is not None:
                record(item, src, "read", counted)
            return item
        if name.startswith("std::") and name.split("::")[-1] in ALGORITHMS:
            return self._algorithm_pass(item, name.split("::")[-1], args, drop, ranged=name.startswith("std::ranges::"))
        if name in self.names.lambdas or (self.helpers is not None and self.helpers.defined(name)):
            return self._helper_pass(item, name, args, drop)
        if VECTOR_HELPER.match(name) and len(args) >= 2:
            return self._vector_convention(item, name, args, drop)
        return self._helper_pass(item, name, args, drop)

    def _vector_convention(self, item: Item, name: str, args: list[tree_sitter.Node],
                           drop: frozenset[str]) -> Item | None:
        """A ggml_vec_* helper whose definition is out of reach (a file scanned alone): ggml's convention,
        `(n, out, in...)`, says the first buffer is written (updated when the helper scales, accumulates or
        works in place) and the others are read. A definition found in the tree always wins over it."""
        extent: Extent | None = ("0", bound(args[0]))
        buffers: list[tuple[int, tuple[str, str, str]]] = []
        for i, arg in enumerate(args[1:], start=1):
            if self._reduced_into(arg, item):
                continue
            found = self.names.pointer(arg, drop)
            if found is not None:
                buffers.append((i, found))
        if not buffers:
            return None
        rest = buffers
        if buffers[0][0] == 1:
            out = buffers[0][1]
            in_place = (len(buffers) == 1 and "set" not in name) or bool(IN_PLACE.search(name))
            record(item, out, "update" if in_place else "write", extent)
            rest = buffers[1:]
        for _, found in rest:
            record(item, found, "read", extent)
        return item

    def _reduced_into(self, arg: tree_sitter.Node, item: Item) -> bool:
        """`&max` as an argument (ggml_vec_max_f32(n, &max, x)): the call sets the scalar max."""
        a = cs.unwrap(arg)
        target = cs.unwrap(a.child_by_field_name("argument") or a) if a.type == "pointer_expression" else None
        if target is not None and cs.operator(a) == "&" and target.type == "identifier" and \
                self.names.shapes.get(cs.text(target), "scalar") in ("scalar", "fixed_array"):
            item.defines.add(cs.text(target))
            return True
        return False

    def _algorithm_pass(self, item: Item, name: str, args: list[tree_sitter.Node], drop: frozenset[str],
                        ranged: bool) -> Item | None:
        """`std::fill(y, y + n, 0)`, `std::transform(v.begin(), v.end(), v.begin(), f)`, `std::ranges::fill(v, 0)`:
        a pass over each range; the extent is the whole container, [first, last), or first's n elements."""
        step = 1 if ranged else 2  # a range is one argument, an iterator pair two
        if len(args) < step:
            return None
        mode, out = ALGORITHMS[name]
        first = self.names.pointer(args[0], drop)
        if first is None:
            return None
        if ranged:
            extent: Extent | None = ("0", f"size({first[0]})")
        elif name.endswith("_n"):
            extent = ("0", bound(args[1]))
        else:
            extent = self._span(first, args[1], drop)
        if mode == "each":
            fn = cs.unwrap(args[-1])
            mode = self._element_mode(fn) if fn.type == "lambda_expression" else "read"
        record(item, first, mode, extent)
        inputs, outputs = [], []
        if out is not None:  # (first, last, d_first), (first, last, first2, d_first, op), (range, d_first, op)
            at = step if name != "transform" or len(args) - step < 3 else step + 1
            inputs, outputs = args[step:at], args[at:at + 1]
        for arg, how in [*((a, "read") for a in inputs), *((a, "write") for a in outputs)]:
            found = self.names.pointer(arg, drop)
            if found is not None:
                record(item, found, how, extent)
        return item

    def _span(self, first: tuple[str, str, str], last: tree_sitter.Node, drop: frozenset[str]) -> Extent | None:
        """The extent of [first, last): `v.end()` is the whole of v, `y + n` is n elements from y."""
        last = cs.unwrap(last)
        end = self.names.pointer(last, drop)
        if end is None:
            return None
        if end[0] == first[0]:
            return ("0", f"size({first[0]})") if last.type == "call_expression" else None
        terms = cs.terms(last)
        rest = [(sign, t) for sign, t in terms if self.names.pointer(t, drop) is None]
        if len(rest) != len(terms) - 1:
            return None
        return ("0", "".join(sign + cs.squash(t) for sign, t in rest if cs.unwrap(t).type != "number_literal") or "0")

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
        var = cs.declarator_name(element)[0] if element is not None else None
        body = owner.child_by_field_name("body")
        if var is None or body is None or element is None or element.type != "reference_declarator":
            return "read"
        modes = [_assignment_mode(n) for n in self.index.within(body, ("identifier",)) if cs.text(n) == var]
        if "write" not in modes and "update" not in modes:
            return "read"
        return "write" if all(m == "write" for m in modes) else "update"

    def _helper_pass(self, item: Item, name: str, args: list[tree_sitter.Node], drop: frozenset[str]) -> Item | None:
        """A call of a function whose definition the tree holds (or a local lambda) that walks some of its
        pointer parameters: a pass over the arguments it gets there, over as many elements as the argument
        that bounds the helper's loop says."""
        lam = self.names.lambdas.get(name)
        if lam is not None:  # `auto body = [&](float * out) {...}; body(y);`
            if name not in self._lambda_modes:
                self._lambda_modes[name] = {}  # a lambda that calls itself is not followed
                self._lambda_modes[name] = walked_parameters(FunctionScan(lam, self.index, self.helpers, outer=self))
            modes = self._lambda_modes[name]
        else:
            modes = self.helpers.modes(name) if self.helpers is not None else {}
        for index, walked in modes.items():
            found = self.names.pointer(args[index], drop) if index < len(args) else None
            if found is not None:
                count = args[walked.count] if walked.count is not None and walked.count < len(args) else None
                known = count is not None and cs.unwrap(count).type != "number_literal"  # bound() drops literals
                record(item, found, walked.mode, ("0", bound(count)) if count is not None and known else None)
        for arg in args:  # parallel_for(n, [&](int b, int e) {...}): the lambda walks what it captures
            if arg.type == "lambda_expression":
                walks = self._captured_walks(arg)
                for key, label in walks.reads.items():
                    item.reads.setdefault(key, _outer_name(label))
                for key, label in walks.writes.items():
                    item.writes.setdefault(key, _outer_name(label))
                item.extents.update(dict.fromkeys(walks.extents))
        if not item.is_pass:
            return None
        for arg in args:
            self._reduced_into(arg, item)
        return item

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
               for d in n.children_by_field_name("declarator") for name in [cs.declarator_name(d)[0]] if name}
        for inner in scan.items(body) if body is not None else []:
            merge(walks, inner)
        for table in (walks.reads, walks.writes, walks.extents):
            for key in [k for k in table if re.match(r"\w*", k).group() in own]:  # type: ignore[union-attr]
                del table[key]
        walks.defines.clear()
        return walks

    def _loop(self, node: tree_sitter.Node, alts: tuple[tuple[int, int], ...]) -> Item:
        """A loop nest as one item: a pass when a non-constant loop in it indexes a buffer, walks a pointer
        over one (`*p++`), or ranges over a container (`for (auto & x : v)`)."""
        item = Item(node, alts, what=cs.first_line(node))
        names: set[str] = set()
        spans: dict[str, Extent | None] = {}  # loop variable -> the range its loop walks
        lanes: set[str] = set()  # variables of constant-trip loops: SIMD registers, not a walk
        for n in self.index.within(node, cs.LOOPS, code=True):
            if n.type == "for_range_loop":
                names |= self._range_pass(n, item)
                continue
            own = loop_variables(n) | self._advanced(n)
            names |= own
            if constant_trip(n, self.names.shapes) and not self._long_trip(n, own):
                lanes |= own
                continue
            if self._searches(n, own):
                continue
            counted = loop_extent(n)
            for var in own:
                spans[var] = counted[1] if counted is not None and counted[0] == var else None
        loop_vars = frozenset(names)
        if len(spans) > 1:  # a nest walks rows of rows (often through row pointers): its range is not one bound
            spans = dict.fromkeys(spans)
        walk = _Walk(loop_vars, spans, lanes)
        for n in self.index.within(node, ("call_expression",), code=True):
            name = cs.callee(n)
            if "barrier" in name.lower():
                item.barrier = True
            call_item = self._call_pass(n, name, alts, loop_vars)
            if call_item is not None:
                if self.names.varies(n, loop_vars):  # a call per row (`f(n, x + i*n)`, `row = x + i*n; f(n, row)`)
                    call_item.extents = dict.fromkeys(call_item.extents)  # walks more than one call's range
                merge(item, call_item)
            elif spans:
                self._pointer_args(n, name, walk, item)
        if spans:
            for n in self.index.within(node, ("subscript_expression",), code=True):
                self._subscript(n, walk, item)
            for n in self.index.within(node, ("pointer_expression",), code=True):
                arg = n.child_by_field_name("argument")
                if cs.operator(n) == "*" and arg is not None and self.index.identifiers(arg) & loop_vars:
                    found = self.names.pointer(arg, loop_vars)
                    if found is not None:
                        record(item, found, _assignment_mode(n), walk.extent(self.index.identifiers(arg)))
        declared_inside = {
            name for n in self.index.within(node, ("declaration", "parameter_declaration"))
            for d in n.children_by_field_name("declarator") for name in [cs.declarator_name(d)[0]] if name}
        item.uses = self.index.identifiers(node) - declared_inside
        item.defines |= self._assigned_scalars(node) - declared_inside - loop_vars
        if item.barrier:  # threads meet inside: its passes cannot be merged with a neighbour's
            item.reads.clear()
            item.writes.clear()
        return item

    def _range_pass(self, loop: tree_sitter.Node, item: Item) -> set[str]:
        """`for (auto & x : v)` over a container of numbers: a pass over all of v. Returns the element's name."""
        element = loop.child_by_field_name("declarator")
        var = cs.declarator_name(element)[0] if element is not None else None
        right = loop.child_by_field_name("right")
        r = cs.unwrap(right) if right is not None else None
        if r is not None and r.type == "identifier" and self.names.shapes.get(cs.text(r)) in ("container", "auto"):
            found = self.names.pointer(r)
            if found is not None:
                record(item, found, self._element_mode(loop), ("0", f"size({found[0]})"))
        return {var} if var else set()

    def _long_trip(self, loop: tree_sitter.Node, own: set[str]) -> bool:
        """A loop of constant trip count that walks memory rather than register lanes: it indexes a local
        tile with its variable (`for (i = 0; i < TILE; i++) kq[i] *= s`)."""
        for n in self.index.within(loop, ("subscript_expression",), code=True):
            base = cs.unwrap(n.child_by_field_name("argument") or n)
            while base.type == "subscript_expression":
                base = cs.unwrap(base.child_by_field_name("argument") or base)
            index = cs.subscript_index(n)
            tile = self.names.shapes.get(cs.text(base)) == "tile"
            if tile and index is not None and self.index.identifiers(index) & own:
                return True
        return False

    def _searches(self, loop: tree_sitter.Node, own: set[str]) -> bool:
        """`while (*p && *p != ']') p++`, `i < n && x[i] < 0`: the loop stops where the data says, a search
        that may end anywhere rather than a pass over the buffer."""
        cond = loop.child_by_field_name("condition")
        if cond is None:
            return False
        for n in self.index.within(cond, ("subscript_expression", "pointer_expression")):
            if n.type == "pointer_expression" and cs.operator(n) != "*":
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
            name = cs.text(target)
            if self.names.shapes.get(name) not in ("pointer", "auto"):
                continue
            value = n.child_by_field_name("right")
            if n.type == "update_expression" or cs.operator(n) in ("+=", "-=") or (
                    value is not None and name in self.index.identifiers(value)):
                moved.add(name)
        return moved

    def _subscript(self, n: tree_sitter.Node, walk: _Walk, item: Item) -> None:
        """`x[i]` with a loop variable in the index, or `p[k]` with p moved by the loop: the loop walks x."""
        base, index = n.child_by_field_name("argument"), cs.subscript_index(n)
        if base is None or index is None:
            return
        if _address_argument(n):
            return  # `&y[i]` handed to a call: the call's load or store says what happens to y (_pointer_args)
        if n.parent is not None and n.parent.type == "subscript_expression" and \
                n.parent.child_by_field_name("argument") == n:
            return  # `t[q]` in `t[q][k]`: the row's address; the outer subscript is the access
        b = cs.unwrap(base)
        name = cs.text(b) if b.type == "identifier" else None
        in_index = self.index.identifiers(index) & walk.vars
        if not in_index and name not in walk.vars:
            return
        if name is not None and self.names.shapes.get(name) in ("scalar", "fixed_array"):
            return
        found = self.names.pointer(base, walk.vars)
        if found is None and name is not None and name not in self.names.shapes:
            found = (name, name, name)  # an array declared outside the function
        if found is not None:
            # `y[n + i]` walks another row than `y[i]`: the loop-invariant terms of the index are part of the
            # buffer, as in `y + n` (a literal, `y[i + 1]`, stays within the same row)
            inner = index.named_child(0) if index.type == "subscript_argument_list" else index
            offsets = "".join(sign + cs.squash(term) for sign, term in cs.terms(cs.unwrap(inner)) if inner is not None
                              and not (self.index.identifiers(term) & walk.vars) and term.type != "number_literal")
            moved = {name} if name in walk.vars else set()
            record(item, (found[0] + offsets, found[1], found[2]), _assignment_mode(n), walk.extent(in_index | moved))

    def _pointer_args(self, call: tree_sitter.Node, name: str, walk: _Walk, item: Item) -> None:
        """`LOAD(x + i)` / `STORE(y + i, v)` / `svst1_f32(pg, y + i, v)`: pointer arithmetic on a loop variable
        inside a call; every pointer a SIMD store takes is written."""
        store = bool(STORE.search(name))
        for arg in cs.arguments(call):
            a = cs.unwrap(arg)
            if a.type not in ("binary_expression", "pointer_expression"):
                continue
            used = self.index.identifiers(a) & walk.vars
            if not used or (a.type == "pointer_expression" and cs.operator(a) != "&") or _element_arithmetic(a):
                continue
            found = self.names.pointer(a, walk.vars)
            if found is not None:
                record(item, found, "write" if store else "read", walk.extent(used))

    # --- pairs -------------------------------------------------------------------------------------

    def body_items(self) -> list[Item]:
        """The items of the function's body (made once)."""
        if self._body_items is None:
            body = self.fn.child_by_field_name("body")
            self._body_items = self.items(body) if body is not None else []
        return self._body_items

    def blocks(self) -> Iterator[list[Item]]:
        """The function body and every loop body in it, each as its sequence of items."""
        body = self.fn.child_by_field_name("body")
        if body is None:
            return
        yield self.body_items()
        for n in self.index.within(body, cs.LOOPS, code=True):
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

def _element_arithmetic(expr: tree_sitter.Node) -> bool:
    """`x[i] - max` is arithmetic on an element, not a pointer into x (as `x + i` is)."""
    return expr.type == "binary_expression" and any(
        cs.unwrap(t).type in ("subscript_expression", "pointer_expression") for _, t in cs.terms(expr))


def _address_argument(n: tree_sitter.Node) -> bool:
    """`&y[i]` as an argument of a call."""
    parent = n.parent
    while parent is not None and parent.type == "parenthesized_expression":
        parent = parent.parent
    return parent is not None and parent.type == "pointer_expression" and cs.operator(parent) == "&" and \
        parent.parent is not None and parent.parent.type == "argument_list"


def _outer_name(label: str) -> str:
    """`row (y)` as the caller of a lambda that made row from y sees it: y."""
    return label.split(" (", 1)[1].rstrip(")") if " (" in label else label



def _assignment_mode(n: tree_sitter.Node) -> str:
    """How an lvalue-capable expression is used: written, updated (+=, ++) or read."""
    child, parent = n, n.parent
    while parent is not None and parent.type == "parenthesized_expression":
        child, parent = parent, parent.parent
    if parent is None:
        return "read"
    if parent.type == "assignment_expression" and parent.child_by_field_name("left") == child:
        return "write" if cs.text(parent.child_by_field_name("operator")) == "=" else "update"
    if parent.type == "update_expression":
        return "update"
    return "read"


def _ending(items: list[Item], statements: list[tree_sitter.Node], end: int) -> list[Item]:
    """`items` made of `statements`; when the last statement returns (or jumps to the next iteration), no
    pass at or after byte `end` follows them. A `break` is left alone: in a switch it only ends a case."""
    last = [s for s in statements if s.type != "comment"]
    if last and leaves(last[-1]) and not breaks(last[-1]):
        for item in items:
            item.reaches = min(item.reaches, end)
    return items


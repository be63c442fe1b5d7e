"""C loops and branches as syntax: variables, bounds, counted ranges, constant trips, tails, branches that leave."""

from __future__ import annotations

import re
from collections.abc import Collection

import tree_sitter

from autoresearch_mcp.analysis import csyntax as cs
from autoresearch_mcp.analysis.passitems import Extent


def bound(node: tree_sitter.Node) -> str:
    """A loop bound or element count as compared between passes: casts, parentheses, whitespace and literal
    terms dropped (`n - 1` is `n`: the same row), `v.size()` and `std::size(v)` as size(v)."""
    node = cs.unwrap(node)
    if node.type == "call_expression":
        fn, args = node.child_by_field_name("function"), cs.arguments(node)
        if fn is not None and fn.type == "field_expression" and cs.text(fn.child_by_field_name("field")) == "size":
            return f"size({cs.squash(fn.child_by_field_name('argument') or fn)})"
        if cs.callee(node) in ("std::size", "size") and len(args) == 1:
            return f"size({cs.squash(args[0])})"
    return "".join(sign + cs.squash(t) for sign, t in cs.terms(node) if cs.unwrap(t).type != "number_literal") or "0"


def byte_count(size: tree_sitter.Node) -> Extent | None:
    """`n * sizeof(float)` is n elements; a count of bytes alone (`nb1`) cannot be compared with a loop's."""
    size = cs.unwrap(size)
    if size.type == "binary_expression" and cs.operator(size) == "*":
        left, right = size.child_by_field_name("left"), size.child_by_field_name("right")
        for a, b in ((left, right), (right, left)):
            if a is not None and b is not None and cs.unwrap(a).type == "sizeof_expression":
                return ("0", bound(b))
    return None


def loop_extent(loop: tree_sitter.Node) -> tuple[str, Extent] | None:
    """(variable, (start, bound)) of a counted for loop: `for (int i = s; i < n; ...)`."""
    cond = loop.child_by_field_name("condition")
    if loop.type != "for_statement" or cond is None or cond.type != "binary_expression":
        return None
    left, right, op = cond.child_by_field_name("left"), cond.child_by_field_name("right"), cs.operator(cond)
    if left is None or right is None:
        return None
    if op in (">", ">="):
        left, right = right, left
    elif op not in ("<", "<=", "!="):
        return None
    if cs.unwrap(left).type != "identifier":
        return None
    var, start = cs.text(cs.unwrap(left)), None
    for n in loop.children_by_field_name("initializer"):
        for m in cs.walk(n):
            if m.type == "init_declarator" and cs.declarator_name(m.child_by_field_name("declarator"))[0] == var:
                start = m.child_by_field_name("value")
            elif m.type == "assignment_expression" and cs.text(m.child_by_field_name("left")) == var:
                start = m.child_by_field_name("right")
    return var, (bound(start) if start is not None else None, bound(right))



def loop_variables(loop: tree_sitter.Node) -> set[str]:
    if loop.type == "for_statement":
        names: set[str] = set()
        for part in ("initializer", "update"):
            for node in loop.children_by_field_name(part):
                for n in cs.walk(node):
                    if n.type == "init_declarator":
                        name, _ = cs.declarator_name(n.child_by_field_name("declarator"))
                        if name:
                            names.add(name)
                    elif n.type in ("assignment_expression", "update_expression"):
                        target = n.child_by_field_name("left") or n.child_by_field_name("argument")
                        if target is not None and target.type == "identifier":
                            names.add(cs.text(target))
        return names
    if loop.type in ("while_statement", "do_statement"):
        cond = loop.child_by_field_name("condition")
        body = loop.child_by_field_name("body")
        if cond is None or body is None:
            return set()
        updated = {
            cs.text(t) for part in (body, cond) for n in cs.walk(part)
            if n.type in ("update_expression", "assignment_expression")
            for t in [n.child_by_field_name("argument") or n.child_by_field_name("left")]
            if t is not None and t.type == "identifier"}
        return updated & cs.identifiers(cond)
    return set()


def continues(first: tree_sitter.Node, second: tree_sitter.Node) -> bool:
    """Whether loop `second` finishes the range of loop `first` instead of walking it again: a SIMD
    body and its scalar tail, `for (; i < n; ++i)` or `for (int i = np; i < n; ++i)` after `i < np`, also
    when the tail runs once per register lane (`for (k = 0; k < UNROLL; ++k) for (i = np; i < n; ++i)`), and
    a loop from the rounded-down end (`for (i = n - n % 4; i < n; ...)`) after whatever did the blocks."""
    if second.type != "for_statement":
        return False
    if _rounded_tail(second):
        return True
    if first.type not in cs.LOOPS:
        return False
    if loop_variables(first) & loop_variables(second):
        init = second.child_by_field_name("initializer")
        if init is None:
            return True
        cond = first.child_by_field_name("condition")
        bound = cond.child_by_field_name("right") if cond is not None and cond.type == "binary_expression" else None
        starts = [n.child_by_field_name("value") or n.child_by_field_name("right")
                  for n in cs.walk(init) if n.type in ("init_declarator", "assignment_expression")]
        if bound is not None and any(v is not None and cs.squash(v) == cs.squash(bound) for v in starts):
            return True
    if constant_trip(second):
        body = second.child_by_field_name("body")
        inner = [c for c in body.named_children if c.type != "comment"] if body is not None and \
            body.type == "compound_statement" else [body]
        return len(inner) == 1 and inner[0] is not None and continues(first, inner[0])
    return False


def _rounded_tail(loop: tree_sitter.Node) -> bool:
    """`for (i = n - n % 4; i < n; i++)`, `for (i = n & ~7; i < n; i++)`: the rest after blocks of 4 or 8."""
    found = loop_extent(loop)
    if found is None:
        return False
    cond = loop.child_by_field_name("condition")
    bound = cond.child_by_field_name("right") if cond is not None else None
    start = next((n.child_by_field_name("value") or n.child_by_field_name("right")
                  for part in loop.children_by_field_name("initializer") for n in cs.walk(part)
                  if n.type in ("init_declarator", "assignment_expression")), None)
    if bound is None or start is None:
        return False
    b, s = re.escape(cs.squash(bound)), cs.squash(cs.unwrap(start))
    return bool(re.fullmatch(rf"\(?{b}\)?-\(?\(?{b}\)?%\w+\)?|\(?{b}\)?&~\(?[\w-]+\)?", s))


def constant_trip(loop: tree_sitter.Node, variables: Collection[str] = ()) -> bool:
    """`for (j = 0; j < GGML_F32_ARR; j++)`: a bound fixed at compile time (registers, not memory). An
    upper-case name among the function's own `variables` (llm.c's `int C` channels) is not a constant."""
    cond = loop.child_by_field_name("condition")
    if loop.type != "for_statement" or cond is None or cond.type != "binary_expression":
        return False
    right = cs.unwrap(cond.child_by_field_name("right") or cond)
    return right.type in ("number_literal", "sizeof_expression") or (
        right.type == "identifier" and bool(cs.CONSTANT_NAME.match(cs.text(right))) and cs.text(right) not in variables)



def breaks(node: tree_sitter.Node) -> bool:
    while node.type == "compound_statement":
        body = [c for c in node.named_children if c.type != "comment"]
        if not body:
            return False
        node = body[-1]
    return node.type == "break_statement"


def leaves(branch: tree_sitter.Node) -> bool:
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
    return call is not None and call.type == "call_expression" and cs.callee(call) in ("GGML_ABORT", "abort", "exit")


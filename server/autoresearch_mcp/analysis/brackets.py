"""Brackets in C code with comments and strings blanked: a bracket's partner, the block, call or statement around."""

from __future__ import annotations

import re


def matching(code: str, at: int, opening: str = "(", closing: str = ")") -> int:
    """The offset of the bracket that closes the one at `at` (-1 when unbalanced within 20,000 characters)."""
    if at < 0 or at >= len(code) or code[at] != opening:
        return -1
    return _unbalanced(code, at + 1, min(len(code), at + 20_000), closing, opening)


def opener(code: str, offset: int, opening: str = "{", closing: str = "}", limit: int = 20_000) -> int:
    """The offset of the bracket that opens the block (or parentheses) holding `offset`, -1 when not found
    within `limit` characters before it."""
    return _unbalanced(code, offset - 1, max(-1, offset - limit), opening, closing)


def _unbalanced(code: str, start: int, stop: int, wanted: str, other: str) -> int:
    """The first `wanted` bracket from `start` towards `stop` (forwards or backwards, `stop` excluded) that
    no `other` bracket between them balances; -1 when there is none."""
    depth = 0
    for i in range(start, stop, 1 if stop >= start else -1):
        ch = code[i]
        if ch == other:
            depth += 1
        elif ch == wanted:
            if depth == 0:
                return i
            depth -= 1
    return -1


def statement(code: str, offset: int, limit: int = 2000) -> tuple[int, int]:
    """The statement or condition around `offset`: from the `;`, `{` or `}` before it to the one after it, with
    the brackets in between (a call's arguments, a list) skipped."""
    start, depth = max(0, offset - limit), 0
    for i in range(offset - 1, start - 1, -1):
        ch = code[i]
        if ch in ")]" or (ch == "}" and depth):
            depth += 1
        elif ch in "([" or (ch == "{" and depth):
            depth = max(0, depth - 1)
        elif ch in "{};" and depth == 0:
            start = i + 1
            break
    end, depth = min(len(code), offset + limit), 0
    for i in range(offset, end):
        ch = code[i]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif ch == "{" and depth:
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
        elif ch in "{};" and depth == 0:
            end = i
            break
    return start, end

def split_top(params: str) -> list[str]:
    """Parameters split at the commas outside brackets (`std::map<int, int> m, int n`)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(params):
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(params[start:i])
            start = i + 1
    out.append(params[start:])
    return out

def callee_around(code: str, offset: int) -> str | None:
    """The function whose argument list holds `offset` (`ggml_vk_can_fuse(ctx, cgraph, i, { A, B })` for the
    list's offset; `ctx->can_fuse(...)` gives can_fuse), or None outside any call."""
    depth = 0
    for i in range(offset - 1, max(-1, offset - 2000), -1):
        ch = code[i]
        if ch in ")}]":
            depth += 1
        elif ch in "({[":
            if depth:
                depth -= 1
                continue
            if ch != "(":
                continue  # the list sits inside another brace list: keep looking for the call
            m = re.search(r"([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*$", code[max(0, i - 200): i])
            return m.group(1) if m else None
        elif ch == ";":
            return None
    return None

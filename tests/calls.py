"""The tool calls a text shows (the brief, a skill, a hook's message), checked against the real `tools/list`.

A call is written `name(arg=value, ...)` inside backticks. An argument may be a bare name (`experiment_id`:
"this argument, with its value") or `...` (more arguments elided); a value may be a placeholder (`...`,
`<id>`), a JSON-like literal (`"auto"`, `true`, `300`, `[...]`), or alternatives (`"higher"|"lower"`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# functions of the projects the agent works on (and the C preprocessor's), named in code: not tools
NOT_TOOLS = frozenset({"ggml_can_fuse", "defined"})
_SPAN = re.compile(r"```[^\n]*\n(.*?)```|`([^`]+)`", re.S)
_CALL = re.compile(r"(?<![\w$.-])([A-Za-z_]\w*)\(")
_NAME = re.compile(r"[A-Za-z_]\w*")
_PLACEHOLDER = re.compile(r"\.\.\.|<[^>]*>|[A-Za-z_]\w*")  # `...`, `<old id>`, a variable


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[str, ...]  # as written, one per top-level comma
    text: str  # the whole call, for messages


def tool_calls(text: str) -> list[Call]:
    """Every `name(...)` written in the text's code spans and blocks."""
    calls = []
    for match in _SPAN.finditer(text):
        code = match[1] if match[1] is not None else match[2]
        for call in _CALL.finditer(code):
            end = _closing(code, call.end())
            inner = code[call.end():end] if end is not None else code[call.end():]
            calls.append(Call(call[1], tuple(a.strip() for a in _split(inner) if a.strip()),
                              " ".join(code[call.start():(end or len(code)) + 1].split())))
    return calls


def problems(call: Call, tools: dict[str, dict[str, Any]]) -> list[str]:
    """What would make `call` fail or mislead, given each tool's input schema (empty: it runs as written)."""
    if call.name in NOT_TOOLS:
        return []
    schema = tools.get(call.name)
    if schema is None:
        return [f"{call.text}: no tool {call.name!r}"]
    properties: dict[str, Any] = schema.get("properties", {})
    found, named = [], set()
    for arg in call.args:
        if arg == "...":
            continue
        name, eq, value = arg.partition("=")
        name = name.strip()
        if not _NAME.fullmatch(name):
            found.append(f"{call.text}: {arg!r} is positional; write name=value")
            continue
        named.add(name)
        if name not in properties:
            found.append(f"{call.text}: {call.name} has no argument {name!r} (it has {', '.join(properties)})")
        elif eq:
            found += [f"{call.text}: {name}={v} {why}" for v in _split(value.strip(), "|")
                      if (why := _misfit(v.strip(), properties[name]))]
    missing = [r for r in schema.get("required", []) if r not in named]
    if missing and "..." not in call.args:
        found.append(f"{call.text}: required argument(s) {', '.join(missing)} missing")
    return found


def _misfit(value: str, prop: dict[str, Any]) -> str | None:
    """Why a written value cannot be given to a property (None: it can, or it is a placeholder)."""
    if _PLACEHOLDER.fullmatch(value) and value not in ("true", "false", "null"):
        return None
    try:
        literal = json.loads(value.replace("'", '"'))
    except ValueError:
        return None if value.startswith("[") else f"is not a value the test can read ({value!r})"
    branches = prop.get("anyOf", [prop])
    for branch in branches:
        choices = branch.get("enum", [branch["const"]] if "const" in branch else None)
        if choices is not None:
            if literal in choices:
                return None
        elif _fits(literal, branch.get("type")):
            return None
    allowed = [c for b in branches for c in b.get("enum", [b["const"]] if "const" in b else [])]
    return f"is not allowed (expected {' or '.join(map(str, allowed)) or [b.get('type') for b in branches]})"


def _fits(literal: Any, kind: Any) -> bool:
    kinds = kind if isinstance(kind, list) else [kind]
    checks = {"string": isinstance(literal, str), "boolean": isinstance(literal, bool),
              "integer": isinstance(literal, int) and not isinstance(literal, bool),
              "number": isinstance(literal, int | float) and not isinstance(literal, bool),
              "array": isinstance(literal, list), "object": isinstance(literal, dict), "null": literal is None,
              None: True}
    return any(checks.get(k, False) for k in kinds)


def _closing(code: str, start: int) -> int | None:
    """The index of the parenthesis that closes the one before `start`."""
    depth, quote = 1, ""
    for i in range(start, len(code)):
        ch = code[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _split(text: str, sep: str = ",") -> list[str]:
    """`text` split at `sep` outside quotes and brackets."""
    parts, depth, quote, current = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += ch
    return [*parts, current]

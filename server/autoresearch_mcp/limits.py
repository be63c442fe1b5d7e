"""Size caps on everything that goes back to the client.

A tool answer is sent twice (structured content and its indented JSON text), and both together are
held to the cap; an error to a few kilobytes. Long texts keep their head and tail, long lists their
first items, and the answer says that it was cut and where the whole is (a log or report path).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TypeVar

from pydantic import BaseModel

ANSWER_CAP = 64 * 1024  # what a client receives for one call, all content included
_ENVELOPE = 2048  # the protocol's own fields around the content
ERROR_CAP = 8 * 1024
CAP_NOTE = ("Every answer is capped at 64 KB: a longer text keeps its head and tail, a longer list its first "
            "items, and the answer says what was cut and where the whole is.")

M = TypeVar("M", bound=BaseModel)


def clip(text: str, limit: int) -> str:
    """`text` within `limit` characters: its head and tail, with what was cut in between."""
    if len(text) <= limit:
        return text
    marker = f"\n[... {len(text) - limit + 60} characters cut ...]\n"
    keep = max(0, limit - len(marker))
    head = keep // 3
    return text[:head] + marker + text[len(text) - (keep - head):]


def _size(data: Any) -> int:
    """Bytes on the wire: the structured content, plus its JSON text (indented) that MCPServer sends too."""
    compact = json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=str)
    indented = json.dumps(data, indent=2, ensure_ascii=False, default=str)
    return len(compact.encode("utf-8")) + len(indented.encode("utf-8"))


def _shrink(value: Any, text_limit: int, map_limit: int) -> Any:
    """`value` as plain data with long texts and maps cut; a model keeps every one of its fields."""
    if isinstance(value, BaseModel):
        return {name: _shrink(getattr(value, name), text_limit, map_limit) for name in type(value).model_fields}
    if isinstance(value, str):
        return clip(value, text_limit)
    if isinstance(value, (list, tuple)):
        return [_shrink(x, text_limit, map_limit) for x in value]
    if isinstance(value, dict):
        return {k: _shrink(v, text_limit, map_limit) for k, v in list(value.items())[:map_limit]}
    return value


def _lists(data: Any, depth: int = 0) -> Iterator[tuple[int, list[Any]]]:
    if isinstance(data, list):
        yield depth, data
        for item in data:
            yield from _lists(item, depth + 1)
    elif isinstance(data, dict):
        for item in data.values():
            yield from _lists(item, depth + 1)


def bound(model: M, limit: int = ANSWER_CAP - _ENVELOPE) -> M:
    """`model` itself when its answer fits in `limit` bytes, else a copy cut to fit: long texts keep head
    and tail, then lists are shortened, the most deeply nested first (details before the main items)."""
    if _size(model.model_dump(mode="json")) <= limit:
        return model
    shrunk: dict[str, Any] = _shrink(model, limit // 16, 200)
    target = limit - 512
    for floor in (3, 0):
        for depth in sorted({d for d, _ in _lists(shrunk)}, reverse=True):
            while _size(shrunk) > target:
                longer = [items for d, items in _lists(shrunk) if d == depth and len(items) > floor]
                if not longer:
                    break
                for items in longer:
                    del items[max(floor, len(items) * 3 // 4):]
    note = (f"this answer was cut to fit {ANSWER_CAP // 1024} KB: long texts and lists were shortened; ask for "
            "less (fewer items or lines), or read the log or report files")
    for field in ("warnings", "notes"):
        if isinstance(shrunk.get(field), list):
            shrunk[field].append(note)
            break
    return type(model).model_validate(shrunk)


def shown(value: str, limit: int = 80) -> str:
    """A user-given value for a message, cut so that an error never echoes a huge input."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + f"... ({len(value)} characters)"

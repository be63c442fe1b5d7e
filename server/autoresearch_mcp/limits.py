"""Size caps on everything that goes back to the client.

A tool answer is sent twice (structured content and its JSON text), so the structured part is held
to half the cap; an error to a few kilobytes. Long texts keep their head and tail, long lists their
first items, and the answer says that it was cut and where the whole is (a log or report path).
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel

ANSWER_CAP = 64 * 1024  # what a client receives for one call, all content included
STRUCTURED_CAP = ANSWER_CAP // 2 - 1024
ERROR_CAP = 8 * 1024
CAP_NOTE = "Answers are capped at 64 KB."

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
    return len(json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8"))


def _shrink(value: Any, text_limit: int, list_limit: int) -> Any:
    """`value` with texts, lists and maps cut; a model keeps every field (its dict form is returned)."""
    if isinstance(value, BaseModel):
        return {name: _shrink(getattr(value, name), text_limit, list_limit) for name in type(value).model_fields}
    if isinstance(value, str):
        return clip(value, text_limit)
    if isinstance(value, (list, tuple)):
        kept = [_shrink(x, text_limit, list_limit) for x in value[:list_limit]]
        if len(value) > list_limit and all(isinstance(x, str) for x in value):
            kept.append(f"... and {len(value) - list_limit} more")
        return kept
    if isinstance(value, dict):
        return {k: _shrink(v, text_limit, list_limit) for k, v in list(value.items())[:max(list_limit, 8)]}
    return value


def bound(model: M, limit: int = STRUCTURED_CAP) -> M:
    """`model` itself when it fits in `limit` bytes of JSON, else a copy with shorter texts and lists."""
    if _size(model.model_dump(mode="json")) <= limit:
        return model
    # cut gradually, so that as much as fits is kept
    text_limit, list_limit = limit // 4, 200
    shrunk: dict[str, Any] = {}
    while text_limit >= 64 and list_limit >= 1:
        shrunk = _shrink(model, text_limit, list_limit)
        if _size(shrunk) <= limit - 512:
            break
        text_limit, list_limit = text_limit * 3 // 4, list_limit * 4 // 5
    note = (f"this answer was cut to fit {ANSWER_CAP // 1024} KB: long texts and lists were shortened (to "
            f"{list_limit} items); ask for less (fewer items or lines), or read the log or report files")
    for field in ("warnings", "notes"):
        if isinstance(shrunk.get(field), list):
            shrunk[field].append(note)
            break
    return type(model).model_validate(shrunk)


def shown(value: str, limit: int = 80) -> str:
    """A user-given value for a message, cut so that an error never echoes a huge input."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + f"... ({len(value)} characters)"

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
    return len(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def _shrink(data: Any, text_limit: int, list_limit: int) -> Any:
    if isinstance(data, str):
        return clip(data, text_limit)
    if isinstance(data, list):
        kept = [_shrink(x, text_limit, list_limit) for x in data[:list_limit]]
        if len(data) > list_limit and all(isinstance(x, str) for x in data):
            kept.append(f"... and {len(data) - list_limit} more")
        return kept
    if isinstance(data, dict):
        return {k: _shrink(v, text_limit, list_limit) for k, v in list(data.items())[:max(list_limit, 8)]}
    return data


def bound(model: M, limit: int = STRUCTURED_CAP) -> M:
    """`model` itself when it fits in `limit` bytes of JSON, else a copy with shorter texts and lists."""
    data = model.model_dump(mode="json")
    if _size(data) <= limit:
        return model
    text_limit, list_limit = limit // 4, 200
    shrunk = data
    while text_limit >= 64 and list_limit >= 1:
        shrunk = _shrink(data, text_limit, list_limit)
        if _size(shrunk) <= limit - 512:
            break
        text_limit, list_limit = text_limit // 2, list_limit // 2
    if isinstance(shrunk.get("warnings"), list):
        shrunk["warnings"].append(f"this answer was cut to fit {ANSWER_CAP // 1024} KB: long texts and lists were "
                                  "shortened (the log and report files hold everything)")
    return type(model).model_validate(shrunk)


def shown(value: str, limit: int = 80) -> str:
    """A user-given value for a message, cut so that an error never echoes a huge input."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + f"... ({len(value)} characters)"

"""The runner's result channel: every line the runner means on its stdout carries a code of its payload keyed
by the job's secret, which the executor gives the runner on stdin before any command runs. A line a job
printed, on a worker whose log mixes the two, or wrote anywhere else, is not the runner's. The secret itself
is never printed. Standard library only (shipped beside the runner)."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
from typing import Any

RESULT_PREFIX = "AUTORESEARCH_RESULT "


EVENT_PREFIX = "AUTORESEARCH_EVENT "


def emit(kind: str, **data: Any) -> None:
    print(machine_line(EVENT_PREFIX, {"event": kind, **data}), flush=True)


_secret = ""


def set_secret(secret: str) -> None:
    """The job's secret, read from stdin before any command runs: this process's lines carry its code."""
    global _secret
    _secret = secret


def _code(secret: str, prefix: str, text: str) -> str:
    return hmac.new(secret.encode(), f"{prefix}{text}".encode(), hashlib.sha256).hexdigest()[:32]


def machine_line(prefix: str, payload: dict[str, Any], secret: str | None = None, compact: bool = False) -> str:
    """One of the runner's lines: `prefix`, the code of the payload keyed by the job's secret (this
    process's unless given), the payload."""
    text = json.dumps(payload, separators=(",", ":") if compact else None)
    return f"{prefix}{_code(_secret if secret is None else secret, prefix, text)} {text}"


def read_machine_line(line: str, prefix: str, secret: str) -> dict[str, Any] | None:
    """The payload of one of the runner's lines whose code `secret` gives; None for any other line."""
    if not secret or not line.startswith(prefix):
        return None
    code, _, text = line[len(prefix):].partition(" ")
    if not hmac.compare_digest(code, _code(secret, prefix, text)):
        return None
    try:
        payload = json.loads(text)
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def _not_dumpable() -> None:
    """No process of the same user may read this one's memory or open its files through /proc."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def parse_result_line(text: str, secret: str) -> dict[str, Any] | None:
    """The last result line carrying `secret` in `text` (a log or the runner's stdout), or None if the
    run never finished (a line without the secret is not the runner's, whatever it says)."""
    for line in reversed(text.splitlines()):
        parsed = read_machine_line(line, RESULT_PREFIX, secret)
        if parsed is not None:
            return parsed
    return None

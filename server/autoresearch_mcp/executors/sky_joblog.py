"""A job's log read from its cluster: fetched by its tail, merged onto what came before, the runner's lines in it."""

from __future__ import annotations

from autoresearch_mcp.executors.sky_port import SkyPort
from autoresearch_mcp.worker import channel

LOG_TAILS = (200, 2000, 0)  # lines asked for, in turn, until the tail reaches what was fetched before
ANCHOR_LINES = 8


def machine_lines(text: str) -> list[str]:
    """The runner's event and result lines of a job log, whatever SkyPilot put before them."""
    out = []
    for line in text.splitlines():
        for prefix in (channel.EVENT_PREFIX, channel.RESULT_PREFIX):
            at = line.find(prefix)
            if at >= 0:
                out.append(line[at:])
                break
    return out


def merge_tail(old: str, tail: str) -> str | None:
    """`old` continued by the lines of `tail` (the log's last lines) that come after it.

    The end of `old` (its last complete lines) must appear exactly once in `tail`; None when it does
    not (the tail does not reach back far enough, or the anchor is ambiguous): fetch more.
    """
    old_lines = old.splitlines(keepends=True)
    if old_lines and not old_lines[-1].endswith("\n"):
        old_lines.pop()  # a line still being written when it was fetched: take it again from the tail
    if not old_lines:
        return None
    anchor = old_lines[-ANCHOR_LINES:]
    new_lines = tail.splitlines(keepends=True)
    hits = [i for i in range(len(new_lines) - len(anchor) + 1) if new_lines[i:i + len(anchor)] == anchor]
    if len(hits) != 1:
        return None
    return "".join(old_lines) + "".join(new_lines[hits[0] + len(anchor):])


def has_result(fetched: str, secret: str) -> bool:
    """Whether a job's log as last fetched holds the runner's result line (one that carries its secret)."""
    return channel.RESULT_PREFIX in fetched and channel.parse_result_line(
        "\n".join(machine_lines(fetched)), secret) is not None


def fetch_log(port: SkyPort, cluster: str, job_id: int, fetched: str) -> str:
    """A job's log so far: what was `fetched` before, continued by the log's tail (whole when needed)."""
    for lines in LOG_TAILS:
        text = port.logs(cluster, job_id, tail=lines)
        if lines == 0:
            return text
        merged = merge_tail(fetched, text) if fetched else None
        if merged is not None:
            return merged
        if not fetched and text.count("\n") < lines:
            return text  # the whole log is shorter than the tail asked for
    raise AssertionError("LOG_TAILS ends with 0 (the whole log)")

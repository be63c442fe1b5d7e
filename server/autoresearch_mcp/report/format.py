"""Figures as people read them: shared by the chart, the page and the text summary."""

from __future__ import annotations


def pct(value: float | None) -> str:
    """A percent change with its sign, or a dash for none."""
    return "–" if value is None else f"{value:+.2f}%"


def num(value: float | None) -> str:
    return "–" if value is None else f"{value:.6g}"


def short(text: str, limit: int = 32) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"

"""`autoresearch-mcp demo` end to end: a real stdio server, the example, three experiments."""

from __future__ import annotations

import pytest

from autoresearch_mcp import demo


def test_demo_runs_the_whole_loop(capfd: pytest.CaptureFixture[str]) -> None:
    assert demo.main() == 0
    out = capfd.readouterr().out
    assert out.count("launched ") == 3 and "summary: 3 experiments" in out
    # the no-op and the slower change are never committed, whatever the machine's noise
    assert out.count("commit_winner refused") >= 2

"""`autoresearch-mcp demo` end to end: a real stdio server, the example, three experiments."""

from __future__ import annotations

import re

import pytest

from autoresearch_mcp import demo


@pytest.mark.serial
def test_demo_runs_the_whole_loop(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NORMSOFT_ITERS", "10")  # shorter runs; the demo's server inherits the environment
    assert demo.main(delete=True) == 0
    captured = capfd.readouterr()
    out = captured.out
    # the report is written and its path printed; refusals the demo shows are not logged as failures
    report = re.search(r"^report: (\S+index\.html)$", out, re.MULTILINE)
    assert report is not None, out
    assert "Tool 'commit_winner' failed" not in captured.err
    assert out.count("launched ") == 3 and "summary: 3 experiments" in out
    # a one-line legend for each verdict shown
    shown = set(re.findall(r"^.*: \w+, verdict (\w+),", out, re.MULTILINE))
    assert shown - {"None"} and all(re.search(rf"^  {v}: \S", out, re.MULTILINE) for v in shown - {"None"}), out
    # the no-op and the slower change are never committed, whatever the machine's noise
    for title in ("Reword a comment", "Exponentials in double precision"):
        verdict = re.search(rf"^{title}: .*\n  (.*)$", out, re.MULTILINE)
        assert verdict is not None and verdict.group(1).startswith("commit_winner refused"), out
    # the session total it ends with is the one kept experiment's own figure, at its own level (issue 33 item 3;
    # the demo shows one decimal, the summary two)
    if out.count("\n  committed ") == 1:
        won = re.search(r"^.*: done, verdict improved, ([+-][\d.]+)% (\d+)% CI \[([+-][\d.]+)%, ([+-][\d.]+)%\]",
                        out, re.MULTILINE)
        total = re.search(r"^Total ([+-][\d.]+)% \((\d+)% CI ([+-][\d.]+)% to ([+-][\d.]+)%, the one kept "
                          r"experiment's own, \w+;", out, re.MULTILINE)
        assert won is not None and total is not None, out
        assert won.group(2) == total.group(2)
        assert all(abs(float(a) - float(b)) <= 0.055 for a, b in zip(won.group(1, 3, 4), total.group(1, 3, 4),
                                                                      strict=True)), out
        assert re.search(r"^At the head: estimated [\d.]+ \(the baseline times the 1 kept", out, re.MULTILINE), out

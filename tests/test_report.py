"""The report (progress chart, self-contained HTML page, TSV) and finalize (independent review branches):
one end-to-end run of the real loop through an MCP client, the rest on ledgers written record by record."""

from __future__ import annotations

import copy
import csv
import io
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bs4 import BeautifulSoup
from matplotlib.image import imread
from mcp import Client
from scipy import ndimage
from scipy import stats as sps

from autoresearch_mcp import cli
from autoresearch_mcp.app import build_server
from autoresearch_mcp.errors import InputError, StateError
from autoresearch_mcp.finalize import finalize
from autoresearch_mcp.measure import metrics, stats
from autoresearch_mcp.report import COLORS, KEPT, TSV_COLUMNS, load, render_chart, write_report
from autoresearch_mcp.report.chart import VERDICT_COLORS, chart_figure
from autoresearch_mcp.store.config import SessionConfig, save_config
from autoresearch_mcp.store.ledger import Ledger
from autoresearch_mcp.worker import decide, outcomes
from conftest import balanced_noise, git, init_repo
from helpers import call, error, wait_final

# --- a session written record by record ----------------------------------------------------------


class Synthetic:
    """A real git repository with a session config and a ledger whose records the test writes."""

    def __init__(self, root: Path, direction: str = "higher") -> None:
        self.root = root
        (root / "a.txt").parent.mkdir(parents=True, exist_ok=True)
        (root / "a.txt").write_text("a\n")
        init_repo(root)
        self.start = git(root, "rev-parse", "HEAD")
        git(root, "checkout", "-q", "-b", "autoresearch/t")
        self.head = self.start
        save_config(root, SessionConfig(
            session_id="s1", tag="t", branch="autoresearch/t", repo=str(root), metric="score",
            direction=direction, executor="local", start_commit=self.start,
            created_at="2026-01-01T00:00:00+00:00"))
        self.ledger = Ledger(root / ".autoresearch" / "ledger.jsonl")
        self.ledger.append({"type": "session", "session_id": "s1", "tag": "t", "head": self.start,
                            "metric": "score", "baseline": {"score": [99.0, 101.0]}})
        self.n = 0

    def experiment(self, title: str, delta: float | None, ci: tuple[float, float] | None = None,
                   verdict: str | None = "no_change", status: str = "done", hypothesis: str = "",
                   sources: list[str] | None = None, keep: dict[str, str | None] | None = None,
                   other: dict[str, float] | None = None, cost: float | None = None,
                   design: dict[str, Any] | None = None, n_pairs: int = 5) -> str:
        """Launch and finish one experiment; `keep` (file -> content) also commits it as a winner."""
        self.n += 1
        exp_id = f"e{self.n:04d}"
        ts = 1_800_000_000.0 + self.n * 10
        self.ledger.append({"type": "launch", "ts": ts, "experiment_id": exp_id, "session_id": "s1",
                            "title": title, "hypothesis": hypothesis, "sources": sources or [],
                            "base_commit": self.head, "changed_files": sorted(keep or {"a.txt": ""}),
                            "metric": "score", "direction": "higher", **({"design": design} if design else {})})
        if status in ("running", "building"):
            self.ledger.append({"type": "status", "ts": ts + 1, "experiment_id": exp_id, "status": status})
            return exp_id
        metrics = {}
        if delta is not None:
            lo, hi = ci or (delta - 1.0, delta + 1.0)
            metrics["score"] = _comparison(delta, lo, hi, verdict, n_pairs)
            for name, d in (other or {}).items():
                metrics[name] = _comparison(d, d - 2.0, d + 2.0, "no_change")
        passed = status == "done"
        self.ledger.append({
            "type": "result", "ts": ts + 5, "experiment_id": exp_id, "status": status, "worker": "local",
            "cost_usd": cost,
            "outcome": {"status": status, "checks": {"ran": status != "failed", "passed": passed, "duration_s": 0.5},
                        "host": {"hostname": "box", "cpu_model": "Test CPU", "cpus": 2}},
            "analysis": {"metrics": metrics, "verdict": verdict if status != "failed" else None}})
        if keep is not None:
            self.commit(exp_id, title, keep, ts + 6)
        return exp_id

    def commit(self, exp_id: str, title: str, keep: dict[str, str | None], ts: float) -> None:
        """Commit `keep` (file -> content, None deletes) on the session branch as commit_winner does."""
        for name, content in keep.items():
            path = self.root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if content is None:
                path.unlink()
            else:
                path.write_text(content)
        git(self.root, "add", "-A", "--", *keep)
        git(self.root, "commit", "-q", "-m", f"{title}\n\nAutoresearch-Experiment: {exp_id}")
        parent, self.head = self.head, git(self.root, "rev-parse", "HEAD")
        self.ledger.append({"type": "commit", "ts": ts, "experiment_id": exp_id, "commit": self.head,
                            "parent": parent, "branch": "autoresearch/t", "title": title})

    def measured(self, title: str, factor: float, keep: dict[str, str | None] | None = None,
                 recorded: dict[str, Any] | None = None, pairs: int = 30,
                 seed: int = 0) -> tuple[str, stats.Comparison]:
        """Launch and finish one experiment the way the manager records it: the design, every raw sample
        (the candidate `factor` times the baseline, with 0.5% noise) and the analysis made of them, whose
        primary comparison `recorded` overrides (a ledger edited by hand, or written by a faulty version).
        Returns the experiment id and the comparison its samples give."""
        self.n += 1
        exp_id = f"e{self.n:04d}"
        ts = 1_800_000_000.0 + self.n * 10
        design = stats.make_design("auto")
        rng = np.random.default_rng(seed)
        base = list(100 * np.exp(rng.normal(0, 0.005, pairs)))
        cand = [b * factor * float(np.exp(rng.normal(0, 0.005))) for b in base]
        samples = [{"pair": i, "role": role, "position": position, "metrics": {"score": float(value)}}
                   for i, (b, c) in enumerate(zip(base, cand, strict=True))
                   for role, value, position in (("baseline", b, i % 2), ("candidate", c, 1 - i % 2))]
        outcome = {"status": "done", "samples": samples, "checks": {"ran": True, "passed": True},
                   "host": {"hostname": "box"}}
        analysis = metrics.analyze(outcomes.read(outcomes.Experiment, copy.deepcopy(outcome)),
                                   decide.Spec("score", "higher", 0.01), design)
        if recorded:
            analysis["metrics"]["score"].update(recorded)
            analysis["verdict"] = recorded.get("verdict", analysis["verdict"])
        self.ledger.append({"type": "launch", "ts": ts, "experiment_id": exp_id, "session_id": "s1", "title": title,
                            "base_commit": self.head, "changed_files": sorted(keep or {"a.txt": ""}),
                            "metric": "score", "direction": "higher", "design": design.record()})
        self.ledger.append({"type": "result", "ts": ts + 5, "experiment_id": exp_id, "status": "done",
                            "worker": "local", "outcome": outcome, "analysis": analysis})
        if keep is not None:
            self.commit(exp_id, title, keep, ts + 6)
        comparison = stats.paired(base, cand, "higher", design, [i % 2 == 0 for i in range(pairs)])
        assert isinstance(comparison, stats.Comparison)
        return exp_id, comparison


def _comparison(delta: float, lo: float, hi: float, verdict: str | None, n_pairs: int = 5) -> dict[str, Any]:
    return {"baseline": {"n": n_pairs, "mean": 100.0}, "candidate": {"n": n_pairs, "mean": 100.0 * (1 + delta / 100)},
            "delta_pct": delta, "ci_low_pct": lo, "ci_high_pct": hi, "p_value": 0.001, "n_pairs": n_pairs,
            "verdict": verdict}


@pytest.fixture
def synthetic(tmp_path: Path) -> Synthetic:
    return Synthetic(tmp_path / "repo")


def markers(png: Path | bytes, color: str, tolerance: float = 0.08, min_pixels: int = 10) -> int:
    """Separate blobs of `color` in an image (closer than 2 pixels counts as one: a line drawn across a
    marker does not split it), of at least `min_pixels` (not a whisker's cap): one per marker drawn, the
    legend's own marker included."""
    image = imread(io.BytesIO(png) if isinstance(png, bytes) else str(png))[..., :3]
    target = np.array([int(color[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    mask = np.abs(image - target).max(axis=-1) < tolerance
    labels, count = ndimage.label(ndimage.binary_dilation(mask, iterations=2), structure=np.ones((3, 3)))
    sizes = ndimage.sum_labels(mask, labels, range(1, count + 1))
    return int((np.asarray(sizes) >= min_pixels).sum())


# --- end to end ----------------------------------------------------------------------------------

# One sample: value.txt times factor.txt with +/-0.2% noise, so effects are known exactly.
PRODUCT = (balanced_noise() + "awk -v v=$(cat value.txt) -v f=$(cat factor.txt) -v n=$n "
           "'BEGIN{printf \"METRIC score=%.5f\\nMETRIC other=1\\n\", v*f*n}'")


def product_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "product"
    repo.mkdir()
    (repo / "autoresearch.sh").write_text(
        f"#!/usr/bin/env bash\nset -eu\ncase \"$1\" in\n  build) true ;;\n  bench) {PRODUCT} ;;\nesac\n")
    (repo / "autoresearch.checks.sh").write_text("#!/usr/bin/env bash\ngrep -qv broken value.txt\n")
    (repo / "value.txt").write_text("100\n")
    (repo / "factor.txt").write_text("1\n")
    return init_repo(repo)


def edit(name: str, old: str, new: str) -> str:
    return f"--- a/{name}\n+++ b/{name}\n@@ -1 +1 @@\n-{old}\n+{new}\n"


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_real_session_is_reported_and_finalized_through_mcp(tmp_path: Path) -> None:
    repo = product_repo(tmp_path)
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="t")
        kept = []
        for title, patch in (("value 110", edit("value.txt", "100", "110")),
                             ("factor 1.1", edit("factor.txt", "1", "1.1"))):
            launched = await call(c, "launch_experiment", title=title, hypothesis="<b>bigger</b> is better",
                                  sources=["https://example.org/idea"], source="patch", patch=patch, repeats=30)
            assert (await wait_final(c, launched["experiment_id"]))["verdict"] == "improved"
            kept.append(await call(c, "commit_winner", experiment_id=launched["experiment_id"]))
        notes = await call(c, "launch_experiment", title="notes only", source="patch", repeats=30,
                           patch="--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1 @@\n+nothing\n")
        broken = await call(c, "launch_experiment", title="broken", source="patch", repeats="auto",
                            patch=edit("value.txt", "110", "broken"))
        for launched in (notes, broken):
            await wait_final(c, launched["experiment_id"])
        out = await call(c, "report", repo=str(repo), secondary_metrics=["other"])
        done = await call(c, "finalize_session", repo=str(repo))

    assert (out["experiments"], out["kept"], out["discarded"], out["failed"]) == (4, 2, 1, 1)
    assert 20.0 < out["total_gain_pct"] < 22.0  # 1.1 x 1.1
    assert out["total_gain_ci_low_pct"] < out["total_gain_pct"] < out["total_gain_ci_high_pct"]
    assert "2 kept" in out["summary"] and Path(out["html_path"]) == repo.resolve() / ".autoresearch/report/index.html"
    page = Path(out["html_path"]).read_text()
    for k in kept:
        assert k["commit"][:12] in page
    assert "&lt;b&gt;bigger&lt;/b&gt;" in page and "value.txt | 2" in page
    rows = list(csv.DictReader(Path(out["tsv_path"]).read_text().splitlines(), delimiter="\t"))
    assert [r["title"] for r in rows] == ["value 110", "factor 1.1", "notes only", "broken"]
    assert [r["outcome"] for r in rows] == ["kept", "kept", "discarded", "failed"]
    # the two kept points, besides the legend's marker (the chart without the secondary panel)
    assert markers(render_chart(load(str(repo)), []), COLORS[KEPT]) == 1 + 2

    assert done["verified"] is True and [b["titles"] for b in done["branches"]] == [["value 110"], ["factor 1.1"]]
    for branch, name in zip(done["branches"], ("value.txt", "factor.txt"), strict=True):
        assert branch["files"] == [name]
        assert git(repo, "rev-parse", f"{branch['name']}~1") == git(repo, "rev-parse", "main")


# --- the numbers ---------------------------------------------------------------------------------


def test_total_gain_chains_the_kept_experiments_with_a_combined_interval(synthetic: Synthetic) -> None:
    synthetic.experiment("first", 10.0, (8.0, 12.0), "improved", keep={"a.txt": "1\n"})
    synthetic.experiment("neutral", 0.2, (-1.0, 1.4))
    synthetic.experiment("second", 10.0, (8.0, 12.0), "improved", keep={"b.txt": "2\n"})
    out = write_report(str(synthetic.root))
    assert out.total_gain_pct == pytest.approx(21.0, abs=1e-6)
    # each interval is 98% with 5 pairs (4 df); their standard errors add in quadrature, and the sum's
    # 98% interval uses the Welch-Satterthwaite degrees of freedom (8)
    se = (np.log(1.12) - np.log(1.08)) / 2 / sps.t.ppf(0.99, 4)
    half = sps.t.ppf(0.99, 8) * np.sqrt(2) * se
    assert out.total_gain_ci_low_pct == pytest.approx((1.21 * np.exp(-half) - 1) * 100, abs=1e-3)
    assert out.total_gain_ci_high_pct == pytest.approx((1.21 * np.exp(half) - 1) * 100, abs=1e-3)
    assert "overstate the gain (winner" in Path(out.html_path).read_text()
    rows = list(csv.DictReader(Path(out.tsv_path).read_text().splitlines(), delimiter="\t"))
    # the neutral experiment ran on the first winner's head, so it sits at 1.10 x 1.002 of the start
    assert float(rows[1]["vs_start_pct"]) == pytest.approx(10.22, abs=0.01)
    assert "Baseline 100 (start_session's 2 validation runs of the start" in out.summary
    assert "At the head: estimated 121 (the baseline times the 2 kept experiment(s)' changes, chained)" in out.summary
    assert "keep rate 67%" in out.summary and "Total +21.00% (98% CI" in out.summary


def test_lower_is_better_sessions_keep_the_metrics_own_sign(tmp_path: Path) -> None:
    s = Synthetic(tmp_path / "repo", direction="lower")
    s.experiment("faster", -20.0, (-25.0, -15.0), "improved", keep={"a.txt": "fast\n"})
    s.experiment("slower", 5.0, (3.0, 7.0), "regressed")
    out = write_report(str(s.root))
    assert out.total_gain_pct == pytest.approx(-20.0) and out.direction == "lower"
    assert "Best single experiment: 'faster' -20.00%" in out.summary


def test_failed_noisy_and_running_experiments_are_counted_apart(synthetic: Synthetic) -> None:
    synthetic.experiment("crashed", None, verdict=None, status="failed")
    synthetic.experiment("too noisy", 30.0, (-20.0, 90.0), "noisy")
    synthetic.experiment("undecided", 1.0, (-1.0, 3.0), "inconclusive")
    synthetic.experiment("wrong", 3.0, (1.0, 5.0), "improved", status="checks_failed")
    synthetic.experiment("still going", None, status="running")
    synthetic.experiment("meh", -0.5, (-1.0, 0.0), "no_change", cost=0.25)
    out = write_report(str(synthetic.root))
    # noisy and inconclusive measured fine and decided nothing: discarded, not failed
    assert (out.kept, out.discarded, out.failed, out.running) == (0, 3, 2, 1)
    assert out.total_gain_pct == 0.0 and out.total_gain_ci_low_pct is None and out.cost_usd == 0.25
    assert markers(Path(out.chart_path), COLORS["failed"]) == 1 + 2  # the legend's, and one per failure
    rows = list(csv.DictReader(Path(out.tsv_path).read_text().splitlines(), delimiter="\t"))
    wrong = next(r for r in rows if r["title"] == "wrong")
    assert wrong["verdict"].startswith("refused: checks failed") and "improved" not in wrong["outcome"]
    page = Path(out.html_path).read_text()
    assert "refused: checks failed (timed improved)" in page


@pytest.mark.parametrize("recorded", [True, False])
def test_an_experiments_standard_error_is_recorded_or_recovered_from_its_interval(recorded: bool) -> None:
    rng = np.random.default_rng(3)
    base = list(100 * np.exp(rng.normal(0, 0.01, 40)))
    cand = [b * np.exp(0.001 + rng.normal(0, 0.01)) for b in base]
    design = stats.make_design("auto", alpha=0.02, max_pairs=100)
    cmp = stats.paired(base, cand, "higher", design, [i % 2 == 0 for i in range(40)])
    fields = dict(cmp.__dict__) if recorded else {k: v for k, v in cmp.__dict__.items() if k != "log_se"}
    error = stats.log_standard_error(fields, stats.load_design(design.record()))
    d = np.log(np.array(cand) / np.array(base))
    assert cmp.n_pairs == 40 and error is not None and error[1] == 39
    # the Hodges-Lehmann estimate's standard error on normal data: sigma * sqrt(pi / 3) / sqrt(n)
    assert error[0] == pytest.approx(d.std(ddof=1) * np.sqrt(np.pi / 3 / 40), rel=0.3)


def test_independent_errors_combine_in_quadrature_at_one_level() -> None:
    assert stats.combined_half_width([], 0.95) is None
    assert stats.combined_half_width([(0.01, 9)], 0.95) == pytest.approx(sps.t.ppf(0.975, 9) * 0.01)
    two = stats.combined_half_width([(0.01, 4), (0.01, 4)], 0.98)
    assert two == pytest.approx(sps.t.ppf(0.99, 8) * np.sqrt(2) * 0.01)


def test_with_one_kept_experiment_the_total_is_its_own_figure_at_its_own_level(synthetic: Synthetic) -> None:
    """Issue 33 item 3: the total's interval was the kept experiment's standard error at the session's level
    (narrower than the experiment's own sequential interval); with one kept it is that experiment's figure."""
    design = stats.make_design("auto", alpha=0.02, max_pairs=100)
    synthetic.experiment("early stop", 10.0, (4.0, 16.0), "improved", keep={"a.txt": "1\n"},
                         design=design.record(), n_pairs=30)
    synthetic.experiment("neutral", 0.2, (-1.0, 1.4))
    out = write_report(str(synthetic.root))
    assert (out.total_gain_pct, out.total_gain_ci_low_pct, out.total_gain_ci_high_pct) == (10.0, 4.0, 16.0)
    assert out.total_gain_ci_level == pytest.approx(0.98)
    assert "Total +10.00% (98% CI +4.00% to +16.00%, the one kept experiment's own, e0001;" in out.summary
    page = BeautifulSoup(Path(out.html_path).read_text(), "html.parser").get_text(" ", strip=True)
    assert "+10.00% (98% CI +4.00% to +16.00%; the one kept experiment's own, e0001)" in page


def test_a_sequential_experiments_interval_is_not_taken_at_the_sessions_level(synthetic: Synthetic) -> None:
    """Runs analyzed at an early look reported wider intervals (their boundaries are stricter); a total of two
    combines their standard errors at the session's level, so it is not as wide as their intervals added."""
    design = stats.make_design("auto", alpha=0.02, max_pairs=100)
    for name in ("a.txt", "b.txt"):
        synthetic.experiment("early stop", 10.0, (4.0, 16.0), "improved", keep={name: "1\n"},
                             design=design.record(), n_pairs=30)
    out = write_report(str(synthetic.root))
    se = (np.log(1.16) - np.log(1.04)) / 2 / design.z_at(30)
    half = sps.t.ppf(0.99, 58) * np.sqrt(2) * se
    assert out.total_gain_ci_low_pct == pytest.approx((1.21 * np.exp(-half) - 1) * 100, abs=1e-3)
    assert out.total_gain_ci_level == pytest.approx(0.98) and out.total_gain_ci_low_pct > 8.16  # 1.04 ** 2


def test_an_experiment_of_the_earlier_t_test_design_keeps_its_standard_error(synthetic: Synthetic) -> None:
    legacy = {"looks": [5, 8], "alphas": [0.004, 0.003], "crit": [5.6, 4.4], "sequential": True,
              "min_effect": 0.01, "noise_limit": 0.1, "alpha": 0.02, "warmup": 1}
    for name in ("a.txt", "b.txt"):
        synthetic.experiment("early stop", 10.0, (4.0, 16.0), "improved", keep={name: "1\n"}, design=legacy)
    out = write_report(str(synthetic.root))
    se = (np.log(1.16) - np.log(1.04)) / 2 / sps.t.ppf(1 - 0.004 / 2, 4)
    half = sps.t.ppf(0.99, 8) * np.sqrt(2) * se
    assert out.total_gain_ci_low_pct == pytest.approx((1.21 * np.exp(-half) - 1) * 100, abs=1e-3)


def _session_total(s: Synthetic, delta: float, lo: float, hi: float) -> None:
    """Record a session total (launch_experiment(source='session')): the head measured against the start."""
    s.n += 1
    exp_id, ts = f"e{s.n:04d}", 1_800_000_000.0 + s.n * 10
    s.ledger.append({"type": "launch", "ts": ts, "experiment_id": exp_id, "session_id": "s1", "title": "session total",
                     "source": "session", "base_commit": s.start, "candidate_commit": s.head,
                     "changed_files": [], "metric": "score", "direction": "higher"})
    outcome = {"status": "done", "checks": {"ran": True, "passed": True}, "host": {"hostname": "box"}}
    s.ledger.append({"type": "result", "ts": ts + 5, "experiment_id": exp_id, "status": "done", "worker": "local",
                     "outcome": outcome,
                     "analysis": {"metrics": {"score": _comparison(delta, lo, hi, "improved")}, "verdict": "improved"}})


@pytest.mark.parametrize(("total", "warned"), [((10.0, 8.0, 12.0), True), ((118.0, 110.0, 126.0), False)])
def test_a_session_total_clearly_short_of_the_kept_gains_is_warned_about(
        synthetic: Synthetic, total: tuple[float, float, float], warned: bool) -> None:
    """Issue 32.10's backstop: a kept gain made by a baseline that ran slower than it is (a winner that can still
    tell it is the baseline, or a busier machine in that experiment) is not there when the head is measured
    against the start; the report says so when the two intervals are apart, and not when they overlap."""
    synthetic.experiment("first", 10.0, (8.0, 12.0), "improved", keep={"a.txt": "1\n"})
    synthetic.experiment("second", 100.0, (95.0, 105.0), "improved", keep={"b.txt": "2\n"})
    _session_total(synthetic, *total)
    out = write_report(str(synthetic.root))
    short = [w for w in out.warnings if "clearly short" in w]
    assert bool(short) is warned, out.warnings
    if warned:
        assert "e0003" in short[0] and "+10.00%" in short[0] and "review each kept experiment's diff" in short[0]


def test_the_total_is_what_is_on_the_session_branch(synthetic: Synthetic) -> None:
    synthetic.experiment("first", 10.0, (8.0, 12.0), "improved", keep={"a.txt": "1\n"})
    first = synthetic.head
    synthetic.experiment("second", 10.0, (8.0, 12.0), "improved", keep={"b.txt": "2\n"})
    root = synthetic.root
    git(root, "reset", "-q", "--hard", first)  # the second winner is dropped from the branch
    (root / "c.txt").write_text("by hand\n")
    git(root, "add", "c.txt")
    git(root, "commit", "-q", "-m", "a hand-made change")
    out = write_report(str(root))
    assert out.total_gain_pct == pytest.approx(10.0) and (out.kept, out.discarded) == (1, 1)
    hand = git(root, "rev-parse", "HEAD")[:12]
    assert any(hand in w and "its effect is not in the total" in w for w in out.warnings)
    assert any("e0002" in w and "no longer on autoresearch/t" in w for w in out.warnings)
    rows = list(csv.DictReader(Path(out.tsv_path).read_text().splitlines(), delimiter="\t"))
    assert [r["outcome"] for r in rows] == ["kept", "discarded"]


def test_the_best_experiment_is_a_winner_whose_checks_passed(synthetic: Synthetic) -> None:
    synthetic.experiment("fast but wrong", 30.0, (25.0, 35.0), "improved", status="checks_failed")
    synthetic.experiment("fast and right", 5.0, (4.0, 6.0), "improved")
    out = write_report(str(synthetic.root))
    assert "Best single experiment: 'fast and right' +5.00%" in out.summary


# --- every figure from the stored samples ----------------------------------------------------------


def test_figures_are_recomputed_from_the_samples_not_read_from_the_recorded_analysis(synthetic: Synthetic) -> None:
    _, kept = synthetic.measured("ten percent", 1.10, keep={"a.txt": "1\n"},
                                 recorded={"delta_pct": 50.0, "ci_low_pct": 49.0, "ci_high_pct": 51.0})
    flat, same = synthetic.measured("nothing", 1.0, recorded={"delta_pct": 30.0, "verdict": "improved"}, seed=1)
    out = write_report(str(synthetic.root))
    assert kept.delta_pct is not None and kept.ci_low_pct is not None and kept.ci_high_pct is not None
    assert out.total_gain_pct == pytest.approx(kept.delta_pct, abs=1e-6)
    # the one kept experiment's interval, as its samples give it
    assert (out.total_gain_ci_low_pct, out.total_gain_ci_high_pct) == (kept.ci_low_pct, kept.ci_high_pct)
    rows = list(csv.DictReader(Path(out.tsv_path).read_text().splitlines(), delimiter="\t"))
    assert [r["figures"] for r in rows] == ["samples", "samples"]
    assert float(rows[1]["delta_pct"]) == same.delta_pct and rows[1]["verdict"] == same.verdict != "improved"
    assert "Best single experiment: 'ten percent'" in out.summary  # the recorded "improved" of the other is not
    assert any(f"{flat} (recorded improved, its samples give {same.verdict})" in w for w in out.warnings)


def test_a_result_without_samples_is_shown_as_recorded_and_says_so(synthetic: Synthetic) -> None:
    synthetic.experiment("from an early ledger", 5.0, (4.0, 6.0), "improved", keep={"a.txt": "1\n"})
    synthetic.experiment("crashed", None, verdict=None, status="failed")
    out = write_report(str(synthetic.root))
    assert out.total_gain_pct == pytest.approx(5.0)
    assert any(w.startswith("the result stores no samples: e0001:") and "not recomputed" in w and "e0002" not in w
               for w in out.warnings)
    rows = list(csv.DictReader(Path(out.tsv_path).read_text().splitlines(), delimiter="\t"))
    assert [(r["figures"], r["delta_pct"]) for r in rows] == [("recorded", "5.0"), ("none", "")]
    soup = BeautifulSoup(Path(out.html_path).read_text(), "html.parser")
    first, second = soup.select("#experiments-table tbody tr")
    assert "as recorded, not recomputed: the result stores no samples" in first.get_text()
    assert "the result stores no samples" in second.get_text()  # and nothing is invented for it


# --- the page ------------------------------------------------------------------------------------

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def test_agent_written_text_is_escaped(synthetic: Synthetic) -> None:
    synthetic.experiment(HOSTILE, 1.0, hypothesis=f"because {HOSTILE}", sources=[HOSTILE, "javascript:alert(1)"],
                         keep={"a.txt": "x\n"}, verdict="improved")
    soup = BeautifulSoup(Path(write_report(str(synthetic.root)).html_path).read_text(), "html.parser")
    assert soup.find_all("script") == [] and [img["id"] for img in soup.find_all("img")] == ["chart"]
    assert not [a for tag in soup.find_all(True) for a in tag.attrs if a.startswith("on")]
    assert not [a for a in soup.find_all("a") if str(a["href"]).startswith("javascript")]
    row = soup.select_one("#experiments-table tbody tr")
    assert row is not None and row.b is not None and row.b.get_text() == HOSTILE  # shown as text, intact
    assert HOSTILE in row.get_text() and f"because {HOSTILE}" in row.get_text()


def test_the_page_is_one_self_contained_file(synthetic: Synthetic) -> None:
    synthetic.experiment("fuse", 5.0, (4.0, 6.0), "improved", sources=["https://arxiv.org/abs/2401.00001"],
                         keep={"a.txt": "fused\n"})
    page = Path(write_report(str(synthetic.root)).html_path).read_text()
    assert re.search(r'<img id="chart"[^>]* src="data:image/png;base64,[A-Za-z0-9+/=]{1000,}"', page)
    assert not re.search(r'<(script|link|iframe)\b', page)
    assert not re.search(r'\bsrc="(?!data:)', page)  # every asset is inline
    assert "default-src 'none'" in page  # and the browser is told to fetch nothing
    assert '<a href="https://arxiv.org/abs/2401.00001"' in page  # sources stay links to follow


def chromium_flags(tmp_path: Path) -> list[str]:
    """Headless Chromium as this machine runs it: no sandbox as root, nothing fetched from the network."""
    return ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1280,1400"]


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="headless Chromium is not installed (Debian: apt-get install -y chromium)")
def test_the_page_renders_in_headless_chromium(synthetic: Synthetic, tmp_path: Path) -> None:
    for i in range(12):
        won = i % 4 == 0
        synthetic.experiment(f"idea {i}", 4.0 if won else -0.5, verdict="improved" if won else "no_change",
                             keep={f"f{i}.txt": "x\n"} if won else None)
    page = Path(write_report(str(synthetic.root)).html_path)
    flags = chromium_flags(tmp_path)
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", *flags, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=90,
                   check=True)
    dom = subprocess.run(["chromium", *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=90, check=True).stdout
    assert 'id="chart"' in dom and 'id="experiments-table"' in dom
    assert len(re.findall(r'<tr class="(kept|discarded)"', dom)) == 12
    image = imread(str(shot))[..., :3]
    assert image.std() > 0.05  # not a blank page
    assert markers(shot, COLORS[KEPT], tolerance=0.1) >= 1 + 3  # kept marks on screen (chart and table badges)


def test_tsv_has_one_line_per_experiment_whatever_the_titles(synthetic: Synthetic) -> None:
    synthetic.experiment("tab\there", 1.0)
    synthetic.experiment("multi\nline\r\ntitle", 2.0, hypothesis="a\tb\nc")
    synthetic.experiment("plain", None, status="failed", verdict=None)
    path = Path(write_report(str(synthetic.root)).tsv_path)
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and all(line.count("\t") == len(TSV_COLUMNS) - 1 for line in lines)
    rows = list(csv.DictReader(path.read_text().splitlines(), delimiter="\t"))
    assert [r["title"] for r in rows] == ["tab here", "multi line title", "plain"]
    assert rows[2]["delta_pct"] == "" and rows[0]["delta_pct"] == "1.0"


def test_secondary_metrics_add_panels_on_request(synthetic: Synthetic) -> None:
    synthetic.experiment("two metrics", 3.0, other={"latency_ms": -3.0})
    plain = imread(write_report(str(synthetic.root)).chart_path).shape[0]
    taller = imread(write_report(str(synthetic.root), ["latency_ms"]).chart_path).shape[0]
    assert taller > plain
    with pytest.raises(InputError, match="latency_ms"):
        write_report(str(synthetic.root), ["nope"])


@pytest.mark.anyio
async def test_a_repository_without_a_session_is_refused_with_a_way_out(tmp_path: Path) -> None:
    repo = tmp_path / "plain"
    (repo / "x").parent.mkdir(parents=True)
    (repo / "x").write_text("x")
    init_repo(repo)
    async with Client(build_server(), mode="legacy") as c:  # JSON-RPC, as Claude Code speaks it
        message = await error(c, "report", repo=str(repo))
    assert "no .autoresearch/" in message and "start_session" in message


def test_the_command_line_writes_the_report_here_by_default(synthetic: Synthetic, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    synthetic.experiment("cli", 2.0, (1.5, 2.5), "improved", keep={"c.txt": "c\n"})
    monkeypatch.chdir(synthetic.root)
    assert cli.main(["report", "--finalize"]) == 0
    out = capsys.readouterr().out
    assert "1 kept" in out and "index.html" in out and "autoresearch/t-review/01-cli" in out
    assert (synthetic.root / ".autoresearch/report/results.tsv").exists()


def test_quotes_ampersands_and_markup_are_escaped_everywhere_on_the_page(synthetic: Synthetic) -> None:
    text = 'Tom & "Jerry\'s" <script>alert(1)</script>'
    url = 'https://example.org/?a=1&b="x"><script>'
    synthetic.experiment(text, 1.0, hypothesis=text, sources=[url, text], keep={"a.txt": "x\n"}, verdict="improved")
    (synthetic.root / ".autoresearch" / "notes.md").write_text(f"- {text}\n")
    page = Path(write_report(str(synthetic.root)).html_path).read_text()
    assert "<script" not in page and '"Jerry' not in page and "& " not in page
    assert "Tom &amp; &#34;Jerry&#39;s&#34; &lt;script&gt;" in page
    soup = BeautifulSoup(page, "html.parser")
    row = soup.select_one("#experiments-table tbody tr")
    assert row is not None and row.b is not None and row.b.get_text() == text
    assert [a["href"] for a in row.find_all("a")] == [url]  # the address intact, inside its attribute
    commit = soup.select_one("#commits article")
    assert commit is not None and text in commit.get_text()  # the commit message
    notes = soup.select_one("#notes pre")
    assert notes is not None and text in notes.get_text()


def test_the_page_template_ships_in_the_wheel_and_renders_from_it(synthetic: Synthetic, tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(root)], check=True, timeout=300, capture_output=True)
    installed = tmp_path / "site-packages"
    zipfile.ZipFile(next((tmp_path / "dist").glob("*.whl"))).extractall(installed)  # what an installer does
    synthetic.experiment("shipped", 2.0, verdict="improved", keep={"a.txt": "x\n"})
    script = ("import sys; sys.path.insert(0, sys.argv[1]); from autoresearch_mcp import report; "
              "assert report.__file__.startswith(sys.argv[1]), report.__file__; "
              "print(report.write_report(sys.argv[2]).html_path)")
    out = subprocess.run([sys.executable, "-c", script, str(installed), str(synthetic.root)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    page = BeautifulSoup(Path(out.stdout.strip()).read_text(), "html.parser")
    row = page.select_one("#experiments-table tbody tr")
    assert row is not None and row.b is not None and row.b.get_text() == "shipped"


# --- finalize ------------------------------------------------------------------------------------


def test_finalize_makes_a_branch_per_independent_change_and_groups_overlaps(synthetic: Synthetic) -> None:
    synthetic.experiment("speed up a", 2.0, verdict="improved", keep={"a.txt": "a2\n"})
    synthetic.experiment("new module", 2.0, verdict="improved", keep={"lib/new.c": "int x;\n"})
    synthetic.experiment("speed up a again", 2.0, verdict="improved", keep={"a.txt": "a3\n"})
    synthetic.experiment("drop the old file", 2.0, verdict="improved", keep={"a.txt": None})
    synthetic.experiment("tune b", 2.0, verdict="improved", keep={"b.txt": "b\n"})
    done = finalize(str(synthetic.root))
    assert done.verified, done.verification
    assert [b.titles for b in done.branches] == [
        ["speed up a", "speed up a again", "drop the old file"], ["new module"], ["tune b"]]
    assert [b.name for b in done.branches] == ["autoresearch/t-review/01-speed-up-a",
                                               "autoresearch/t-review/02-new-module", "autoresearch/t-review/03-tune-b"]
    assert done.branches[0].experiments == ["e0001", "e0003", "e0004"]
    assert len(done.grouped) == 1 and "a.txt" in done.grouped[0]
    root = synthetic.root
    assert git(root, "diff", "--name-only", synthetic.start, done.branches[1].tip) == "lib/new.c"
    assert git(root, "log", "--format=%s", done.branches[0].name) == \
        "drop the old file\nspeed up a again\nspeed up a\ninitial"
    assert git(root, "diff", "--name-only", synthetic.start, done.branches[2].name) == "b.txt"


def test_finalize_leaves_the_checked_out_branch_index_and_files_alone(synthetic: Synthetic) -> None:
    synthetic.experiment("one", 2.0, verdict="improved", keep={"a.txt": "1\n"})
    synthetic.experiment("two", 2.0, verdict="improved", keep={"b.txt": "2\n"})
    root = synthetic.root
    (root / "a.txt").write_text("uncommitted edit\n")
    (root / "scratch.txt").write_text("untracked\n")
    git(root, "add", "scratch.txt")
    before = (git(root, "symbolic-ref", "HEAD"), git(root, "rev-parse", "HEAD"), git(root, "status", "--porcelain"),
              (root / ".git" / "index").read_bytes())
    assert finalize(str(root)).verified
    after = (git(root, "symbolic-ref", "HEAD"), git(root, "rev-parse", "HEAD"), git(root, "status", "--porcelain"),
             (root / ".git" / "index").read_bytes())
    assert after == before and (root / "a.txt").read_text() == "uncommitted edit\n"


def test_finalize_again_gives_the_same_commits_and_drops_stale_branches(synthetic: Synthetic) -> None:
    synthetic.experiment("one", 2.0, verdict="improved", keep={"a.txt": "1\n"})
    synthetic.experiment("two", 2.0, verdict="improved", keep={"b.txt": "2\n"})
    first = finalize(str(synthetic.root))
    assert [b.tip for b in finalize(str(synthetic.root)).branches] == [b.tip for b in first.branches]
    synthetic.experiment("one more on a", 2.0, verdict="improved", keep={"a.txt": "11\n", "b.txt": "22\n"})
    third = finalize(str(synthetic.root))
    assert [b.titles for b in third.branches] == [["one", "two", "one more on a"]] and third.verified
    assert third.removed == ["autoresearch/t-review/02-two"]


def test_finalize_refuses_while_a_review_branch_is_checked_out(synthetic: Synthetic) -> None:
    synthetic.experiment("one", 2.0, verdict="improved", keep={"a.txt": "1\n"})
    branch = finalize(str(synthetic.root)).branches[0].name
    git(synthetic.root, "checkout", "-q", branch)
    with pytest.raises(StateError, match="is checked out"):
        finalize(str(synthetic.root))


def test_finalize_refuses_to_drop_a_reviewers_commit_on_a_review_branch(synthetic: Synthetic) -> None:
    synthetic.experiment("one", 2.0, verdict="improved", keep={"a.txt": "1\n"})
    synthetic.experiment("two", 2.0, verdict="improved", keep={"b.txt": "2\n"})
    root = synthetic.root
    first = finalize(str(root))
    review = first.branches[1].name
    git(root, "checkout", "-q", review)
    (root / "b.txt").write_text("2, reviewed\n")
    git(root, "commit", "-q", "-am", "review fix-up")
    reviewed = git(root, "rev-parse", "HEAD")
    git(root, "checkout", "-q", "autoresearch/t")
    with pytest.raises(StateError, match=f"review branch {review} has moved.*rewrite"):
        finalize(str(root))  # would point it back at finalize's tip
    synthetic.experiment("one more", 2.0, verdict="improved", keep={"a.txt": "11\n", "b.txt": "22\n"})
    with pytest.raises(StateError, match=f"review branch {review} has moved.*delete"):
        finalize(str(root))  # everything is one group now: the branch would go
    assert git(root, "rev-parse", review) == reviewed
    assert git(root, "rev-parse", first.branches[0].name) == first.branches[0].tip  # nothing was written
    git(root, "branch", "-m", review, "kept-review")
    assert finalize(str(root)).verified  # renamed out of the way, finalize goes on
    assert git(root, "rev-parse", "kept-review") == reviewed


def test_the_baseline_is_start_sessions_latest_validation_of_the_start_with_its_noise(synthetic: Synthetic) -> None:
    # validated first at 99-101, then again (with other settings, say fewer threads) at 49-51
    synthetic.ledger.append({"type": "session", "session_id": "s1", "tag": "t", "head": synthetic.start,
                             "metric": "score", "baseline": {"score": [49.0, 51.0]}})
    assert write_report(str(synthetic.root)).summary.count("Baseline 50 (start_session's 2 validation runs") == 1
    synthetic.measured("as the experiments measure it", 1.0)  # its baseline runs: about 100
    summary = write_report(str(synthetic.root)).summary
    # one baseline: an experiment's own baseline runs are its figures, not the session's (issue 33 item 2)
    assert "Baseline 50 (start_session's 2 validation runs" in summary and "noise 2.8%" in summary


# --- the chart with few experiments (issue 33, item 9) ----------------------------------------------

def few(synthetic: Synthetic) -> None:
    """Three experiments: a kept one with a wide interval at the top, a regression, a noisy one."""
    synthetic.experiment("fuse the norm and the scale into one pass", 40.0, (21.3, 58.65), "improved",
                         keep={"a.txt": "fused\n"})
    synthetic.experiment("slower", -6.0, (-9.0, -3.0), "regressed")
    synthetic.experiment("unsure", 1.0, (-12.0, 14.0), "noisy")


def test_the_chart_ticks_whole_experiments(synthetic: Synthetic) -> None:
    few(synthetic)
    ax = chart_figure(load(str(synthetic.root)), []).axes[0]
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)
    assert {1.0, 2.0, 3.0} <= set(ticks)


def test_the_charts_axis_holds_every_whisker(synthetic: Synthetic) -> None:
    few(synthetic)
    data = load(str(synthetic.root))
    low, high = chart_figure(data, []).axes[0].get_ylim()
    whiskers = [stats.pct(v) for r in data.rows for v in (r.level_low, r.level_high) if v is not None]
    assert max(whiskers) > 58 and low < min(whiskers) and max(whiskers) < high  # +58.65% is drawn whole


def test_the_kept_label_stays_inside_the_panel_and_off_the_title(synthetic: Synthetic) -> None:
    few(synthetic)
    fig = chart_figure(load(str(synthetic.root)), [])
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    panel = ax.get_window_extent(renderer)
    title = ax.title.get_window_extent(renderer)
    labels = [t for t in ax.texts if t.get_text().startswith("fuse the norm")]
    assert labels
    for label in labels:
        box = label.get_window_extent(renderer)
        assert panel.x0 <= box.x0 and box.x1 <= panel.x1 and panel.y0 <= box.y0 and box.y1 <= panel.y1
        assert not box.overlaps(title)


def test_noisy_and_regressed_have_colors_of_their_own(synthetic: Synthetic) -> None:
    few(synthetic)
    png = render_chart(load(str(synthetic.root)), [])
    assert VERDICT_COLORS["regressed"] != VERDICT_COLORS["noisy"] != COLORS["discarded"]
    # the legend's marker and the point, for each
    assert markers(png, VERDICT_COLORS["regressed"]) == 1 + 1
    assert markers(png, VERDICT_COLORS["noisy"]) == 1 + 1
    legend = [t.get_text() for t in chart_figure(load(str(synthetic.root)), []).axes[0].get_legend().get_texts()]
    assert "discarded: regressed (1)" in legend and "discarded: noisy (1)" in legend


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="headless Chromium is not installed (Debian: apt-get install -y chromium)")
def test_a_few_experiments_chart_shows_in_the_browser_as_drawn(synthetic: Synthetic, tmp_path: Path) -> None:
    few(synthetic)
    page = Path(write_report(str(synthetic.root)).html_path)
    flags = chromium_flags(tmp_path)
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", *flags, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=90,
                   check=True)
    # the page's chart in the browser: regressed and noisy points with their legend markers, apart
    assert markers(shot, VERDICT_COLORS["regressed"], tolerance=0.1) >= 2
    assert markers(shot, VERDICT_COLORS["noisy"], tolerance=0.1) >= 2

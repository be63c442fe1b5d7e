"""The gain accounting of a session: one row per experiment, the chain of kept commits and the totals.

Everything is recomputed from `.autoresearch/ledger.jsonl` (each experiment's figures from its stored
samples, see `measured`), the session config and git, so a report can be written at any time, with
or without a running server, and written again after more work.

The total gain is what is on the session branch now: its commits since the start are walked in
order, and each one the ledger records commit_winner making (never a trailer parsed from a message)
adds that experiment's measured log-ratio (each was measured against its own base commit, the session
head when it was launched). A commit naming no experiment (made by hand) adds nothing and is listed
as a warning; an experiment whose commit left the branch (a reset) is not counted as kept.
With one kept experiment the total is that experiment's figure: its change and its own interval, at
its own level. With more, the total's interval combines the kept experiments' standard errors (each
from its own samples and design) in quadrature at the session's level, assuming independent errors;
chaining selected winners tends to overstate the gain (winner's curse), which the page says.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_mcp import notes as session_notes
from autoresearch_mcp.errors import InputError, StateError
from autoresearch_mcp.git import gitops
from autoresearch_mcp.measure import figures, stats
from autoresearch_mcp.models import FINAL_STATUSES
from autoresearch_mcp.report.measured import RECORDED, SAMPLES, Measured, measure
from autoresearch_mcp.store.config import SessionConfig, load_config, state_dir
from autoresearch_mcp.store.ledger import ExperimentState, Ledger, LedgerView
from autoresearch_mcp.store.records import LaunchRecord, ProfileRecord

# Outcome classes of an experiment, and their colors in the chart and on the page.
KEPT, DISCARDED, FAILED, RUNNING = "kept", "discarded", "failed", "running"
COLORS = {KEPT: "#1a9850", DISCARDED: "#9e9e9e", FAILED: "#d73027", RUNNING: "#4575b4"}
BEST_COLOR = "#006837"
_FAILED_STATUSES = frozenset({"failed", "checks_failed", "cancelled", "lost"})
_FAILED_VERDICTS = frozenset({"invalid"})  # noisy and inconclusive measured fine: they decided nothing
MAX_LISTED = 8  # experiment ids named in one warning


@dataclass
class Row:
    """One experiment as the report shows it."""

    index: int
    exp: ExperimentState
    measured: Measured
    outcome: str
    base_level: float  # log-ratio of the experiment's base commit vs the session start
    level: float | None = None  # log-ratio of the candidate vs the session start
    level_low: float | None = None
    level_high: float | None = None
    position: int | None = None  # where its commit is on the session branch (kept experiments)
    head_level: float | None = None  # log-ratio of the session head right after its commit

    @property
    def launch(self) -> LaunchRecord:
        return self.exp.launch

    @property
    def metrics(self) -> dict[str, dict[str, Any]]:
        return self.measured.metrics

    @property
    def verdict(self) -> str | None:
        return self.measured.verdict

    def primary(self, metric: str) -> dict[str, Any]:
        return self.measured.comparison(metric)

    @property
    def winner(self) -> bool:
        """Improved (as its samples say), checks passed, and no other platform failed it."""
        return figures.is_winner(self.exp, self.verdict)

    @property
    def shown_verdict(self) -> str | None:
        """The verdict as a reader should take it: one whose checks or another platform refused it never
        reads as a win."""
        verdict = self.verdict
        if verdict is None:
            return None
        if self.exp.status == "checks_failed":
            return f"refused: checks failed (timed {verdict})"
        refused = sorted(name for name, p in self.exp.platforms.items() if p.passed is False)
        if verdict == "improved" and refused:
            return f"refused on {', '.join(refused)} (timed improved)"
        if self.exp.launch.source == "session":
            return f"session total: {verdict}"
        return verdict

    def checks(self) -> str:
        checks = self.exp.outcome.checks
        if checks is None or not checks.ran:
            return "not run"
        took = f" ({checks.duration_s:.1f} s)" if checks.duration_s is not None else ""
        return ("passed" if checks.passed else "failed") + took


@dataclass
class KeptCommit:
    """A commit on the session branch since the start."""

    sha: str
    message: str
    stat: str
    ts: float  # committer time
    experiment_id: str | None = None  # the ledger experiment its trailer names, if any


@dataclass
class SessionData:
    """A session's accounting: every experiment's row, the kept chain's total and what was read with them."""

    root: Path
    config: SessionConfig
    rows: list[Row]
    baseline: float | None
    total_log: float
    total_low_pct: float | None  # the total's interval (None, None while nothing is kept), at total_level
    total_high_pct: float | None
    total_level: float
    total_basis: str  # how the total's interval was obtained
    commits: list[KeptCommit] = field(default_factory=list)
    machines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: str | None = None  # .autoresearch/notes.md, as the agent wrote it
    profiles: list[ProfileRecord] = field(default_factory=list)  # profile_hotspots runs (their cloud cost)
    baseline_runs: int = 0  # the validation runs the baseline is the mean of
    baseline_noise_pct: float | None = None  # their coefficient of variation, %

    def count(self, outcome: str) -> int:
        return sum(1 for r in self.rows if r.outcome == outcome)

    @property
    def cost(self) -> float:
        return figures.session_cost((r.exp for r in self.rows), profiles=self.profiles)

    @property
    def finished(self) -> int:
        return self.count(KEPT) + self.count(DISCARDED) + self.count(FAILED)

    @property
    def keep_rate(self) -> float | None:
        return self.count(KEPT) / self.finished if self.finished else None

    @property
    def kept(self) -> list[Row]:
        """The kept experiments, in the order of their commits on the branch."""
        return sorted((r for r in self.rows if r.position is not None), key=lambda r: r.position or 0)

    @property
    def total_pct(self) -> float:
        return stats.pct(self.total_log)

    @property
    def total_interval(self) -> tuple[float | None, float | None]:
        """The total gain's confidence interval in percent (None, None while nothing is kept)."""
        return self.total_low_pct, self.total_high_pct

    @property
    def baseline_label(self) -> str:
        """Where the baseline comes from, with its noise: start_session's validation runs of the start."""
        if self.baseline is None:
            return "not measured yet"
        noise = f", noise {self.baseline_noise_pct:.1f}%" if self.baseline_noise_pct is not None else ""
        return (f"{self.baseline:.6g} (start_session's {self.baseline_runs} validation runs of the start "
                f"{self.config.start_commit[:12]}{noise})")

    @property
    def head_label(self) -> str:
        """The primary metric at the head, each figure saying how it was obtained."""
        parts = []
        total = self.session_total
        if total is not None:
            cmp = total.primary(self.config.metric)
            mean = (cmp.get("candidate") or {}).get("mean")
            value = f"{mean:.6g} " if mean is not None else ""
            parts.append(f"measured {value}({_pct(cmp.get('delta_pct'))}, {_level(cmp.get('ci_level'))} CI "
                         f"{_pct(cmp.get('ci_low_pct'))} to {_pct(cmp.get('ci_high_pct'))}; the head against the "
                         f"start, source='session', {cmp.get('n_pairs', 0)} pairs)")
        if self.head_value is not None and self.kept:
            parts.append(f"estimated {self.head_value:.6g} (the baseline times the {len(self.kept)} kept "
                         "experiment(s)' changes, chained)")
        return "; ".join(parts) or "no change kept yet"

    @property
    def head_value(self) -> float | None:
        """The primary metric at the session head, estimated from the baseline and the total gain."""
        return None if self.baseline is None else self.baseline * math.exp(self.total_log)

    @property
    def session_total(self) -> Row | None:
        """The latest measurement of the session head against its start, end to end (source='session')."""
        return next((r for r in reversed(self.rows) if r.launch.source == "session" and r.verdict is not None), None)

    @property
    def session_claim(self) -> str:
        """What the latest measured total showed of each objective's tolerance (the session's claim), or that
        it was not measured yet."""
        total = self.session_total
        claims = [str(m["claim"]) for m in (total.metrics.values() if total else []) if m.get("claim")]
        if total is None:
            return "session total not yet measured (launch_experiment(source='session') proves the tolerances)"
        return "; ".join(claims) or f"session total {total.verdict}"

    @property
    def best(self) -> Row | None:
        """The winner (improved, checks passed) with the largest change of the primary metric."""
        metric, sign = self.config.metric, 1.0 if self.config.direction == "higher" else -1.0
        winners = [r for r in self.rows if r.winner and r.primary(metric).get("delta_pct") is not None]
        return max(winners, key=lambda r: sign * r.primary(metric)["delta_pct"], default=None)


def load(repo_path: str) -> SessionData:
    """Read the session of the repository at `repo_path` (any folder inside it) and do its accounting."""
    root = Path(gitops.open_repo(repo_path).working_dir)
    if not (root / ".autoresearch").is_dir():
        raise StateError(f"{root} has no .autoresearch/ directory: no session ran there. Pass the repository "
                         "where start_session ran (or run start_session first)")
    config = load_config(root)
    if config is None:
        raise StateError(f"{root}/.autoresearch/config.json is missing: the session was never started there; "
                         "run start_session first")
    view = Ledger(state_dir(root) / "ledger.jsonl").view()
    commits, note = _branch_commits(root, config)
    data = _fold(root, config, view, commits, note)
    data.notes = session_notes.read(root, limit=None)
    return data


@dataclass
class _Link:
    """One step of the session head's chain: a commit and the experiments whose effect it carries."""

    sha: str
    ts: float
    experiments: list[ExperimentState]


def _fold(root: Path, config: SessionConfig, view: LedgerView, commits: list[KeptCommit],
          note: str | None) -> SessionData:
    mine = sorted((e for e in view.experiments.values() if e.launch.session_id == config.session_id),
                  key=lambda e: e.launch.ts)
    measured = {e.experiment_id: measure(e, config) for e in mine}
    warnings = list(view.warnings)
    chain = _chain(config, mine, commits, warnings)
    if note:
        warnings.append(note + "; the total is chained from the ledger's commit records instead")
        chain = [_Link(e.commit.commit, e.commit.ts, [e])
                 for e in sorted((e for e in mine if e.commit), key=lambda e: e.commit.ts if e.commit else 0.0)
                 if e.commit]
    metric = config.metric
    # The session head after each commit of the branch: its log-ratio vs the start.
    level_of: dict[str, float] = {config.start_commit: 0.0}
    placed: dict[str, tuple[int, float]] = {}  # experiment id -> (position on the branch, head level after)
    errors: list[tuple[float, int]] = []
    level = 0.0
    for position, link in enumerate(chain):
        for exp in link.experiments:
            shown = measured[exp.experiment_id]
            level += figures.chained_log([shown.comparison(metric).get("delta_pct")])
            if shown.error is not None:
                errors.append(shown.error)
        for exp in link.experiments:
            placed[exp.experiment_id] = (position, level)
        level_of[link.sha] = level
    for exp in mine:
        if exp.commit and exp.experiment_id not in placed:
            warnings.append(f"experiment {exp.experiment_id} ({exp.title!r}) was committed as "
                            f"{exp.commit.commit[:12]}, which is no longer on {config.branch} (reset or "
                            "rewritten?): it is not counted as kept")
    warnings += _provenance_warnings(mine, measured)
    warnings += figures.unconfined_warning(mine)
    # For an experiment whose base commit left the branch: the head as it was when it was launched.
    times = list(itertools.accumulate((link.ts for link in chain), max))
    rows = []
    for index, exp in enumerate(mine, start=1):
        before = bisect.bisect_right(times, exp.launch.ts)
        fallback = level_of[chain[before - 1].sha] if before else 0.0
        shown = measured[exp.experiment_id]
        row = Row(index, exp, shown, _outcome(exp, shown, exp.experiment_id in placed),
                  level_of.get(exp.launch.base_commit, fallback))
        row.position, row.head_level = placed.get(exp.experiment_id, (None, None))
        cmp = row.primary(metric)
        if cmp.get("delta_pct") is not None:
            row.level = row.base_level + _log(cmp["delta_pct"])
            if cmp.get("ci_low_pct") is not None and cmp.get("ci_high_pct") is not None:
                row.level_low = row.base_level + _log(cmp["ci_low_pct"])
                row.level_high = row.base_level + _log(cmp["ci_high_pct"])
        rows.append(row)
    low, high, total_level, basis = _total_interval([r for r in rows if r.position is not None], metric, level, errors,
                                             1 - config.alpha)
    warnings += _short_total(rows, metric, config.direction, chain, low, high, total_level)
    machines = sorted({_machine(e) for e in mine if e.result})
    baseline, runs, noise = _baseline(config, view)
    return SessionData(root, config, rows, baseline, level, low, high, total_level, basis,
                       commits=commits, machines=machines, warnings=warnings,
                       profiles=[p for p in view.profiles if p.session_id == config.session_id],
                       baseline_runs=runs, baseline_noise_pct=noise)


def _short_total(rows: list[Row], metric: str, direction: str, chain: list[_Link], low: float | None,
                 high: float | None, level: float) -> list[str]:
    """The warning for a session total, measured at the head, that falls clearly short of what the kept
    experiments add up to (both intervals apart, on the worse side): a kept gain that is not there end to end.
    A baseline that ran slower than it is makes such a gain: a machine busier during that experiment, or code
    a winner brought in that runs slower when it is the baseline (a side a job can still tell: when its tree
    was built, or whether its build may store into the compiler cache). Selection alone overstates the chained
    total by about one standard error, not by two intervals' width."""
    head = chain[-1].sha if chain else None
    total = next((r for r in reversed(rows) if r.launch.source == "session" and r.verdict is not None), None)
    if total is None or head is None or total.exp.launch.candidate_commit != head or low is None or high is None:
        return []
    cmp = total.primary(metric)
    m_low, m_high, m_level = cmp.get("ci_low_pct"), cmp.get("ci_high_pct"), cmp.get("ci_level")
    if m_low is None or m_high is None:
        return []
    short = m_high < low if direction == "higher" else m_low > high
    if not short:
        return []
    m_shown = f"{cmp.get('delta_pct'):+.2f}% ({f'{m_level:.0%} ' if m_level else ''}CI {m_low:+.2f}% to {m_high:+.2f}%)"
    return [f"the session total ({total.exp.experiment_id}, the head against the start) measured {metric} "
            f"{m_shown}, clearly short of what the kept experiments add up to ({level:.0%} CI {low:+.2f}% to "
            f"{high:+.2f}%): a kept gain is not there end to end. A baseline that ran slower than it is makes one (a "
            "busier machine during that experiment, or code a winner brought in that runs slower as the baseline): "
            "review each kept experiment's diff for what explains its gain before trusting it"]


def _total_interval(kept: list[Row], metric: str, total_log: float, errors: list[tuple[float, int]],
                    confidence: float) -> tuple[float | None, float | None, float, str]:
    """The total gain's interval in percent and its level. One kept experiment: its own interval at its own level
    (the total is its figure; a recorded comparison without a level was taken at the session's). More, or one
    whose record holds no interval: their standard errors combined at `confidence` around the chained
    `total_log`."""
    own = kept[0].primary(metric) if len(kept) == 1 else {}
    if own.get("ci_low_pct") is not None and own.get("ci_high_pct") is not None:
        return (own["ci_low_pct"], own["ci_high_pct"], float(own.get("ci_level") or confidence),
                f"the one kept experiment's own, {kept[0].exp.experiment_id}")
    half = stats.combined_half_width(errors, confidence) if kept else None
    if half is None:
        return None, None, confidence, ""
    return (stats.pct(total_log - half), stats.pct(total_log + half), confidence,
            f"combined from the {len(kept)} kept experiments' standard errors, each from its own samples and "
            "design, assuming independent errors")


def _baseline(config: SessionConfig, view: LedgerView) -> tuple[float | None, int, float | None]:
    """The one baseline every page and summary shows: what start_session measured at the session's start
    (the latest validation of the start commit: a session restarted with other settings, e.g. fewer
    threads, is validated again; else the first validation), as (mean, runs, noise %). An experiment's own
    baseline runs are its figures, never the session's baseline."""
    mine = [s for s in view.sessions if s.session_id == config.session_id and s.baseline.get(config.metric)]
    at_start = [s for s in mine if s.head == config.start_commit]
    chosen = at_start[-1] if at_start else (mine[0] if mine else None)
    if chosen is None:
        return None, 0, None
    values = [float(v) for v in chosen.baseline[config.metric]]
    mean = math.fsum(values) / len(values)
    sd = statistics.stdev(values) if len(values) > 1 else None
    return mean, len(values), None if sd is None or not mean else round(100 * sd / abs(mean), 2)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:+.2f}%"


def _level(value: float | None) -> str:
    return "?" if not value else f"{value:.0%}"


def _provenance_warnings(mine: list[ExperimentState], measured: dict[str, Measured]) -> list[str]:
    """Which figures are not recomputed from samples (and why), and which recorded verdicts the samples
    contradict: one warning per reason, naming the first few experiments."""
    not_recomputed: dict[str, list[str]] = {}
    contradicted: list[str] = []
    for exp in mine:
        shown = measured[exp.experiment_id]
        if shown.source == RECORDED and shown.why:
            not_recomputed.setdefault(shown.why, []).append(exp.experiment_id)
        elif shown.source == SAMPLES and exp.result and exp.analysis.carries("verdict") \
                and shown.verdict != exp.verdict:
            contradicted.append(f"{exp.experiment_id} (recorded {exp.verdict}, its samples give {shown.verdict})")
    out = [f"{why}: {_listed(ids)}: shown as the ledger recorded them, not recomputed from samples"
           for why, ids in not_recomputed.items()]
    if contradicted:
        out.append(f"the ledger's recorded verdict is not what the stored samples give for {_listed(contradicted)}: "
                   "the report shows the verdict recomputed from the samples")
    return out


def _listed(items: list[str]) -> str:
    more = len(items) - MAX_LISTED
    return ", ".join(items[:MAX_LISTED]) + (f" and {more} more" if more > 0 else "")


def _chain(config: SessionConfig, mine: list[ExperimentState], commits: list[KeptCommit],
           warnings: list[str]) -> list[_Link]:
    """The branch's commits with the experiments the ledger records commit_winner making them as; a
    warning for each commit whose effect cannot be counted (made by hand, or rewritten since). Commit
    messages are never parsed for this: their text is not evidence."""
    by_commit = {e.commit.commit: e for e in mine if e.commit}
    chain = []
    for commit in commits:
        exp = by_commit.get(commit.sha)
        commit.experiment_id = exp.experiment_id if exp else None
        if exp is None:
            title = commit.message.splitlines()[0] if commit.message else ""
            warnings.append(f"commit {commit.sha[:12]} ({title!r}) on {config.branch} is not one the ledger records "
                            "commit_winner making (made by hand, or rewritten since): its effect is not in the total")
        chain.append(_Link(commit.sha, commit.ts, [exp] if exp else []))
    return chain


def _outcome(exp: ExperimentState, shown: Measured, on_branch: bool) -> str:
    if on_branch:
        return KEPT
    if exp.status not in FINAL_STATUSES:
        return RUNNING
    if exp.status in _FAILED_STATUSES or shown.verdict in _FAILED_VERDICTS:
        return FAILED
    return DISCARDED


def _machine(exp: ExperimentState) -> str:
    host = exp.outcome.host
    worker = exp.worker or "?"
    detail = ", ".join(str(x) for x in (host.get("hostname"), host.get("cpu_model"),
                                        f"{host['cpus']} CPUs" if host.get("cpus") else None) if x)
    return f"{worker} ({detail})" if detail else str(worker)


def _branch_commits(root: Path, config: SessionConfig) -> tuple[list[KeptCommit], str | None]:
    """The session branch's commits since the start, with messages and diff stats (one git call)."""
    try:
        log = gitops.branch_log(gitops.repo_at(root), config.start_commit, config.branch)
    except (gitops.GitError, InputError) as exc:
        detail = (getattr(exc, "stderr", "") or str(exc)).strip()[:200]
        return [], f"the session branch {config.branch} could not be read from git ({detail})"
    return [KeptCommit(c.sha, c.message, c.stat, c.committed_at) for c in log], None


def _log(pct: float | None) -> float:
    return stats.log_pct(pct) or 0.0



"""A winner's commit message and its trailers, pure functions of its evidence (gathered once at commit), and the
one-line titles that go into it."""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from autoresearch_mcp.errors import InputError
from autoresearch_mcp.experiments import branch, holdout, readouts
from autoresearch_mcp.measure import stats
from autoresearch_mcp.store.config import Platform
from autoresearch_mcp.store.ledger import ExperimentState
from autoresearch_mcp.store.records import Comparison, LaunchRecord
from autoresearch_mcp.worker import decide

_TRAILER_LIKE = re.compile(r"^(\s*)(autoresearch-[\w-]*\s*:)", re.IGNORECASE | re.MULTILINE)
MAX_TITLE = 200


@dataclass(frozen=True)
class Evidence:
    """Everything a winner's commit says, gathered once at commit (committing.py): the experiment and its title,
    what the session judges by (its primary metric and direction), the session's measured total beside a focus
    win's claims, the winners it keeps together, every platform it was checked on (the host first), the hidden
    holdout's verdict and what showed a focus-only win's code running in the program."""

    exp: ExperimentState
    title: str
    metric: str
    direction: str
    session_claim: str | None = None  # beside a focus win's claims (readouts.session_claim)
    members: tuple[ExperimentState, ...] = ()  # the winners it keeps together, as launched
    platforms: tuple[Platform, ...] = ()
    hidden: holdout.HoldoutOutcome | None = None
    focus_seen: str | None = None


def commit_message(ev: Evidence) -> str:
    """A winner's commit message: title, hypothesis, sources, the result with its interval, the other metrics,
    checks, holdout and platforms, and the trailers that tie the commit to its experiment."""
    exp = ev.exp
    launch = exp.launch
    lead = readouts.lead_metric(exp)
    m = exp.metric(lead)
    lines = [ev.title.strip(), "", *_motivation(launch)]
    lines += _result_lines(lead, m, _better(ev), round(100 * (m.ci_level or (1 - _alpha(ev)))))
    if launch.focus:
        layout = exp.analysis.layout_pct
        lines.append(f"Focus: {', '.join(launch.focus)} (the op level; end to end below)"
                     + (f"; untouched controls moved at most {layout:.2f}%" if layout is not None else ""))
        lines.append("Claims: " + "; ".join(_claims(ev)))
    if ev.focus_seen:
        lines.append(f"Focus run by the program: {ev.focus_seen}")
    won = exp.analysis.won
    if won and not launch.focus:
        objectives = launch.objectives or [ev.metric]
        lines.append(f"Won: {', '.join(won)} (objectives: {', '.join(objectives)})")
    turns = _in_turns(launch)
    lines += _other_metrics(exp, lead, turns)
    if launch.combines and (launch.judging or {}).get("carried"):
        lines.append("Kept together on each one's own evidence (each improved on its focus; their changes combined "
                     "and measured once, above: every objective held within its tolerance):")
    elif launch.combines:
        lines.append("Kept together (each improved on its own, then their changes combined and measured once, "
                     "above):")
    for member in ev.members:
        lines += _kept_together(member)
    checks = exp.outcome.checks
    took = checks.duration_s if checks else None
    lines.append("Checks: " + ("passed (autoresearch.checks.sh" + (f", {took:.1f} s)" if took else ")")
                               if _checks_ran(ev) else "none configured (no autoresearch.checks.sh)"))
    if ev.hidden is not None:
        lines.append(f"Holdout: {ev.hidden.verdict} over {ev.hidden.pairs} pairs ("
                     + "; ".join(f"{n} {readouts.figure(h)}" for n, h in sorted(ev.hidden.metrics.items())) + ")")
    host = exp.outcome.host
    if host:
        lines.append(f"Measured on: {exp.worker or 'local'} ({host.get('cpu_model') or '?'}, "
                     f"{host.get('cpus')} CPUs)")
    if turns:
        lines.append(f"Measured as: each pair's two runs at once, in turns of about {decide.TURN_MS} ms of the CPU "
                     f"(each stopped while the other ran), every objective and guard on its CPU time "
                     f"(<name>{decide.CPU_SUFFIX}) or, printed without one, over the wall time of its own turns")
    platform_results = _platform_results(ev)
    if platform_results:
        labels = {p.name: p.label for p in ev.platforms}
        lines += ["Platforms:"] + [f"- {labels[n]}: {text.splitlines()[0] if text else ''}"
                                   for n, text in platform_results.items()]
    lines.append(f"Files: {', '.join(launch.changed_files)}")
    lines += ["", f"{branch.TRAILER}: {exp.experiment_id}",
              "Autoresearch-Result: " + json.dumps(result_trailer(ev), separators=(",", ":"))]
    return "\n".join(lines) + "\n"


def result_trailer(ev: Evidence) -> dict[str, Any]:
    """The `Autoresearch-Result` trailer's object: the lead metric's result with its interval and pairs, the
    verdict, the base; the pairing in turns, a focus win's claims and end-to-end guards, and the platforms'."""
    exp, launch = ev.exp, ev.exp.launch
    lead = readouts.lead_metric(exp)
    m = exp.metric(lead)
    result: dict[str, Any] = {"metric": lead, "direction": _better(ev), "delta_pct": m.delta_pct,
                              "ci_low_pct": m.ci_low_pct, "ci_high_pct": m.ci_high_pct, "confidence": 1 - _alpha(ev),
                              "p_value": m.p_value, "n_pairs": m.n_pairs, "baseline_mean": m.baseline.mean,
                              "candidate_mean": m.candidate.mean, "verdict": exp.verdict, "won": exp.analysis.won,
                              "base_commit": launch.base_commit}
    if _in_turns(launch):
        result["pairing"] = decide.TURNS
    if launch.focus:
        result["claims"] = _claims(ev)
        result["focus"] = list(launch.focus)
        result["end_to_end"] = {name: {"delta_pct": o.delta_pct, "ci_low_pct": o.ci_low_pct,
                                       "ci_high_pct": o.ci_high_pct, "judgement": o.judgement}
                                for name, o in sorted(exp.metrics.items()) if o.role == "guard"}
    platform_results = _platform_results(ev)
    if platform_results:
        result["platforms"] = platform_results
    return result


def _better(ev: Evidence) -> str:
    """Which way the lead metric is better: a focus's own direction, else the session's."""
    launch = ev.exp.launch
    return (launch.judging or {}).get("focus_direction", ev.direction) if launch.focus else ev.direction


def _alpha(ev: Evidence) -> float:
    return stats.load_design(ev.exp.launch.design).alpha


def _in_turns(launch: LaunchRecord) -> bool:
    return (launch.judging or {}).get("pairing") == decide.TURNS


def _claims(ev: Evidence) -> list[str]:
    """A focus win's claims, then the session's measured total."""
    return [*readouts.claims(ev.exp), *([ev.session_claim] if ev.session_claim is not None else [])]


def _checks_ran(ev: Evidence) -> bool:
    checks = ev.exp.outcome.checks
    return bool(checks and checks.ran)


def _motivation(launch: LaunchRecord) -> list[str]:
    """Why the change was tried: its hypothesis and sources, each a paragraph."""
    lines = []
    if launch.hypothesis:
        lines += [_quoted("Hypothesis: " + launch.hypothesis), ""]
    if launch.sources:
        lines += ["Sources:"] + [f"- {_quoted(' '.join(str(s).split()))}" for s in launch.sources] + [""]
    return lines


def _result_lines(lead: str, m: Comparison, better: str, level: int) -> list[str]:
    """The lead metric's means, change and interval at `level`%, and its average and worst runs' change."""
    lines = [
        f"Result: {lead} {m.baseline.mean:.6g} -> {m.candidate.mean:.6g} (means of this experiment's own runs; "
        f"the session's baseline is start_session's) "
        f"({m.delta_pct:+.2f}%, {level}% CI [{m.ci_low_pct:+.2f}%, {m.ci_high_pct:+.2f}%], "
        + (f"p={m.p_value:.2g}, " if m.p_value is not None else "")
        + f"{m.n_pairs} interleaved pairs; {better} is better)"]
    if m.mean_pct is not None:
        lines.append(f"  average run {m.mean_pct:+.2f}% [{m.mean_low_pct:+.2f}%, "
                     f"{m.mean_high_pct:+.2f}%]; worst 5% of runs {m.tail_pct or 0:+.2f}%")
    return lines


def _other_metrics(exp: ExperimentState, lead: str, turns: bool) -> list[str]:
    """Every other metric with a change: its figure, and its role and judgement where it has one."""
    lines = []
    for name, other in sorted(exp.metrics.items()):
        if turns and name.endswith(decide.WALL_SUFFIX):
            continue  # in turns a run's wall clock counts the other side's turns too: it tells nothing
        if name != lead and other.delta_pct is not None:
            margin = other.margin_pct or other.tolerance_pct
            role = (f" ({other.role}" + (f", {other.judgement}" if other.judgement else "")
                    + (f" within {round(margin, 1):g}%" if margin is not None and other.judgement else "")
                    + ")") if other.role else ""
            lines.append(f"  {'end to end' if exp.launch.focus and other.role == 'guard' else 'also'} {name}: "
                         f"{readouts.figure(other)}{role}")
    return lines


def _platform_results(ev: Evidence) -> dict[str, str]:
    """Platform name -> what its run says (the first platform's: this experiment's own); empty for a session of
    one platform."""
    exp = ev.exp
    if len(ev.platforms) < 2:
        return {}
    host = f"{exp.verdict} {exp.metric(readouts.lead_metric(exp)).delta_pct:+.2f}%, checks " + (
        "passed" if _checks_ran(ev) else "none")
    return {ev.platforms[0].name: host,
            **{p.name: str(exp.platforms[p.name].summary if p.name in exp.platforms else None)
               for p in ev.platforms[1:]}}


def _kept_together(exp: ExperimentState) -> list[str]:
    """One winner of a combination as its commit message shows it: its title, hypothesis, sources and its own
    result on the head it was measured on."""
    lead = readouts.lead_metric(exp)
    m = exp.metric(lead)
    out = [f"- {_quoted(exp.title)} (experiment {exp.experiment_id}, on {exp.launch.base_commit[:12]}): {lead} "
           f"{readouts.figure(m)}, {m.n_pairs} pairs"]
    if exp.launch.hypothesis:
        out.append("  " + _quoted("Hypothesis: " + " ".join(exp.launch.hypothesis.split())))
    if exp.launch.sources:
        out.append("  Sources: " + _quoted("; ".join(" ".join(str(s).split()) for s in exp.launch.sources)))
    return out


def one_line(text: str, what: str) -> str:
    """A title: one line of printable text (a newline could forge a commit's trailers)."""
    text = text.strip()
    if not text:
        raise InputError(f"{what} is empty; give a short name")
    if any(unicodedata.category(ch) in ("Cc", "Zl", "Zp") for ch in text):
        raise InputError(f"{what} must be one line without control characters (newlines, tabs, escapes); "
                         "put details in the hypothesis")
    if len(text) > MAX_TITLE:
        raise InputError(f"{what} is {len(text)} characters; keep it to {MAX_TITLE} (details go in the hypothesis)")
    return text


def _quoted(text: str) -> str:
    """Free text for a commit message: a line that looks like one of the server's trailers is quoted, so
    only the server writes Autoresearch-* trailers."""
    return _TRAILER_LIKE.sub(r"\1> \2", text)

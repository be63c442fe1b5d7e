"""The decision rule: from an experiment's samples to each metric's figures and the experiment's verdict.

Standard library only, like the runner that imports it (the same bytes run here and on cloud workers);
the server recomputes every verdict from the stored samples with these same functions.

Randomization. The order of each pair is an independent fair coin: the candidate runs first or second.
Under "no change" (each run would have measured the same had the other tree run in its place), a pair's
contrast (second run minus first, signed by the coin) is a fixed number with a random sign, so a
sign-flip test is exact whatever the noise does between runs: drift, periodic disturbances, steps,
bursts, heavy tails. A first/second-run effect only adds +-e with the coins' signs: no bias, and the
Walsh average of two pairs run in opposite orders cancels it.

Per metric, in log units oriented so that + is better:
- estimate: the median of the Walsh averages of the contrasts (Hodges-Lehmann);
- decision interval: the signed-rank and sign tests inverted at the look's level (their intersection).
  Looks come at planned pair counts; the levels of all looks (and both tests) add up to at most alpha/2 per
  side, so the chance of a false decision over every look is at most alpha/2 by a union bound: exact, for
  any noise process and any correlation between looks;
- average run: the order-adjusted mean of the linear differences, relative to the baseline mean;
- worst runs: the mean of each side's worst 5% of runs (log).

A metric is `improved` when the decision interval excludes 0, the estimate reaches the minimum effect, the
average run agrees (its own interval above 0), the worst runs are not worse beyond the tail tolerance, and
at least `min_pairs_improved` pairs ran (so that a slow path the candidate takes in 1 run of 5 has shown).
It is `regressed` when the typical or the average run is shown worse by the minimum effect; `no_change`
when the equivalence interval (a lower confidence: a futility stop, which spends no alpha) of both the
typical and the average run lies within +-the minimum effect; `noisy` when the budget cannot decide at this
noise; `undecided` otherwise.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import metriclook

# One metric's figures, which the rule reads: its callers take them from here, with the rule.
Pairs = metriclook.Pairs
Plan = metriclook.Plan
MetricLook = metriclook.MetricLook
MeanFit = metriclook.MeanFit
pairs_of, metric_look, mean_bounds = metriclook.pairs_of, metriclook.metric_look, metriclook.mean_bounds
printed_step, float_step = metriclook.printed_step, metriclook.float_step
z_quantile, t_quantile = metriclook.z_quantile, metriclook.t_quantile

RULE = "randomized"  # the `rule` of a plan this module applies


# --- roles and verdicts ----------------------------------------------------------------------------

FOCUS_PREFIX, CONTROL_PREFIX = "focus.", "control."


@dataclass
class MetricRule:
    """How one metric is judged: its role, direction, minimum effect (log) and tolerance (log, guards)."""

    role: str  # objective, guard, focus or control
    direction: str
    min_effect: float
    tolerance: float | None = None  # guards; a session total's objectives (the tolerance it proves)
    ceiling: float | None = None  # a focus experiment's end-to-end guard: its margin grows with the noise up to this
    adaptive: bool = False  # no_change against what the round can resolve (up to EQ_CAP x the minimum effect)


@dataclass(frozen=True)
class Spec:
    """What an experiment is judged on (recorded with its launch): the primary metric and its direction,
    the objectives, the guards with their tolerances and, for a focus experiment, the focus."""

    metric: str
    direction: str
    min_effect: float  # fraction, e.g. 0.01
    objectives: list[str] = field(default_factory=list)
    guards: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {direction, tolerance_pct}
    focus: list[str] = field(default_factory=list)  # names the change acts on (AUTORESEARCH_FOCUS)
    focus_direction: str = "lower"
    focus_min_effect: float = 0.02
    objective_tolerance_pct: dict[str, float] = field(default_factory=dict)  # a focus experiment's objectives
    default_tolerance_pct: float = 2.0
    # Launches recorded before these rules carry none of them, so their verdicts are recomputed as judged then.
    guard_ceiling_pct: float | None = None  # focus: an end-to-end slowdown of this or more is always refused
    adaptive_equivalence: bool = False  # no_change within what the round can resolve, stated as a number
    prove_tolerance: bool = False  # the session's total: each objective is shown within its tolerance
    # The least share of a bench run's time that each improving metric's timed work takes (outside_refutes):
    # a metric not listed whose name says it is a time or a rate (TIMED_NAME) counts at `default_harness_share`;
    # any other (a score, a size, a focus metric that an op benchmark times for a fixed budget) is not checked.
    harness_share: dict[str, float] = field(default_factory=dict)
    default_harness_share: float = 0.25
    processes_per_sample: int = 1  # how the runner measures: each sample the median of this many bench runs
    pairing: str = "sequential"  # how a pair's two runs share the machine: one after the other, or in turns
    shown_directions: dict[str, str] = field(default_factory=dict)  # metrics measured, not judged: shown this way
    threads: int = 1  # the threads the session runs (0: all the machine's): several, and the wall time decides
    turn_clock: str = "cpu"  # in turns, a time or rate judged on its CPU form (cpu) or its own turns' wall (wall)
    # Winners kept together that each won on its focus: their own evidence carries the win, and the combination
    # is judged as each of them was end to end: every objective a guard, held within its tolerance (improved then)
    carried: bool = False
    # What start_session's own runs showed each metric to be (a run alone, one at half duty): "time" (a time of the
    # work: twice as long at half duty), "rate" (half as high), else "steady". A time or a rate is held to the
    # harness's own time of the runs whatever its name says (`timed`).
    kinds: dict[str, str] = field(default_factory=dict)
    # The share of each run's wall time that a time or a rate times, as start_session's own runs showed it (its
    # seconds over the run's): the harness's time must show a claimed change by that share, at the claim's estimate
    measured_share: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Spec:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def timed(self, name: str) -> bool:
        """Whether `name` is a time or a rate of the bench's work: so start_session's own runs showed it, or its name
        says it (TIMED_NAME); a focus or control metric is the op benchmark's own."""
        if name.startswith((FOCUS_PREFIX, CONTROL_PREFIX)):
            return False
        return self.kinds.get(name) in (TIME, RATE) or bool(TIMED_NAME.search(name))

    @property
    def objective_names(self) -> list[str]:
        return list(self.objectives) or [self.metric]

    def required(self) -> list[str]:
        """Every metric each run must print, the primary first (a focus run must also print a focus.* metric)."""
        return list(dict.fromkeys([self.metric, *self.objective_names, *self.guards]))

    def rules(self, names: list[str]) -> dict[str, MetricRule]:
        """How each of `names` (the metrics the runs printed) is judged; names not judged are left out."""
        out: dict[str, MetricRule] = {}
        adaptive = self.adaptive_equivalence
        for name in names:
            guard = self.guards.get(name)
            pct = self.objective_tolerance_pct.get(name, self.default_tolerance_pct)
            if self.focus and name.startswith(FOCUS_PREFIX):
                out[name] = MetricRule("focus", self.focus_direction, math.log1p(self.focus_min_effect),
                                       adaptive=adaptive)
            elif self.focus and name.startswith(CONTROL_PREFIX):
                out[name] = MetricRule("control", self.focus_direction, math.log1p(self.focus_min_effect))
            elif guard is not None:
                tolerance = math.log1p(float(guard["tolerance_pct"]) / 100)
                out[name] = MetricRule("guard", str(guard["direction"]), tolerance, tolerance)
            elif name in self.objective_names and (self.focus or self.carried):
                ceiling = None if self.guard_ceiling_pct is None else math.log1p(self.guard_ceiling_pct / 100)
                out[name] = MetricRule("guard", self.direction, math.log1p(pct / 100), math.log1p(pct / 100),
                                       ceiling=ceiling)
            elif name in self.objective_names:
                out[name] = MetricRule("objective", self.direction, math.log1p(self.min_effect),
                                       math.log1p(pct / 100) if self.prove_tolerance else None, adaptive=adaptive)
        return out


@dataclass
class Judgement:
    """One metric's figures and what they mean for the experiment."""

    look: MetricLook
    rule: MetricRule
    verdict: str  # improved / regressed / no_change / noisy / undecided / invalid
    judgement: str | None  # objective and focus: improved / regressed / held; guard: held / regressed / undecided
    reason: str | None = None  # why a metric whose typical run improved is not `improved`
    claim: Claim | None = None  # a guard's, or a session total objective's: what was shown of it, at which level


@dataclass
class Decision:
    """The experiment at n pairs: every judged metric, the verdict and whether it is final."""

    n: int
    verdict: str  # improved / regressed / no_change / noisy / inconclusive / invalid
    final: bool
    metrics: dict[str, Judgement] = field(default_factory=dict)
    won: list[str] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)
    layout: float | None = None  # what the untouched controls moved (log), which a focus win must exceed
    problems: list[str] = field(default_factory=list)
    disagreement: str | None = None  # a focus and the end-to-end objectives that tell different stories
    settled: list[str] = field(default_factory=list)  # claims the outside measure refutes beyond more pairs


POWER_Z = z_quantile(0.2)  # the 80% power pairs_needed plans for
GUARD_POWER_Z = z_quantile(0.1)  # the 90% power a guard's margin plans for (two guards: 81% both)
EQ_CAP = 3.0  # no_change is never judged against more than this many minimum effects


def reach(spread: float, plan: Plan, n_final: int) -> float:
    """The half-width of the decision interval at the last look of n_final pairs, at this spread: the smallest
    change those pairs resolve (the one home of this figure)."""
    k = plan.last_look(n_final)
    level = plan.levels[k] if k is not None else plan.levels[0]
    return z_quantile(level) * spread / math.sqrt(max(n_final, 1))


def equivalence_margin(look: MetricLook, rule: MetricRule, plan: Plan, final_n: int) -> float:
    """What `no_change` is judged against (log): the minimum effect, or, for a rule that adapts to the noise, the
    margin the round's pairs reach with 80% probability when nothing changed (both 80% bounds inside it), if
    that is wider; never more than EQ_CAP minimum effects."""
    if not rule.adaptive or look.spread is None:
        return rule.min_effect
    z = z_quantile(plan.eq_level)
    resolvable = (z + z) * look.spread / math.sqrt(max(final_n, 1)) + look.floor
    return min(EQ_CAP * rule.min_effect, max(rule.min_effect, resolvable))


def metric_verdict(look: MetricLook, rule: MetricRule, plan: Plan, p: Pairs, final_n: int,
                   layout: float = 0.0, start_n: int = 0) -> tuple[str, str | None]:
    """The verdict of one metric against its minimum effect, and, when its typical run improved but the
    metric is not `improved`, why. `final_n`: the last pair count of this round (`noisy` is judged there);
    `start_n`: the pairs earlier rounds measured (a round that continues an experiment is not cut short as
    `noisy` before its end: it was continued to measure a round more)."""
    me = rule.min_effect
    lin = math.expm1(me)
    n, est = look.n, look.estimate
    if look.invalid:
        return "invalid", None
    if est is None:
        return "undecided", None
    why = None
    if look.look == n and look.low is not None and look.high is not None:
        k = plan.look_index(n)
        assert k is not None
        if look.high < 0 and est <= -me:
            return "regressed", None
        mean = mean_bounds(look, plan.levels[k])
        if mean is not None and mean[2] < 0 and mean[0] <= -lin:
            return "regressed", "the average run is worse"
        if look.low > 0 and est >= me:
            if n < plan.min_pairs_improved:
                why = (f"an improvement needs at least {plan.min_pairs_improved} pairs, so that a slow path "
                       "taken by 1 run in 5 has shown")
            elif look.mean_low is None or look.mean_low <= 0:
                why = "the average run is not shown better (the candidate has slow runs or outliers of its own)"
            elif look.tail is not None and look.tail < -plan.tail_tolerance:
                why = (f"its worst {plan.tail_share:.0%} of runs are {math.expm1(-look.tail) * 100:.1f}% worse "
                       "than the baseline's")
            elif look.low <= layout:
                why = (f"the change is within what the untouched controls moved (up to "
                       f"{math.expm1(layout) * 100:.1f}%): layout alone could do it")
            else:
                return "improved", None
    eq = equivalence_margin(look, rule, plan, final_n)
    if (n >= plan.eq_from and look.eq_low is not None and look.eq_high is not None
            and -eq < look.eq_low and look.eq_high < eq):
        mean_eq = mean_bounds(look, plan.eq_level)
        if mean_eq is not None and -math.expm1(eq) < mean_eq[1] and mean_eq[2] < math.expm1(eq):
            return "no_change", None
    if look.spread is not None and n >= min(plan.noisy_from, final_n):
        reachable = reach(look.spread, plan, final_n) + look.floor
        if n >= final_n:
            return ("noisy" if reachable >= me else "undecided"), why
        se = look.spread / math.sqrt(n)
        eq_reach = z_quantile(plan.eq_level) * look.spread / math.sqrt(final_n) + look.floor
        if start_n == 0 and eq_reach >= eq and abs(est) + 2 * se < reachable:
            return "noisy", why  # neither no_change nor a change this round could show is within reach
    return "undecided", why


@dataclass
class Claim:
    """What a guard (or a session total's objective) was shown to be, as numbers (log units, + is better):
    `bound`, the worst change its one-sided bounds (typical and average run) leave, at `level` (log of the
    typical run's, or of the average run's relative bound when lower); `margin`, the slowdown it was judged
    against."""

    judgement: str  # held / regressed / undecided
    bound: float | None
    margin: float
    level: float
    n: int


def guard_margin(look: MetricLook, rule: MetricRule, plan: Plan, final_n: int) -> float:
    """What a guard must exclude (log): its tolerance; for a focus experiment's end-to-end guard (`ceiling`), the
    slowdown this round's pairs can exclude with 90% power when nothing changed, if wider, up to the ceiling."""
    tol = rule.tolerance if rule.tolerance is not None else rule.min_effect
    if rule.ceiling is None or look.spread is None:
        return tol
    resolvable = (z_quantile(plan.guard_level) + GUARD_POWER_Z) * look.spread / math.sqrt(max(final_n, 1)) + look.floor
    return min(rule.ceiling, max(tol, resolvable))


def guard_judgement(look: MetricLook, rule: MetricRule, plan: Plan, final_n: int | None = None) -> Claim:
    """held / regressed / undecided of a metric that must not get worse beyond its margin (`guard_margin`), with
    the worst change its bounds leave. `held` needs both the typical and the average run's one-sided bound
    (guard level) above -margin and, with a ceiling, both bounds at the plan's ceiling level of the look above
    -ceiling (a union bound over every look where a guard may hold: a slowdown of the ceiling or more holds
    with probability at most guard_level, whatever the noise)."""
    margin = guard_margin(look, rule, plan, final_n or plan.budget)
    claim = Claim("undecided", None, margin, plan.guard_level, look.n)
    est = look.estimate
    if look.invalid:
        claim.judgement = "regressed"
        return claim
    if est is None:
        return claim
    mean = mean_bounds(look, plan.guard_level)
    if look.guard_low is not None and mean is not None:
        claim.bound = min(look.guard_low, math.log1p(max(mean[1], -0.999999)))
    tol = rule.tolerance if rule.tolerance is not None else rule.min_effect
    if look.look == look.n and look.high is not None and look.high < 0 and est <= -tol:
        claim.judgement = "regressed"
        return claim
    if look.guard_low is None or look.guard_low <= -margin or mean is None or mean[1] <= -math.expm1(margin):
        return claim
    if rule.ceiling is not None and plan.ceiling_levels:
        at_ceiling = mean_bounds(look, look.ceiling_level) if look.ceiling_level > 0 else None
        if (look.ceiling_low is None or look.ceiling_low <= -rule.ceiling or at_ceiling is None
                or at_ceiling[1] <= -math.expm1(rule.ceiling)):
            return claim
    claim.judgement = "held"
    return claim


def judge(samples: list[dict[str, Any]], spec: Spec, plan: Plan, n: int | None = None,
          final_n: int | None = None, start_n: int = 0) -> Decision:
    """Every judged metric at n pairs (all complete pairs by default) and the experiment's verdict.

    Without a focus: a winner improves an objective, regresses none and holds every guard. With a focus: a
    winner improves a focus metric beyond what the untouched controls moved, and holds every objective and
    guard within its margin (`guard_margin`). A session's total (`prove_tolerance`) also shows each objective
    within its tolerance: it is not final until each is shown held or regressed. A judged metric missing from a
    run makes the experiment invalid. `start_n`: the pairs of the rounds before this one.
    """
    names = sorted({name for s in samples for name in (s.get("metrics") or {})})
    rules = spec.rules(names)
    pairs = {name: pairs_of(samples, name) for name in rules}
    if n is None:
        n = len(pairs[spec.metric]) if spec.metric in pairs else 0
    final = final_n if final_n is not None else plan.budget
    decision = Decision(n, "inconclusive", False)
    looks = {name: metric_look(p, n, rules[name].direction, plan) for name, p in pairs.items()}
    missing = _missing(decision, spec, rules, pairs, looks)
    if missing:
        decision.verdict, decision.final, decision.blocking = "invalid", True, sorted(set(missing))
        return decision
    controls = [looks[name] for name, r in rules.items() if r.role == "control" and len(pairs[name]) >= n]
    if controls:
        known = [max(abs(c.eq_low), abs(c.eq_high)) for c in controls if c.eq_low is not None and c.eq_high is not None]
        decision.layout = max(known) if len(known) == len(controls) else math.inf
    focus = [name for name, r in rules.items() if r.role == "focus"]
    improving = focus or [name for name, r in rules.items() if r.role == "objective"]
    held = [name for name, r in rules.items() if r.role == "guard"]
    for name, rule in rules.items():
        look = looks[name]
        layout = (decision.layout or 0.0) if rule.role == "focus" else 0.0
        verdict, why = metric_verdict(look, rule, plan, pairs[name], final, layout, start_n)
        claim = None
        if name in improving:
            judgement = verdict if verdict in ("improved", "regressed") else "held"
            if rule.tolerance is not None:  # a session total's objective: is it within its tolerance?
                claim = guard_judgement(look, rule, plan, final)
        elif name in held:
            claim = guard_judgement(look, rule, plan, final)
            judgement = claim.judgement
        else:
            judgement = None
        decision.metrics[name] = Judgement(look, rule, verdict, judgement, why, claim)
    refute_by_outside(decision, samples, spec, plan, improving)
    _conclude(decision, improving, held, waiting(decision, samples, spec, plan), focus[0] if focus else spec.metric)
    if spec.carried and not improving and decision.verdict == "inconclusive" and held and not decision.blocking:
        decision.verdict, decision.final = "improved", True  # every objective held: the winners' evidence stands
    if focus:
        decision.disagreement = focus_disagreement(decision, focus[0], spec.objective_names)
    return decision


def _missing(decision: Decision, spec: Spec, rules: dict[str, MetricRule], pairs: dict[str, Pairs],
             looks: dict[str, MetricLook]) -> list[str]:
    """The judged metrics missing from a run or invalid at `decision.n` pairs (any makes the experiment invalid)."""
    n = decision.n
    missing = [name for name in spec.required() if name not in pairs or len(pairs[name]) < n]
    if spec.focus and not any(r.role == "focus" for r in rules.values()):
        decision.problems.append(f"no {FOCUS_PREFIX}* metric printed although AUTORESEARCH_FOCUS was set")
        missing.append(FOCUS_PREFIX + "*")
    missing += [name for name, r in rules.items() if r.role == "focus" and len(pairs[name]) < n]
    missing += [name for name, look in looks.items() if look.invalid and rules[name].role != "control"]
    return missing


def _conclude(decision: Decision, improving: list[str], held: list[str], waited: list[str], lead_name: str) -> None:
    """The experiment's verdict from its judged metrics: what won, what blocks, and whether it is final.
    `waited`: what the runs' own wall time refuses (waiting); `lead_name`: the metric whose noise makes it noisy."""
    judged = decision.metrics
    decision.won = [name for name in improving if judged[name].verdict == "improved"]
    decision.blocking = [name for name in held if judged[name].judgement in ("regressed", "undecided")]
    regressed = ([name for name in improving if judged[name].verdict == "regressed"]
                 + [name for name in held if judged[name].judgement == "regressed"] + waited)
    verdicts = {judged[name].verdict for name in improving}
    lead = judged.get(lead_name)
    if regressed:
        decision.verdict = "regressed"
        decision.blocking = sorted(set(decision.blocking) | set(regressed))
    elif decision.won and not decision.blocking:
        decision.verdict = "improved"
    elif decision.won:
        decision.verdict = "inconclusive"  # a metric improved, but a guard is not yet shown to have held
    elif verdicts == {"no_change"}:
        decision.verdict = "no_change"
    elif lead is not None and lead.verdict == "noisy":
        decision.verdict = "noisy"
    decision.final = decision.verdict in ("improved", "regressed", "no_change", "noisy")
    if decision.verdict == "inconclusive" and decision.settled and not decision.won \
            and all(judged[name].verdict != "undecided" or name in decision.settled for name in improving):
        decision.verdict, decision.final = "invalid", True
        decision.problems.insert(0, f"{SETTLED} the harness's own measure of the same runs refutes the claim of "
                                    f"{', '.join(decision.settled)} at {decision.n} pairs (below)")
    claims = [j.claim for j in judged.values() if j.rule.role != "guard" and j.claim is not None]
    if claims and decision.verdict != "regressed":
        # a session's total goes on until every objective's tolerance is shown held too (or one regressed)
        if any(c.judgement == "regressed" for c in claims):
            decision.verdict, decision.final = "regressed", True
        elif not all(c.judgement == "held" for c in claims):
            decision.verdict, decision.final = "inconclusive", False  # measure it further: pairs_to_hold


def focus_disagreement(decision: Decision, focus: str, objectives: list[str]) -> str | None:
    """When the focus moved (improved or regressed at the op) while every end-to-end objective is shown not to
    have moved beyond its tolerance, or an objective moved beyond its tolerance while the focus did not: what
    each showed. Neither refuses anything (a small op's win need not show end to end); it tells the agent
    that the op benchmark's case and the program may not be running the same code, or not at the same weight."""
    f = decision.metrics.get(focus)
    ends = [(name, decision.metrics[name]) for name in objectives if name in decision.metrics]
    if f is None or not ends or f.look.estimate is None:
        return None

    def pct(j: Judgement) -> str:
        sign = 1.0 if j.rule.direction == "higher" else -1.0
        est = j.look.estimate or 0.0
        return f"{math.expm1(sign * est) * 100:+.1f}%"

    def flat(j: Judgement) -> bool:
        tol = j.rule.tolerance if j.rule.tolerance is not None else j.rule.min_effect
        return j.look.eq_low is not None and j.look.eq_high is not None and -tol < j.look.eq_low \
            and j.look.eq_high < tol

    def moved(j: Judgement) -> bool:
        tol = j.rule.tolerance if j.rule.tolerance is not None else j.rule.min_effect
        return j.look.look == j.look.n and j.look.low is not None and j.look.high is not None \
            and j.look.estimate is not None and (j.look.low > 0 or j.look.high < 0) and abs(j.look.estimate) >= tol

    ended = ", ".join(f"{name} {pct(j)}" for name, j in ends)
    if f.verdict in ("improved", "regressed") and all(flat(j) for _, j in ends):
        return (f"the focus and the program disagree: {focus} {f.verdict} {pct(f)} at the op while end to end "
                f"{ended} did not move beyond tolerance (the op's share of the run is small, or the op "
                "benchmark's case runs other code than the program at its shapes)")
    shown = [(name, j) for name, j in ends if moved(j)]
    if shown and (f.verdict == "no_change" or flat(f)):
        return (f"the focus and the program disagree: end to end {', '.join(f'{n} {pct(j)}' for n, j in shown)} "
                f"moved beyond tolerance while {focus} did not ({pct(f)}): the change acts beyond its focus")
    return None


# --- the harness's own measure: time taken from outside the bench, which no candidate reaches ----------

HARNESS_PREFIX = "harness."
HARNESS_WALL, HARNESS_CPU = "harness.wall_s", "harness.cpu_s"  # seconds per sample, lower is better
# The work a run says it did (`METRIC ops=<items, iterations, bytes>`): the harness's outside measures per unit of
# it (harness.*_per_op) are what a claim is held to, so a bench that runs for a fixed time can be checked too.
WORK, PER_OP = "ops", "_per_op"
SETTLE_PAIRS = 10  # a refutation by the outside measure that more pairs cannot change ends the experiment from here
# A metric whose name says it is a time or a rate of the bench's work (ms_per_row, rows_per_s, tg_tps,
# latency_us): the one kind outside_refutes checks unless the session's harness_share names it.
TIME, RATE, STEADY = "time", "rate", "steady"  # what a metric showed itself to be (Spec.kinds)
TIMED_NAME = re.compile(r"(?:^|[._/-])(?:s|ms|us|ns|sec|secs|seconds|time|latency|tps|fps|qps|rps|throughput)$"
                        r"|_per_(?:s|sec|second)$|(?:^|[._/-])per_s$", re.IGNORECASE)


# --- pairs in turns: both runs of a pair at once, each given the CPU in short turns while the other is stopped ----

SEQUENTIAL, TURNS = "sequential", "turns"
PAIRINGS = (SEQUENTIAL, TURNS)
TURN_MS = 20  # a side's turn on the CPU: far shorter than a neighbour's burst, so the burst falls on both sides
CPU_SUFFIX, WALL_SUFFIX = ".cpu", ".wall"  # <name>.cpu: the bench's <name> measured on CPU time


def in_turns(values: dict[str, float], judged: list[str], scalable: bool = False,
             timed: Callable[[str], bool] | None = None) -> tuple[dict[str, str], list[str]]:
    """The names of one run's metrics as a pair in turns judges them (judged name -> the name the bench printed),
    and what makes the run unusable so.

    A stopped side's wall clock runs on while the other has its turn, so each judged metric is read from its
    CPU-time form (`<name>.cpu`, which a stop does not inflate); the wall-clock value is kept as `<name>.wall`
    (measured, not judged). An objective or guard printed without its CPU form is judged over the wall time of
    its own turns where it is a time or a rate (TIMED_NAME) and `scalable` (the harness knows that share of the
    run: turn_values), and cannot be judged otherwise. A focus or control metric without one is taken as
    printed (an op benchmark that times CPU, as the llama.cpp recipe's does)."""
    names = {name: name for name in values}
    problems = []
    for name in judged:
        if name + CPU_SUFFIX not in values:
            is_timed = timed(name) if timed is not None else bool(TIMED_NAME.search(name))
            if not name.startswith((FOCUS_PREFIX, CONTROL_PREFIX)) and not (scalable and is_timed):
                problems.append(f"metric {name!r} has no {name + CPU_SUFFIX!r} beside it: a pair in turns judges "
                                f"{name} on CPU time (a stopped side's wall clock runs on), so the bench must print "
                                f"METRIC {name + CPU_SUFFIX}=<{name} measured on CPU time>, or name it as a time "
                                "or a rate (t_ms, items_per_s...), which the harness scales to the side's own turns")
            continue
        if name in values:
            names[name + WALL_SUFFIX] = name
        names[name] = name + CPU_SUFFIX
        del names[name + CPU_SUFFIX]
    return names, problems


def turn_values(values: dict[str, float], judged: list[str], own_share: float | None,
                directions: dict[str, str], wall: bool = False,
                timed: Callable[[str], bool] | None = None) -> tuple[dict[str, tuple[str, float]], list[str]]:
    """One run's metrics as a pair in turns judges them (in_turns): judged name -> (the name printed, the factor
    its value is taken at), and what makes the run unusable. A judged time or rate printed without its CPU form is
    taken over the run's own turns: `own_share` is the share of the run's wall time that was its own turns (the
    harness's measure), so a time is scaled by it and a rate by its inverse, whether the bench did fixed work (its
    clock counted the other side's turns) or ran for a fixed time (it did its work in its own share of that time);
    the figure as printed is kept as `<name>.wall`. With `wall` (a session whose runs keep several CPUs busy:
    validation.turn_clock), a time or rate is so taken even where its CPU form is printed, which is kept as
    measured. The claim is still held to the harness's own measures (outside_refutes)."""
    names, problems = in_turns(values, judged, scalable=own_share is not None and own_share > 0, timed=timed)
    out = {n: (o, 1.0) for n, o in names.items()}
    is_timed = timed if timed is not None else (lambda n: bool(TIMED_NAME.search(n)))
    if own_share and not problems:
        for name in judged:
            if name in values and (wall or name + CPU_SUFFIX not in values) and is_timed(name) \
                    and not name.startswith((FOCUS_PREFIX, CONTROL_PREFIX)):
                out[name] = (name, own_share if directions.get(name) == "lower" else 1 / own_share)
                out[name + WALL_SUFFIX] = (name, 1.0)
                if name + CPU_SUFFIX in values:
                    out[name + CPU_SUFFIX] = (name + CPU_SUFFIX, 1.0)
    return out, problems


def turn_judged(values: dict[str, float], spec: Spec) -> list[str]:
    """The metrics of a run that a pair in turns reads from their CPU-time form: every judged one it printed,
    the focus and controls among them."""
    required = spec.required()
    return [*required, *(n for n in values if n.startswith((FOCUS_PREFIX, CONTROL_PREFIX)) and n not in required
                         and not n.endswith(CPU_SUFFIX))]


def outside_need(look: MetricLook, share: float, measured: bool = False) -> float:
    """The least change (log, of the run time) the outside measure must show for `look`'s claimed change, where
    the timed work is `share` of each run, whatever the bench's shape: its estimate where the share was measured
    (start_session's own runs: Spec.measured_share), else, the share a guess, the least change the claim's interval
    allows."""
    claimed = look.estimate if measured else look.low
    assert claimed is not None
    return -math.log1p(share * math.expm1(-claimed)) if share > 0 else 0.0


def outside_settled(look: MetricLook, share: float, wall: MetricLook | None, cpu: MetricLook | None,
                    measured: bool = False, threads: int = 1) -> bool:
    """Whether a refutation (outside_refutes) is one more pairs cannot change: at SETTLE_PAIRS or more, the outside
    measure that decides (the CPU time for one thread where there is one; the wall time for several threads, whose
    win may be better balance at the same CPU time) shows at most half the change the claim needs, its interval
    short of it."""
    o = cpu if threads == 1 and cpu is not None and cpu.estimate is not None else wall
    if look.n < SETTLE_PAIRS or look.low is None or look.estimate is None or o is None or o.estimate is None \
            or o.high is None:
        return False
    need = outside_need(look, share, measured)
    return o.high < need and o.estimate <= need / 2


def outside_refutes(name: str, look: MetricLook, share: float, wall: MetricLook | None,
                    cpu: MetricLook | None, per: str = "", measured: bool = False) -> str | None:
    """Why the outside time of the same runs contradicts `name`'s improvement (look: oriented, at a look), or None.

    A metric that times (or counts the rate of) work inside the bench runs cannot get better while those runs,
    timed from outside, get clearly slower; and where the timed work is at least `share` of each run's time, a
    change of c (log) must shorten the run by at least -log(1 - share + share * exp(-c)), c being the least
    change the metric's interval allows. Clearly slower: its interval below 0 and its estimate at least 1%
    worse; clearly faster: its interval above 0. The wall time decides the direction of the program as the
    user sees it (a change that adds threads may spend more CPU time and still be faster); the CPU time, which a
    neighbour's turn does not inflate, shows the share, unless the wall time already shows it.
    """
    def shown(o: MetricLook | None) -> bool:
        return o is not None and o.look == look.n and o.low is not None and o.high is not None \
            and o.estimate is not None

    def pct(x: float) -> str:
        return f"{math.expm1(-x) * 100:+.1f}%"  # as a change of the time (lower is better)

    def bounds(o: MetricLook) -> str:
        assert o.low is not None and o.high is not None
        return f"[{pct(o.high)}, {pct(o.low)}]"

    if look.low is None or look.estimate is None or not (shown(wall) or shown(cpu)):
        return None
    claim = (f"{name} claims {math.expm1(look.estimate) * 100:+.1f}% better "
             f"(at least {math.expm1(look.low) * 100:+.1f}%)")
    worse = math.log1p(0.01)
    faster = shown(wall) and wall is not None and wall.low is not None and wall.low > 0
    for label, o in (("wall time", wall), ("CPU time", cpu)):
        if label == "CPU time" and faster:
            break
        if shown(o) and o is not None and o.high is not None and o.estimate is not None \
                and o.high < 0 and o.estimate <= -worse:
            return (f"{claim}, but the same runs timed from outside took {pct(o.estimate)} {label}{per} {bounds(o)}: "
                    "the harness's measure moved the other way")
    if share <= 0:
        return None
    need = outside_need(look, share, measured)
    ok_cpu = shown(cpu) and cpu is not None and cpu.high is not None and cpu.high >= need
    ok_wall = faster and wall is not None and wall.high is not None and wall.high >= need
    if ok_cpu or ok_wall or not shown(cpu):
        return None
    assert cpu is not None and cpu.estimate is not None
    return (f"{claim}, but the same runs timed from outside took {pct(cpu.estimate)} CPU time{per} {bounds(cpu)}"
            + (f" and {pct(wall.estimate)} wall time{per} {bounds(wall)}" if shown(wall) and wall is not None
               and wall.estimate is not None else "")
            + f": work that is {'' if measured else 'at least '}{share:.0%} of each run ("
            + ("as start_session's runs measured it" if measured else "harness_share")
            + ") would have made them at least "
            f"{pct(need)}; the harness's measure does not show the claimed change"
            + ("" if per else f" (a bench that runs for a fixed time takes as long whatever the code does: let it "
               f"print the work it did, METRIC {WORK}=<items, iterations or bytes>, and the harness compares its "
               "own time per unit of that work)"))


def refute_by_outside(decision: Decision, samples: list[dict[str, Any]], spec: Spec, plan: Plan,
                      improving: list[str]) -> None:
    """Each improved metric of `improving` that the harness's outside time of the same runs contradicts
    (outside_refutes) is not improved: its judgement holds, its reason and the decision's problems say why."""
    outside: dict[str, MetricLook | None] = {}
    # per unit of the work each run says it did, where every run says it (a fixed-time bench's runs take as long)
    per = PER_OP if all(len(pairs_of(samples, n + PER_OP)) >= decision.n > 0 for n in (HARNESS_WALL,)) else ""
    for name in (HARNESS_WALL, HARNESS_CPU):
        p = pairs_of(samples, name + per)
        outside[name] = metric_look(p, decision.n, "lower", plan, eq=False) if len(p) >= decision.n > 0 else None
    if outside[HARNESS_WALL] is None and outside[HARNESS_CPU] is None:
        return
    for name in improving:
        j = decision.metrics.get(name)
        # an improvement, or a claim of at least the minimum effect not decided yet: refuted, it is settled as soon
        # as the outside measure shows it cannot be (outside_settled)
        claimed = j is not None and (j.verdict == "improved" or (
            j.verdict == "undecided" and j.look.estimate is not None and j.look.estimate >= j.rule.min_effect))
        if j is None or not claimed or name.startswith(HARNESS_PREFIX):
            continue
        # the same for every shape of bench, per unit of work or not: the share the user set, else the one
        # start_session measured, else the default
        measured = name not in spec.harness_share and name in spec.measured_share
        if name in spec.harness_share:
            share = float(spec.harness_share[name])
        elif measured:
            share = float(spec.measured_share[name])
        elif spec.timed(name):
            share = spec.default_harness_share
        else:
            continue  # not a time or a rate of the runs (a score, a size), or an op benchmark's fixed budget
        why = outside_refutes(name, j.look, share, outside[HARNESS_WALL], outside[HARNESS_CPU],
                              " per op" if per else "", measured)
        if why is not None:
            j.verdict, j.judgement, j.reason = "undecided", "held", why
            decision.problems.append(why)
            if outside_settled(j.look, share, outside[HARNESS_WALL], outside[HARNESS_CPU], measured, spec.threads):
                decision.settled.append(name)


SETTLED = "more pairs cannot change this:"
WAIT_MIN = math.log1p(0.01)  # in turns: the least slowdown of a run's own wall time that refuses it


def waiting(decision: Decision, samples: list[dict[str, Any]], spec: Spec, plan: Plan) -> list[str]:
    """In turns ([HARNESS_WALL] or []): whether the runs' own wall time (the wall time of each run's own turns,
    taken by the harness) shows the candidate clearly slower, its interval below 0 and its estimate at least
    WAIT_MIN worse: time that no CPU-time metric counts (a sleep, I/O, a lock), so the experiment regressed
    whatever its CPU time says. A real gain in CPU time never lengthens the run's turns."""
    if spec.pairing != TURNS:
        return []
    p = pairs_of(samples, HARNESS_WALL + PER_OP)  # per unit of the work done, where the runs say it
    if len(p) < decision.n:
        p = pairs_of(samples, HARNESS_WALL)
    look = metric_look(p, decision.n, "lower", plan, eq=False) if len(p) >= decision.n > 0 else None
    if look is None or look.look != look.n or look.high is None or look.low is None or look.estimate is None \
            or look.high >= 0 or look.estimate > -WAIT_MIN:
        return []
    decision.problems.append(
        f"the runs' own wall time (the wall time of each run's own turns, taken by the harness) is "
        f"{math.expm1(-look.estimate) * 100:+.1f}% [{math.expm1(-look.high) * 100:+.1f}%, "
        f"{math.expm1(-look.low) * 100:+.1f}%] longer: time no CPU-time metric counts (a sleep, I/O, a lock)")
    return [HARNESS_WALL]

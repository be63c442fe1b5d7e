"""Pydantic models of every tool's output (inputs are the typed parameters declared in app.py).

Field names are the contract of ../shared/DESIGN.md: other programs read them, so rename nothing.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

Direction = Literal["higher", "lower"]
ExecutorName = Literal["local", "sky"]
Status = Literal[
    "queued", "building", "running", "checking", "done", "failed", "checks_failed", "cancelled", "lost"
]
Verdict = Literal["improved", "regressed", "no_change", "inconclusive", "noisy", "invalid"]
FINAL_STATUSES: frozenset[str] = frozenset({"done", "failed", "checks_failed", "cancelled", "lost"})


def _unset(value: Any) -> bool:
    return value is None or (isinstance(value, list | dict) and not value)


# A field get_experiment's answer leaves out while it has nothing to say (null, or an empty list or map): the
# answer is read at every poll, and most of these are null for a typical experiment. The contract's fields
# (../shared/DESIGN.md) are always there, null or not.
Quiet = Field(exclude_if=_unset)
QuietFloat = Annotated[float | None, Quiet]
QuietStr = Annotated[str | None, Quiet]
QuietNames = Annotated[list[str], Quiet]


# --- session -------------------------------------------------------------------------------------


class MetricSummary(BaseModel):
    """Summary of one metric's samples; every figure can be recomputed from `samples`."""

    n: int
    mean: float | None = None
    median: float | None = None
    stddev: float | None = None
    cv: float | None = Field(None, description="stddev / mean (coefficient of variation)")
    samples: list[float] = Field(default_factory=list, description="get_experiment: only with samples=true")


class BenchRun(BaseModel):
    """One run of `autoresearch.sh bench` as the harness saw it."""

    index: int
    exit_code: int | None
    duration_s: float
    timed_out: bool = False
    raw_metric_lines: list[str]
    parsed: dict[str, float]
    problems: list[str] = Field(default_factory=list)


class ThreadsTrial(BaseModel):
    """start_session's validation runs at one thread count: each judged metric's noise there."""

    threads: int
    noise_pct: dict[str, float] = Field(description="per metric: the runs' coefficient of variation, %")


class StartSessionResult(BaseModel):
    session_id: str
    branch: str
    repo: str
    metric: str
    direction: Direction
    executor: ExecutorName
    resumed: bool = False
    head_commit: str
    baseline: dict[str, MetricSummary] = Field(
        description="per metric: the validation runs' samples, mean and cv"
    )
    raw_metric_lines: list[str] = Field(description="METRIC lines exactly as the benchmark printed them")
    runs: list[BenchRun]
    build_duration_s: float
    spread_pct: float | None = Field(
        None, description="spread of the primary metric over the validation runs, % of the mean"
    )
    templates_created: list[str] = Field(default_factory=list)
    recipe: str | None = Field(None, description="the recipe whose scripts the session uses")
    recipe_suggested: str | None = Field(None, description="a recipe for this kind of project, when no script exists")
    objectives: list[str] = Field(default_factory=list, description="metrics a winner may improve")
    guards: list[str] = Field(default_factory=list, description="metrics a winner must not regress beyond tolerance")
    pairing: Literal["sequential", "turns"] | None = Field(
        None, description="a pair's two runs one after the other, or at once in turns (None: not chosen yet)")
    compiler_cache: str | None = None
    worker: str | None = Field(None, description="sky: the cloud worker that measured the baseline; every "
                                                 "worker of the session gets its instance type")
    warnings: list[str] = Field(default_factory=list)
    next_steps: list[str] = Field(default_factory=list)
    platforms: list[str] = Field(default_factory=list, description="each platform and how it was validated")
    settings: dict[str, str] = Field(
        default_factory=dict, description="what every run is measured with: threads and the benchmark's env "
                                          "(recorded in .autoresearch/config.json)")
    threads_tried: list[ThreadsTrial] = Field(
        default_factory=list, description="thread counts measured to find the steadiest (when threads was unset)")


# --- experiments ---------------------------------------------------------------------------------


class LaunchResult(BaseModel):
    experiment_id: str
    status: Status
    worker: str | None = Field(None, description="assigned when the experiment starts")
    base_commit: str = Field(description="the session head the candidate is measured against")
    candidate_commit: str = Field(description="commit on refs/autoresearch/exp/<id> holding the candidate")
    changed_files: list[str]
    repeats: int | str
    worktree_restored: bool = False
    prior_pairs: int = Field(0, description="pairs pooled from earlier rounds of this experiment")
    reapplies: str | None = Field(None, description="the earlier experiment whose change this one re-applies")
    conflicts: list[str] = Field(
        default_factory=list, description="source=experiments: the winners left out, each with the kept one it "
                                          "changes the same lines as (the message says how to keep them)")
    message: str


class ComparisonResult(BaseModel):
    """Paired comparison of one metric; deltas are the metric's own relative change (candidate vs
    baseline), so for a lower-is-better metric an improvement is negative."""

    baseline: MetricSummary
    candidate: MetricSummary
    delta_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    p_value: float | None = Field(None, description="order-adjusted signed-rank test, scaled for the sequential looks")
    ci_level: QuietFloat = Field(None, description="confidence of the interval: the design's for a decision, "
                                 "lower (equivalence) for no_change")
    n_pairs: int
    verdict: Annotated[Verdict | None, Quiet] = Field(None, description="absent for a metric nobody judges (no role)")
    pairs_needed: Annotated[int | None, Quiet] = Field(
        None, description="when undecided: pairs in all that would decide, 80% power")
    noise_pct: QuietFloat = Field(None, description="per-run noise seen in the pair differences, %")
    resolvable_pct: QuietFloat = Field(None, description="smallest change the budget resolves at this noise, %")
    direction: Annotated[Direction | None, Quiet] = Field(
        None, description="which way is better; absent when not judged")
    role: Annotated[Literal["objective", "guard", "focus", "control"] | None, Quiet] = Field(
        None, description="absent: measured, not judged; focus: what the change acts on; control: untouched work "
        "timed beside it")
    tolerance_pct: QuietFloat = Field(None, description="guards: the regression allowed")
    judgement: Annotated[Literal["improved", "held", "regressed", "undecided"] | None, Quiet] = Field(
        None, description="objectives: improved / held / regressed; guards: held (the interval stays within "
        "tolerance) / regressed / undecided")
    mean_pct: QuietFloat = Field(None, description="the average run's change (ratio of means), order-adjusted")
    mean_low_pct: QuietFloat = None
    mean_high_pct: QuietFloat = None
    tail_pct: QuietFloat = Field(None, description="the change of each side's worst 5% of runs")
    equivalence_pct: QuietFloat = Field(None, description="no_change: no change beyond +- this")
    note: QuietStr = Field(None, description="why not improved, or why noisy")
    measure: QuietStr = Field(None, description="how it was measured: as the bench printed it, or the harness's "
                              "own outside time of each run (harness.*); how many processes a sample")
    bound_pct: QuietFloat = Field(None, description="guards and a session total's objectives: the worst change "
                                "their one-sided bounds leave, % (+ is better), at claim_level")
    margin_pct: QuietFloat = Field(None, description="the slowdown it was judged against, %")
    claim_level: QuietFloat = None
    claim: QuietStr = Field(None, description="what was shown of it, in one line")


class ChecksResult(BaseModel):
    ran: bool
    passed: bool
    exit_code: Annotated[int | None, Quiet] = None
    timed_out: bool = False
    duration_s: QuietFloat = None
    tail: QuietStr = Field(None, description="the last lines the checks printed")
    note: QuietStr = Field(None, description="why they did not run or did not pass, where the harness knows")


class PlatformResult(BaseModel):
    """One platform's part in an experiment: its build, checks and (where measured) verdict."""

    name: str
    executor: ExecutorName
    measured: bool
    emulator: QuietStr = None
    status: str = Field(description="a status, or not_run until the host has a winner")
    worker: QuietStr = None
    build: Annotated[Literal["ok", "failed"] | None, Quiet] = None
    checks: Annotated[ChecksResult | None, Quiet] = None
    verdict: Annotated[Verdict | None, Quiet] = None
    delta_pct: QuietFloat = None
    ci_low_pct: QuietFloat = None
    ci_high_pct: QuietFloat = None
    passed: bool | None = Field(None, description="whether this platform lets the winner through (None: not yet)")
    summary: QuietStr = Field(None, description="the platform's result in one line")
    error: QuietStr = Field(None, description="why the platform could not build, check or measure it")
    cost_usd: QuietFloat = None


class FetchResult(BaseModel):
    experiment_id: str
    title: str
    status: Status
    verdict: Verdict | None = None
    worker: str | None = None
    base_commit: str
    candidate_commit: str
    log_tail: str
    log_path: str
    metrics: dict[str, ComparisonResult] = Field(default_factory=dict)
    harness: QuietStr = Field(None, description="the harness's own outside time of the same runs (harness.*, not "
                              "judged) in one line; with samples=true they are in metrics in full")
    won: QuietNames = Field(default_factory=list, description="objectives that improved")
    blocking: QuietNames = Field(default_factory=list, description="objectives or guards that keep it from winning")
    checks: ChecksResult | None = None
    confidence_level: float | None = Field(None, description="level of the CIs, e.g. 0.98")
    pairs_done: int = 0
    stop_reason: QuietStr = None
    durations_s: Annotated[dict[str, float], Quiet] = Field(default_factory=dict)
    build: Annotated[dict[str, Any], Quiet] = Field(default_factory=dict)
    host: Annotated[dict[str, Any], Quiet] = Field(default_factory=dict)
    noise_cv: QuietFloat = Field(None, description="per-run noise of the primary metric, from the pair differences")
    noise_note: QuietStr = Field(None, description="how noisy and why the budget cannot decide; a bimodal or "
                                 "tail-heavy side")
    focus: QuietNames = Field(default_factory=list, description="what the experiment was judged on, if a focus")
    claims: QuietNames = Field(default_factory=list, description="what was shown, each at its level: the focus, "
                               "each end-to-end guard (this experiment), a session total's tolerances")
    layout_pct: QuietFloat = Field(None, description="focus: the most the untouched controls moved, % (a focus "
                                 "win must exceed it)")
    error: QuietStr = None
    cost_usd: float | None = None
    warnings: QuietNames = Field(default_factory=list)
    next_step: str | None = None
    platforms: Annotated[list[PlatformResult], Quiet] = Field(
        default_factory=list, description="the other platforms of the session (the host is this result itself)")


class HoldoutSummary(BaseModel):
    """The hidden holdout's A/B: its verdict and changes only, never its output."""

    verdict: Literal["held", "regressed"]
    pairs: int
    delta_pct: dict[str, float | None] = Field(default_factory=dict)


class CommitResult(BaseModel):
    commit: str
    branch: str
    message: str
    worktree_updated: bool
    holdout: HoldoutSummary | None = None
    revisit: list[str] = Field(
        default_factory=list, description="experiments ended no_change or inconclusive whose files this commit "
                                          "changed: worth measuring again on the new head")


class CancelResult(BaseModel):
    experiment_id: str
    status: Status
    message: str


class StopWorkersResult(BaseModel):
    released: list[str]
    mode: Literal["stop", "down"]
    message: str
    notes: list[str] = Field(default_factory=list, description="spot clusters downed, disk costs of stopped ones")
    cost_usd: float | None = Field(None, description="what the session's cloud machines cost, launch to down")


class ExperimentSummary(BaseModel):
    experiment_id: str
    title: str
    status: Status
    verdict: Verdict | None = None
    delta_pct: float | None = Field(
        None, description="relative change of the primary metric's own value, % (negative is better when lower is)")
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None
    ci_level: float | None = Field(None, description="confidence of that interval, e.g. 0.98")
    n_pairs: int = 0
    sources: list[str] = Field(default_factory=list)
    kept: bool = False
    commit: str | None = None
    cost_usd: float | None = None
    focus: list[str] = Field(default_factory=list, description="what a focus experiment was judged on")
    focus_delta_pct: float | None = Field(None, description="the focus metric's change, % (its own value)")
    source: str | None = Field(None, description="session: the measured total of the session's commits")
    claims: list[str] = Field(default_factory=list, description="what was shown, each at its level")


class ListExperimentsResult(BaseModel):
    experiments: list[ExperimentSummary]
    best: ExperimentSummary | None = Field(None, description="the largest significant improvement so far")
    session_total: ExperimentSummary | None = Field(
        None, description="the latest measurement of the session head against its start (source='session')")
    session_claim: str | None = Field(
        None, description="what the session's measured total showed of each objective's tolerance, or that it was "
        "not measured yet")
    estimated_total_pct: float | None = Field(
        None, description="the kept commits' estimates chained together, % of the primary metric: compare with "
        "session_total")
    kept: int = Field(description="experiments committed with commit_winner")
    discarded: int = Field(description="finished experiments that were not kept")
    running: int = 0
    cost_usd: float = 0.0
    totals: dict[str, float] = Field(
        default_factory=dict,
        description="seconds spent per phase (prepare, build, bench, checks) and compiler cache hits/misses")
    warnings: list[str] = Field(default_factory=list)
    notes: str | None = Field(None, description="the latest of the session's notes (add_note), to resume from")
    notes_path: str | None = Field(None, description=".autoresearch/notes.md: the whole notes")


class AddNoteResult(BaseModel):
    notes_path: str
    entries: int = Field(description="notes in the file, this one included")


# --- research: search_arxiv, read_paper, survey_forks ----------------------------------------------

ArxivSort = Literal["relevance", "submittedDate", "lastUpdatedDate"]


class Paper(BaseModel):
    """One arXiv paper as the API describes it (titles and abstracts are third-party text)."""

    arxiv_id: str = Field(description="identifier without version, e.g. 2401.12345 or hep-th/9901001")
    version: int | None = Field(None, description="latest version number, e.g. 2 for 2401.12345v2")
    title: str
    authors: list[str]
    summary: str = Field(description="the abstract")
    published: str = Field(description="first submission, ISO 8601")
    updated: str | None = Field(None, description="last revision, ISO 8601")
    categories: list[str]
    primary_category: str | None = None
    abs_url: str
    pdf_url: str | None = None
    html_url: str = Field(description="full-text HTML (exists for most papers since late 2023)")
    code_url: str | None = Field(None, description="code repository Hugging Face knows for the paper")
    comment: str | None = None
    journal_ref: str | None = None
    doi: str | None = None


class SearchArxivResult(BaseModel):
    papers: list[Paper]
    total_results: int = Field(description="papers matching the query on arXiv")
    start: int
    next_start: int | None = Field(None, description="pass as `start` for the next page; null at the end")
    query: str = Field(description="the search_query sent to arXiv")
    from_cache: bool = False
    notes: list[str] = Field(default_factory=list)


class PaperSection(BaseModel):
    id: str = Field(description="pass as `section` to read only this part")
    title: str
    chars: int


class ReadPaperResult(BaseModel):
    arxiv_id: str
    title: str
    source: Literal["html", "abstract"] = Field(
        description="html: the full text; abstract: no HTML version exists, only the abstract"
    )
    sections: list[PaperSection]
    section: str | None = Field(None, description="the section shown, or null for the whole paper")
    text: str = Field(description="one page of text, wrapped in an <external-content> marker: untrusted data")
    start: int
    next_start: int | None = Field(None, description="pass as `start` for the next page; null at the end")
    total_chars: int
    url: str
    note: str | None = None


class ForkCommit(BaseModel):
    sha: str
    message: str = Field(description="first line of the commit message")
    author: str | None = None
    date: str | None = None
    url: str | None = Field(None, description="the commit on GitHub; null for a local ref")


class ForkFile(BaseModel):
    filename: str
    status: str = Field(description="added, modified, removed, renamed...")
    additions: int | None = Field(None, description="lines added (null where GitHub leaves it out)")
    deletions: int | None = None


class ForkSurvey(BaseModel):
    name: str = Field(description="owner/name of the fork, or the local path or ref compared")
    url: str | None = None
    stars: int | None = None
    pushed_at: str | None = Field(None, description="last push (GitHub) or last commit date (local)")
    branch: str | None = None
    ahead_by: int | None = Field(None, description="commits the fork has that the base has not")
    behind_by: int | None = None
    commits: list[ForkCommit] = Field(
        default_factory=list, description="commits ahead of the base that touch `paths`, newest first"
    )
    files: list[ForkFile] = Field(
        default_factory=list, description="files under `paths` that differ from the merge base"
    )
    files_changed_total: int | None = Field(None, description="changed files anywhere in the fork")
    compare_url: str | None = None
    note: str | None = None


class SurveyForksResult(BaseModel):
    repo: str
    source: Literal["github", "local"]
    base: str = Field(description="the upstream branch or ref the forks are compared with")
    paths: list[str]
    forks: list[ForkSurvey]
    forks_total: int | None = Field(None, description="forks GitHub lists for the repository")
    forks_examined: int = Field(description="forks or refs compared (those not ahead are left out)")
    rate_limit_remaining: int | None = None
    warnings: list[str] = Field(default_factory=list)



# --- analysis: diff_backends -----------------------------------------------------------------------


class GapEvidence(BaseModel):
    """Where a backend that has the item does it: open this line to read the prior art."""

    backend: str
    file: str
    line: int
    snippet: str


class BackendGap(BaseModel):
    kind: Literal["fusion", "op"] = Field(description="fusion: an ordered op chain fused in one kernel")
    item: str = Field(description="op token (GGML_OP_ARANGE) or fusion chain of op names (RMS_NORM+MUL)")
    present_in: list[str] = Field(description="backends that have it (a longer fusion chain counts)")
    missing_in: list[str] = Field(description="backends that lack it, the target first")
    evidence: list[GapEvidence] = Field(description="file, line and snippet in each backend that has it")


class IsaUse(BaseModel):
    name: str = Field(description="SIMD/ISA family or GPU matrix feature (AVX2, NEON, SVE, RVV, ...)")
    hits: int
    file: str = Field(description="first use")
    line: int


class BackendInventory(BaseModel):
    name: str
    root: str = Field(description="folder, `ref:path` or `/other/repo:path`")
    files: int
    lines: int
    skipped_files: int = Field(0, description="binary, huge (> 2 MB) or unreadable files")
    skipped_examples: list[str] = Field(default_factory=list)
    ops_count: int
    ops: list[str] = Field(description="first op tokens, alphabetically; ops_count gives the total")
    supports_by_default: bool = Field(
        False, description="its supports-op function accepts every op it does not reject explicitly"
    )
    rejected_ops: list[str] = Field(default_factory=list, description="ops its supports-op rejects outright")
    fusions_count: int
    fusions: list[str] = Field(description="fused op chains, longest first")
    isa: list[IsaUse]
    kernels_count: int
    kernels: list[str] = Field(description="first kernel functions, alphabetically")
    fusion_helpers: list[str] = Field(
        default_factory=list, description="the fusion checks its code calls (ggml_vk_can_fuse...): reuse them")
    built_from: list[str] = Field(
        default_factory=list, description="backends whose sources its build compiles: their ops and fusions count")


class DiffBackendsResult(BaseModel):
    repo: str
    target: str
    op_families: list[str] = Field(description="op enum naming families detected from case labels")
    backends: list[BackendInventory]
    gaps: list[BackendGap] = Field(description="what other backends have and the target lacks, most shared first")
    total_gaps: int
    omitted: int = Field(description="gaps beyond max_gaps")
    omitted_by_kind: dict[str, int] = Field(default_factory=dict)
    files_scanned: int
    lines_scanned: int
    timings_s: dict[str, float] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


# --- analysis: analyze_bounds ----------------------------------------------------------------------

BoundVerdict = Literal["memory_bound", "compute_bound", "latency_bound"]
Precision = Literal["fp32", "fp64"]
MetricUnit = Literal["per_second", "seconds", "milliseconds"]


class PeakFigures(BaseModel):
    """A machine's measured peaks, as the standalone probe (analysis/peak_probe.py) printed them."""

    method: Literal["c", "numpy"] = Field(description="compiled C probe, or the numpy fallback")
    compiler: str | None = None
    flags: str | None = None
    flop_kernel: str
    fallback_reason: str | None = Field(None, description="why the compiled probe was not used")
    host: str
    cpu_model: str
    machine: str = ""
    logical_cpus: int
    threads: int = Field(description="threads behind the all-threads figures")
    vector_bytes: int | None = Field(None, description="SIMD width the C probe was compiled for")
    llc_bytes: int = Field(description="last-level cache, all instances")
    array_bytes: int = Field(description="size of each copy/triad array")
    copy_gb_s: float = Field(description="memory bandwidth of a copy on all threads, GB/s")
    triad_gb_s: float
    copy_gb_s_1t: float
    triad_gb_s_1t: float
    gflop_s_fp32: float
    gflop_s_fp32_1t: float
    gflop_s_fp64: float
    gflop_s_fp64_1t: float
    quick: bool = Field(description="measured in the short mode (smaller arrays, fewer repetitions)")
    other_cpu_load: float | None = Field(
        None, description="CPUs that other processes (or the hypervisor) kept busy during the measurement"
    )
    disturbed: bool = Field(False, description="other work lowered the figures; the next call measures again")
    warnings: list[str] = Field(default_factory=list, description="what limits or disturbed the figures")
    duration_s: float
    measured_at: str
    cached: bool = Field(False, description="read from the cache rather than measured by this call")
    cache_path: str | None = None


class Roofline(BaseModel):
    arithmetic_intensity_flop_per_byte: float | None = Field(None, description="flops_per_unit / bytes_per_unit")
    ridge_point_flop_per_byte: float = Field(
        description="peak_gflop_s / peak_bandwidth_gb_s: below it the memory roof is the lower one"
    )
    limiting_roof: Literal["memory", "compute"] | None = Field(
        None, description="the roof that caps this workload's intensity"
    )
    attainable_gflop_s: float | None = Field(None, description="min(peak, intensity × peak bandwidth)")
    attainable_units_per_second: float | None = Field(
        None, description="the rate at which the lower roof is reached, at these bytes and flops per unit"
    )
    headroom: float | None = Field(
        None, description="attainable / measured rate: the most a change can gain without moving fewer "
        "bytes or doing fewer flops per unit"
    )


class CounterReport(BaseModel):
    available: bool = Field(description="whether perf stat could count hardware events here")
    reason: str | None = Field(None, description="why counters are missing, when they are")
    command: str | None = None
    exit_code: int | None = None
    elapsed_s: float | None = None
    cpus_utilized: float | None = Field(None, description="task-clock / elapsed time (a software counter)")
    cycles: float | None = None
    instructions: float | None = None
    cache_references: float | None = None
    cache_misses: float | None = None
    instructions_per_cycle: float | None = None
    cache_miss_rate: float | None = Field(None, description="cache_misses / cache_references")
    unsupported: list[str] = Field(default_factory=list, description="events perf could not count")
    notes: list[str] = Field(default_factory=list)


class AnalyzeBoundsResult(BaseModel):
    verdict: BoundVerdict
    summary: str
    peak_bandwidth_gb_s: float = Field(description="STREAM-like copy/triad peak for the threads used")
    peak_gflop_s: float = Field(description="vector FMA peak at `precision` for the threads used")
    achieved_bandwidth_gb_s: float | None = Field(None, description="bytes_per_unit × units_per_second")
    achieved_gflop_s: float | None = Field(None, description="flops_per_unit × units_per_second")
    bandwidth_fraction: float | None = Field(None, description="achieved / peak bandwidth")
    compute_fraction: float | None = Field(None, description="achieved / peak GFLOP/s")
    units_per_second: float
    bytes_per_unit: float | None = None
    flops_per_unit: float | None = None
    rate_source: str = Field(description="where units_per_second came from")
    threads: int = Field(description="threads the workload uses; the peaks are scaled to them")
    precision: Precision
    roofline: Roofline
    advice: list[str] = Field(description="the kind of change that can help, given the verdict")
    method: str = Field(description="how the peaks were measured")
    peaks: PeakFigures
    counters: CounterReport
    warnings: list[str] = Field(default_factory=list)



# --- hot spots and passes -------------------------------------------------------------------------


class HotLine(BaseModel):
    file: str = Field(description="source file, relative to the repository when it is inside it")
    line: int
    share_pct: float = Field(description="share of all samples")
    samples: int
    code: str = Field("", description="the source line")


class HotFunction(BaseModel):
    name: str
    dso: str = Field(description="the binary or library holding it")
    share_pct: float = Field(description="share of all samples (self time, without callees)")
    samples: int
    lines: list[HotLine] = Field(default_factory=list, description="its hottest source lines")


class ProfileResult(BaseModel):
    profile_id: str = Field(description="pass it to find_passes to rank findings by these functions")
    build: str = Field(description="baseline (the session head) or the experiment profiled")
    commit: str
    event: str = Field(description="the sampled event (cpu-clock where the machine has no hardware counters)")
    total_samples: int
    functions: list[HotFunction]
    report_path: str = Field(description="the perf report as text (every row; from a cloud worker its hottest)")
    perf_data_path: str = Field(description="on a cloud worker: <worker>:<path there>")
    bench_exit_code: int | None
    worker: str | None = Field(None, description="the cloud worker it ran on (None: this machine)")
    cost_usd: float | None = Field(None, description="the worker's time for this profile, at its price")
    notes: list[str] = Field(default_factory=list)


class PassSite(BaseModel):
    code: str = Field(description="first line of the pass")
    start_line: int
    end_line: int
    access: Literal["read", "write", "update"] = Field(description="what the pass does to the buffer")


class PassFinding(BaseModel):
    function: str
    file: str
    line: int = Field(description="line of the function definition")
    buffer: str = Field(description="the buffer both passes touch: name as written (and where it points)")
    kind: str = Field(description="<first access>_then_<second access>, e.g. write_then_update")
    passes: list[PassSite]
    fusable: bool = Field(description="true when the second pass needs nothing the first one reduced")
    depends_on: list[str] = Field(description="values the second pass needs from the first (a sum, a max)")
    suggestion: str
    hot_share_pct: float | None = Field(None, description="the function's share of the profile's samples")


class FindPassesResult(BaseModel):
    findings: list[PassFinding]
    total_findings: int
    files_scanned: int
    functions_scanned: int
    elapsed_s: float
    notes: list[str] = Field(default_factory=list)


# --- report ----------------------------------------------------------------------------------------


class ReportResult(BaseModel):
    summary: str = Field(description="the session in a few lines: counts, keep rate, total gain with its CI, cost")
    html_path: str = Field(description="self-contained page (chart embedded): open it in a browser")
    chart_path: str = Field(description="progress chart (PNG)")
    tsv_path: str = Field(description="one row per experiment, tab-separated, for notebooks")
    session_id: str
    branch: str = Field(description="the session branch its kept commits are on")
    metric: str
    direction: Direction
    experiments: int = Field(description="experiments launched in the session, including those still running")
    kept: int
    discarded: int
    failed: int = Field(description="failed builds or runs, failed checks, cancelled, lost, noisy or invalid")
    running: int
    total_gain_pct: float | None = Field(
        None, description="change of the primary metric from the session start to its head (the metric's sign)")
    total_gain_ci_low_pct: float | None = None
    total_gain_ci_high_pct: float | None = None
    total_gain_ci_level: float | None = Field(
        None, description="confidence of that interval: the one kept experiment's own level, else the session's")
    cost_usd: float
    secondary_metrics_available: list[str] = Field(
        default_factory=list, description="other measured metrics, for `secondary_metrics`")
    warnings: list[str] = Field(default_factory=list)


class ReviewBranch(BaseModel):
    name: str = Field(description="branch from the session start holding one independent change")
    tip: str
    commits: list[str] = Field(description="the replayed commits, oldest first")
    titles: list[str]
    experiments: list[str] = Field(description="experiment ids named in the commits' trailers")
    files: list[str]


class FinalizeResult(BaseModel):
    start_commit: str
    head: str = Field(description="the session head the branches reproduce")
    branches: list[ReviewBranch]
    grouped: list[str] = Field(description="why some commits had to stay together on one branch")
    verified: bool = Field(description="merging all branches onto the start gives exactly the head's tree")
    verification: str
    removed: list[str] = Field(default_factory=list, description="stale review branches of an earlier run")
    message: str

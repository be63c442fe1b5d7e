"""What forks changed in the hot path: GitHub forks ranked by activity and stars, or local clones
and refs compared with git, each reduced to the commits and files under the given paths."""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from autoresearch_mcp.errors import ExternalError, InputError
from autoresearch_mcp.git import gitops
from autoresearch_mcp.models import ForkCommit, ForkFile, ForkSurvey, SurveyForksResult
from autoresearch_mcp.research.http import Clock, HttpClient, shared_client
from autoresearch_mcp.settings import Settings

MAX_LIMIT = 20
MAX_COMMITS = 20  # per fork: enough to see what it did, small enough for the agent's context
MAX_FILES = 50
_GITHUB_TTL_S = 3600.0
_REPO_RE = re.compile(r"^(?:https?://github\.com/)?([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$")


def survey(
    settings: Settings,
    repo: str,
    paths: list[str] | None = None,
    limit: int = 5,
    base: str | None = None,
    compare: list[str] | None = None,
) -> SurveyForksResult:
    """Survey GitHub forks of `repo` (owner/name), or, when `repo` is a local clone, compare it
    with other local clones or refs; no network is used in the local case."""
    if not 1 <= limit <= MAX_LIMIT:
        raise InputError(f"limit={limit}: expected 1 to {MAX_LIMIT} forks.")
    clean_paths = normalize_paths(paths or [])
    repo = repo.strip()
    if _looks_local(repo):
        return survey_local(Path(repo).expanduser(), clean_paths, limit, base, compare)
    if compare:
        raise InputError(
            "`compare` names local clones or refs, so `repo` must be a local git repository path; "
            f"{repo!r} is not one (write a relative path as ./{repo}). For GitHub forks, leave `compare` out."
        )
    return survey_github(github_for(settings), repo, clean_paths, limit, base)


@functools.cache
def github_for(settings: Settings) -> GitHub:
    """The process's GitHub client for these settings: a spent rate limit stays known between calls."""
    return GitHub(shared_client(settings.cache_dir), settings.github_api_url, settings.github_token)


def _looks_local(repo: str) -> bool:
    """An explicit path is local. `owner/name` or a GitHub URL always means GitHub, even when a
    directory of that name happens to exist where the server runs."""
    if repo in (".", "..") or repo.startswith(("/", "./", "../", "~")):
        return True
    return not _REPO_RE.match(repo) and Path(repo).is_dir()


def normalize_paths(paths: Iterable[str]) -> list[str]:
    clean = []
    for raw in paths:
        path = raw.strip().removeprefix("./").strip("/")
        if not path or raw.strip().startswith("/") or ".." in path.split("/"):
            raise InputError(
                f"path {raw!r}: expected a path relative to the repository root, such as ggml/src/ggml-cpu."
            )
        clean.append(path)
    return clean


def _under(filename: str, paths: list[str]) -> bool:
    return not paths or any(filename == p or filename.startswith(p + "/") for p in paths)


# --- GitHub ---------------------------------------------------------------------------------------


class GitHubMissing(Exception):
    """404 or 422: the repository, branch or comparison does not exist."""


class GitHub:
    """GitHub's REST API, respecting its rate limit headers."""

    def __init__(self, http: HttpClient, api_url: str, token: str | None) -> None:
        self.http = http
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.remaining: int | None = None
        self.reset_at: float | None = None

    @property
    def clock(self) -> Clock:
        return self.http.clock

    def get(self, path: str, params: dict[str, str | int] | None = None) -> Any:
        if self.remaining == 0 and self.reset_at is not None and self.reset_at > self.clock.now():
            raise self._spent()
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        response = self.http.get(f"{self.api_url}{path}", params=params, headers=headers, ttl_s=_GITHUB_TTL_S)
        if not response.from_cache:
            remaining = response.headers.get("x-ratelimit-remaining", "")
            reset = response.headers.get("x-ratelimit-reset", "")
            self.remaining = int(remaining) if remaining.isdigit() else self.remaining
            self.reset_at = float(reset) if reset.isdigit() else self.reset_at
        if response.status == 200:
            return response.json()
        if response.status in (403, 429) and self.remaining == 0:
            raise self._spent()
        if response.status == 401:
            raise ExternalError("GitHub rejected GITHUB_TOKEN (HTTP 401): it is invalid or expired; fix or unset it.")
        if response.status in (404, 422):
            raise GitHubMissing(_github_message(response.text))
        raise ExternalError(
            f"GitHub answered HTTP {response.status} to {path}: {_github_message(response.text)}"
        )

    def _spent(self) -> ExternalError:
        when = ""
        if self.reset_at is not None:
            reset = dt.datetime.fromtimestamp(self.reset_at, dt.UTC)
            minutes = max(0, math.ceil((self.reset_at - self.clock.now()) / 60))
            when = f" It resets at {reset:%H:%M} UTC (in {minutes} min)."
        hint = (
            "GITHUB_TOKEN is set, so wait for the reset."
            if self.token
            else "Without GITHUB_TOKEN the limit is 60 requests an hour; set GITHUB_TOKEN (any token, "
            "no scopes needed) for 5,000."
        )
        return ExternalError(f"GitHub's API rate limit is spent.{when} {hint} Cached answers are still served.")


def _github_message(text: str) -> str:
    try:
        message = json.loads(text).get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message) if message else text[:200]


def _age_days(timestamp: str | None, now: float) -> float:
    if not timestamp:
        return math.inf
    moment = dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    return max(0.0, (now - moment) / 86400)


def activity_score(fork: dict[str, Any], now: float) -> float:
    """Stars count logarithmically; a recent push counts like 15 stars and fades with a 90-day
    half-life, so an active young fork is not buried under an abandoned popular one."""
    stars = int(fork.get("stargazers_count") or 0)
    recency = 0.5 ** (_age_days(fork.get("pushed_at"), now) / 90)
    return math.log2(1 + stars) + 4.0 * float(recency)


def _pushed_after_forking(fork: dict[str, Any]) -> bool:
    pushed, created = fork.get("pushed_at"), fork.get("created_at")
    return bool(pushed) and (not created or str(pushed) > str(created))


def survey_github(
    github: GitHub, repo: str, paths: list[str], limit: int, base: str | None
) -> SurveyForksResult:
    match = _REPO_RE.match(repo.strip())
    if not match:
        raise InputError(
            f"repo={repo!r}: expected a GitHub repository as owner/name (e.g. ggml-org/llama.cpp) or "
            "the path of a local clone."
        )
    full_name = f"{match[1]}/{match[2]}"
    try:
        upstream = github.get(f"/repos/{full_name}")
    except GitHubMissing as exc:
        raise InputError(
            f"GitHub has no repository {full_name} ({exc}). Check the owner/name spelling; a private "
            "repository needs a GITHUB_TOKEN with access."
        ) from exc
    base_branch = base or str(upstream.get("default_branch") or "master")
    listed = github.get(f"/repos/{full_name}/forks", {"sort": "stargazers", "per_page": 100})
    now = github.clock.now()
    candidates = sorted(
        (f for f in listed if _pushed_after_forking(f)), key=lambda f: activity_score(f, now), reverse=True
    )
    warnings = []
    if not candidates:
        warnings.append("No fork has been pushed to since it was created: nothing to compare.")
    forks: list[ForkSurvey] = []
    examined = 0
    for fork in candidates[: 2 * limit]:  # some forks are not ahead; look a little further
        if len(forks) >= limit:
            break
        if github.remaining is not None and github.remaining < 2 + len(paths):
            warnings.append(
                f"Stopped after {examined} forks to keep the last {github.remaining} GitHub requests; "
                "set GITHUB_TOKEN for a larger limit."
            )
            break
        examined += 1
        surveyed = _compare_fork(github, full_name, base_branch, fork, paths)
        if surveyed.ahead_by != 0:
            forks.append(surveyed)
    return SurveyForksResult(
        repo=full_name,
        source="github",
        base=base_branch,
        paths=paths,
        forks=forks,
        forks_total=upstream.get("forks_count"),
        forks_examined=examined,
        rate_limit_remaining=github.remaining,
        warnings=warnings,
    )


def _compare_fork(
    github: GitHub, upstream: str, base: str, fork: dict[str, Any], paths: list[str]
) -> ForkSurvey:
    owner = str(fork.get("owner", {}).get("login") or str(fork["full_name"]).split("/")[0])
    branch = str(fork.get("default_branch") or base)
    basehead = f"{quote(base, safe='/')}...{quote(owner)}:{quote(branch, safe='/')}"
    survey = ForkSurvey(
        name=str(fork["full_name"]),
        url=fork.get("html_url"),
        stars=fork.get("stargazers_count"),
        pushed_at=fork.get("pushed_at"),
        branch=branch,
        compare_url=f"https://github.com/{upstream}/compare/{basehead}",
    )
    try:
        diff = github.get(f"/repos/{upstream}/compare/{basehead}")
    except GitHubMissing as exc:
        return survey.model_copy(update={"note": f"cannot compare with {base}: {exc}"})
    ahead = [c for c in diff.get("commits", []) if c.get("sha")]
    changed = diff.get("files", [])
    files = [
        ForkFile(
            filename=f["filename"], status=f.get("status", "modified"),
            additions=f.get("additions"), deletions=f.get("deletions"),
        )
        for f in changed
        if _under(f.get("filename", ""), paths)
    ]
    if not paths:
        commits = [_github_commit(c) for c in reversed(ahead)]
    elif files:
        commits = _commits_touching(github, survey.name, branch, diff, ahead, paths)
    else:
        commits = []
    notes = []
    if len(commits) > MAX_COMMITS:
        notes.append(f"showing the newest {MAX_COMMITS} of {len(commits)} commits")
    if len(files) > MAX_FILES:
        notes.append(f"showing {MAX_FILES} of {len(files)} files")
    return survey.model_copy(
        update={
            "ahead_by": diff.get("ahead_by"),
            "behind_by": diff.get("behind_by"),
            "commits": commits[:MAX_COMMITS],
            "files": files[:MAX_FILES],
            "files_changed_total": len(changed),
            "note": "; ".join(notes) or None,
        }
    )


def _commits_touching(
    github: GitHub, fork: str, branch: str, diff: dict[str, Any], ahead: list[dict[str, Any]],
    paths: list[str],
) -> list[ForkCommit]:
    """The fork's commits ahead of upstream that touch `paths` (the commits API filters by path)."""
    ahead_shas = {c["sha"] for c in ahead}
    complete = len(ahead_shas) >= int(diff.get("ahead_by") or 0)
    since = (diff.get("merge_base_commit") or {}).get("commit", {}).get("committer", {}).get("date")
    found: dict[str, dict[str, Any]] = {}
    for path in paths:
        params: dict[str, str | int] = {"sha": branch, "path": path, "per_page": 100}
        if since:
            params["since"] = since
        try:
            listed = github.get(f"/repos/{fork}/commits", params)
        except GitHubMissing:
            continue
        for commit in listed:
            if not complete or commit.get("sha") in ahead_shas:
                found[commit["sha"]] = commit
    commits = [_github_commit(c) for c in found.values()]
    return sorted(commits, key=lambda c: c.date or "", reverse=True)


def _github_commit(commit: dict[str, Any]) -> ForkCommit:
    info = commit.get("commit", {})
    author = info.get("author") or {}
    return ForkCommit(
        sha=str(commit["sha"])[:12],
        message=str(info.get("message", "")).splitlines()[0] if info.get("message") else "",
        author=author.get("name"),
        date=author.get("date"),
        url=commit.get("html_url"),
    )


# --- local clones and refs ------------------------------------------------------------------------


def _open(path: Path) -> gitops.Repo:
    try:
        return gitops.repo_at(path)
    except InputError as exc:
        raise InputError(f"{path} is not a git repository: pass the path of a local clone.") from exc


def _resolve(repo: gitops.Repo, ref: str, where: str) -> str:
    sha = gitops.rev_parse(repo, ref)
    if sha is None:
        raise InputError(
            f"{ref!r} is neither a local clone's path nor a ref of {where}: pass a directory, or a "
            "branch, tag or remote-tracking branch (e.g. fork/master; add the fork with `git remote "
            "add` and fetch it first)."
        )
    return sha


def _default_targets(repo: gitops.Repo, base_sha: str) -> list[str]:
    """Branches and remote-tracking branches, most recently committed first, that differ from base."""
    seen = {base_sha}
    targets = []
    for ref in gitops.list_refs(repo, "refs/heads", "refs/remotes", newest_first=True):
        if ref.symref or ref.sha in seen:
            continue
        seen.add(ref.sha)
        targets.append(ref.short)
    return targets


def survey_local(
    path: Path, paths: list[str], limit: int, base: str | None, compare: list[str] | None
) -> SurveyForksResult:
    upstream = _open(path)
    base_ref = base or "HEAD"
    base_sha = _resolve(upstream, base_ref, str(path))
    targets = compare if compare else _default_targets(upstream, base_sha)
    warnings = [] if targets else [f"{path} has no other branch to compare; pass `compare`."]
    forks: list[ForkSurvey] = []
    with tempfile.TemporaryDirectory(prefix="autoresearch-survey-") as scratch:
        for target in targets[:limit]:
            other_path, _, other_ref = target.partition("@")
            if Path(other_path).expanduser().is_dir():
                other = _open(Path(other_path).expanduser())
                head_sha = _resolve(other, other_ref or "HEAD", other_path)
                both = gitops.object_union([upstream, other], Path(scratch) / str(len(forks)))
            else:
                head_sha = _resolve(upstream, target, str(path))
                both = upstream
            forks.append(_compare_local(both, target, base_sha, head_sha, paths))
    return SurveyForksResult(
        repo=str(path),
        source="local",
        base=base_ref,
        paths=paths,
        forks=forks,
        forks_examined=len(forks),
        warnings=warnings,
    )


def _compare_local(repo: gitops.Repo, name: str, base_sha: str, head_sha: str, paths: list[str]) -> ForkSurvey:
    merge_base = gitops.merge_base(repo, base_sha, head_sha)  # None: unrelated histories
    commits = [ForkCommit(sha=c.sha[:12], message=c.subject, author=c.author, date=c.authored)
               for c in gitops.log(repo, f"{base_sha}..{head_sha}", paths)]
    since = merge_base or base_sha
    statuses = {c.path: c.status for c in gitops.changes(repo, since, head_sha, paths)}
    files = [
        ForkFile(
            filename=n.path,
            status={"A": "added", "D": "removed"}.get(statuses.get(n.path, "M"), "modified"),
            additions=n.added,
            deletions=n.deleted,
        )
        for n in gitops.line_counts(repo, since, head_sha, paths)
    ]
    changed_total = len(gitops.changed_paths(repo, since, head_sha))
    notes = [] if merge_base else [f"no common history with {base_sha[:12]}"]
    if len(commits) > MAX_COMMITS:
        notes.append(f"showing the newest {MAX_COMMITS} of {len(commits)} commits")
    if len(files) > MAX_FILES:
        notes.append(f"showing {MAX_FILES} of {len(files)} files")
    return ForkSurvey(
        name=name,
        pushed_at=gitops.log(repo, head_sha, limit=1)[0].committed,
        branch=None,
        ahead_by=gitops.count_commits(repo, base_sha, head_sha),
        behind_by=gitops.count_commits(repo, head_sha, base_sha),
        commits=commits[:MAX_COMMITS],
        files=files[:MAX_FILES],
        files_changed_total=changed_total,
        note="; ".join(notes) or None,
    )

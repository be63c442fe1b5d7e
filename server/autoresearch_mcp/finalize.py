"""Finalize a session: its commits as independent review branches from the session start.

Commits whose files overlap stay together (in order) on one branch; all others get a branch each,
so a maintainer can review and merge one change at a time. The branches are written with git
plumbing only (a throwaway index, commit-tree, update-ref): the user's HEAD, index and files are
never touched. Replayed commits keep their author, committer, dates and message, so running it
again gives the same commits. Finally the branches are merged onto the start in a throwaway index
and the result is compared with the session head's tree.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from autoresearch_mcp.errors import StateError
from autoresearch_mcp.experiments import snapshot
from autoresearch_mcp.models import FinalizeResult, ReviewBranch
from autoresearch_mcp.session import load_config

_EXPERIMENT_TRAILER = re.compile(r"^Autoresearch-Experiment:\s*(\S+)\s*$", re.MULTILINE)


class _Git:
    """`git` in one repository; a failure is a StateError carrying git's own words."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, *args: str, env: dict[str, str] | None = None, input: str | None = None) -> str:
        proc = subprocess.run(["git", *args], cwd=self.root, capture_output=True, text=True, input=input,
                              env={**os.environ, **(env or {})}, check=False)
        if proc.returncode != 0:
            raise StateError(f"git {' '.join(args[:3])} failed in {self.root}: {proc.stderr.strip()[:600]}")
        return proc.stdout.strip()

    def ok(self, *args: str) -> bool:
        return subprocess.run(["git", *args], cwd=self.root, capture_output=True, check=False).returncode == 0


@dataclass
class _Commit:
    sha: str
    message: str
    identity: dict[str, str]  # author and committer, to replay the commit identically
    changes: list[tuple[str, str, str]]  # (mode, blob, path); mode "0" removes the path

    @property
    def title(self) -> str:
        return self.message.splitlines()[0] if self.message else self.sha[:12]

    @property
    def files(self) -> list[str]:
        return [path for _, _, path in self.changes]


def finalize(repo_path: str) -> FinalizeResult:
    root = Path(snapshot.open_repo(repo_path).working_dir)
    config = load_config(root)
    if config is None:
        raise StateError(f"{root} has no session (.autoresearch/config.json); run start_session there first")
    g = _Git(root)
    start = g("rev-parse", "--verify", f"{config.start_commit}^{{commit}}")
    head = g("rev-parse", "--verify", f"refs/heads/{config.branch}^{{commit}}")
    if not g.ok("merge-base", "--is-ancestor", start, head):
        raise StateError(f"the session branch {config.branch} no longer contains the session start "
                         f"{start[:12]} (was it rebased?); finalize needs the history since the start")
    commits = [_read(g, sha) for sha in g("rev-list", "--reverse", "--first-parent", f"{start}..{head}").split()]
    groups, grouped = _group(commits)
    prefix = f"refs/heads/autoresearch/{config.tag}-review/"
    names = [f"{prefix}{i:02d}-{_slug(group[0].title)}" for i, group in enumerate(groups, start=1)]
    checked_out = [line.split(" ", 1)[1] for line in g("worktree", "list", "--porcelain").splitlines()
                   if line.startswith("branch ") and line.split(" ", 1)[1].startswith(prefix)]
    if checked_out:
        raise StateError(f"review branch {checked_out[0].removeprefix('refs/heads/')} is checked out; switch "
                         f"to another branch (e.g. git checkout {config.branch}) and finalize again")
    branches = []
    for name, group in zip(names, groups, strict=True):
        tip = start
        replayed = []
        for commit in group:
            tip = _replay(g, commit, tip)
            replayed.append(tip)
        g("update-ref", "-m", "autoresearch finalize", name, tip)
        branches.append(ReviewBranch(
            name=name.removeprefix("refs/heads/"), tip=tip, commits=replayed, titles=[c.title for c in group],
            experiments=[m for c in group for m in _EXPERIMENT_TRAILER.findall(c.message)],
            files=sorted({f for c in group for f in c.files})))
    removed = []
    for ref in g("for-each-ref", "--format=%(refname)", prefix).splitlines():
        if ref not in names:
            g("update-ref", "-d", ref)
            removed.append(ref.removeprefix("refs/heads/"))
    verified, verification = _verify(g, start, [b.tip for b in branches], head)
    message = (f"{len(commits)} commit(s) since {start[:12]} as {len(branches)} review branch(es) under "
               f"autoresearch/{config.tag}-review/; " + ("merged together they reproduce the session head"
                                                          if verified else "VERIFICATION FAILED: " + verification))
    return FinalizeResult(start_commit=start, head=head, branches=branches, grouped=grouped, verified=verified,
                          verification=verification, removed=removed, message=message)


def _read(g: _Git, sha: str) -> _Commit:
    fields = g("show", "-s", "--date=raw", "--format=%an%x00%ae%x00%ad%x00%cn%x00%ce%x00%cd%x00%P%x00%B", sha)
    an, ae, ad, cn, ce, cd, parents, message = fields.split("\x00", 7)
    identity = {"GIT_AUTHOR_NAME": an, "GIT_AUTHOR_EMAIL": ae, "GIT_AUTHOR_DATE": ad,
                "GIT_COMMITTER_NAME": cn, "GIT_COMMITTER_EMAIL": ce, "GIT_COMMITTER_DATE": cd}
    parent = parents.split()[0]
    raw = g("diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", parent, sha)
    tokens = raw.split("\x00")
    changes = []
    for meta, path in zip(tokens[0::2], tokens[1::2], strict=False):
        _, new_mode, _, new_blob, status = meta.lstrip(":").split(" ")
        changes.append(("0", "0" * len(new_blob), path) if status == "D" else (new_mode, new_blob, path))
    return _Commit(sha, message.strip() + "\n", identity, changes)


def _group(commits: list[_Commit]) -> tuple[list[list[_Commit]], list[str]]:
    """Commits in connected groups of overlapping files (a path, or a file and a folder of that name)."""
    parent = list(range(len(commits)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}  # path -> first commit touching it
    folders: dict[str, int] = {}  # folder holding a touched path -> first commit
    for i, commit in enumerate(commits):
        for path in commit.files:
            parts = path.split("/")
            ancestors = ["/".join(parts[:k]) for k in range(1, len(parts))]
            # the same path, a file where another commit has a folder, or the other way round
            for j in (owner.get(path), folders.get(path), *(owner.get(a) for a in ancestors)):
                if j is not None and j != i:
                    parent[find(i)] = find(j)
            owner.setdefault(path, i)
            for folder in ancestors:
                folders.setdefault(folder, i)
    members: dict[int, list[int]] = {}
    for i in range(len(commits)):
        members.setdefault(find(i), []).append(i)
    groups = [[commits[i] for i in idx] for idx in sorted(members.values(), key=lambda m: m[0])]
    reasons = []
    for group in groups:
        if len(group) > 1:
            seen: dict[str, int] = {}
            for c in group:
                for f in set(c.files):
                    seen[f] = seen.get(f, 0) + 1
            shared = sorted(f for f, n in seen.items() if n > 1) or ["a file and a folder of the same name"]
            reasons.append(f"kept together: {'; '.join(repr(c.title) for c in group)} "
                           f"(they touch the same files: {', '.join(shared[:10])})")
    return groups, reasons


def _replay(g: _Git, commit: _Commit, onto: str) -> str:
    """`commit`'s changes on top of `onto`, as a new commit with the same message and identity."""
    with tempfile.TemporaryDirectory(prefix="autoresearch-finalize-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        g("read-tree", onto, env=env)
        info = "".join(f"{mode} {blob}\t{path}\x00" for mode, blob, path in commit.changes)
        g("update-index", "-z", "--index-info", env=env, input=info)
        tree = g("write-tree", env=env)
    return g("commit-tree", tree, "-p", onto, "-F", "-", env=commit.identity, input=commit.message)


def _verify(g: _Git, start: str, tips: list[str], head: str) -> tuple[bool, str]:
    """Three-way merge every tip onto the start in a throwaway index; compare with the head's tree."""
    base = g("rev-parse", f"{start}^{{tree}}")
    merged = base
    for tip in tips:
        with tempfile.TemporaryDirectory(prefix="autoresearch-verify-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            try:
                g("read-tree", "-m", "-i", "--aggressive", base, merged, f"{tip}^{{tree}}", env=env)
                merged = g("write-tree", env=env)
            except StateError as exc:
                return False, f"merging {tip[:12]} onto the others conflicts: {exc}"
    expected = g("rev-parse", f"{head}^{{tree}}")
    if merged != expected:
        diff = g("diff-tree", "-r", "--name-only", merged, expected)
        return False, f"the merged branches differ from the head in: {', '.join(diff.splitlines()[:10])}"
    return True, f"merging all {len(tips)} branch(es) onto {start[:12]} gives the head's tree {expected[:12]}"


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40].strip("-") or "change"

"""Finalize a session: its commits as independent review branches from the session start.

Commits whose files overlap stay together (in order) on one branch; all others get a branch each,
so a maintainer can review and merge one change at a time. The branches are written with git
plumbing only (a throwaway index, commit-tree, update-ref): the user's HEAD, index and files are
never touched. Replayed commits keep their author, committer, dates and message, so running it
again gives the same commits. Finally the branches are merged onto the start in a throwaway index
and the result is compared with the session head's tree.

A review branch may have been worked on since (a reviewer's fix-up commit): finalize records every
tip it writes under `refs/autoresearch/review/` and refuses to move or delete a review branch
whose tip is not the one it recorded, so nobody's commit is silently dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from autoresearch_mcp.errors import StateError
from autoresearch_mcp.experiments import branch
from autoresearch_mcp.git import gitops
from autoresearch_mcp.models import FinalizeResult, ReviewBranch
from autoresearch_mcp.store.config import SessionConfig, load_config, state_dir
from autoresearch_mcp.store.ledger import Ledger

RECORDS = gitops.REVIEW_REF  # + a review branch's name: the tip finalize last wrote there


@dataclass
class _Commit:
    sha: str
    message: str
    identity: dict[str, str]  # author and committer, to replay the commit identically
    changes: list[gitops.IndexEntry]  # mode "0" removes the path

    @property
    def title(self) -> str:
        return self.message.splitlines()[0] if self.message else self.sha[:12]

    @property
    def files(self) -> list[str]:
        return [c.path for c in self.changes]


def committed_experiments(root: Path, session_id: str) -> dict[str, str]:
    """Commit -> the experiment commit_winner committed there, from the ledger (never from message text)."""
    view = Ledger(state_dir(root) / "ledger.jsonl").view()
    return {e.commit.commit: e.experiment_id for e in view.experiments.values()
            if e.commit and e.launch.session_id == session_id}


def finalize(repo_path: str) -> FinalizeResult:
    repo = gitops.open_repo(repo_path)
    root = Path(repo.working_dir)
    config = load_config(root)
    if config is None:
        raise StateError(f"{root} has no session (.autoresearch/config.json); run start_session there first")
    try:
        view, append = Ledger(state_dir(root) / "ledger.jsonl").folding()
        branch.check(repo, config, view, append)  # the session's commits are the ledger's, or nothing is done
        result = _finalize(repo, config)
        branch.close_set_up(repo, config)
        if gitops.remove_ref_guard(repo):
            result.message += ("; the reference-transaction hook that kept autoresearch/* branches for commit_winner "
                               "is removed (start_session installs it again)")
        return result
    except gitops.GitError as exc:
        detail = str(exc.stderr or exc).strip()[:600]
        raise StateError(f"git {' '.join(map(str, exc.command[1:4]))} failed in {root}: {detail}") from None


def _finalize(repo: gitops.Repo, config: SessionConfig) -> FinalizeResult:
    start = _resolve(repo, config.start_commit, "the session start")
    head = _resolve(repo, f"refs/heads/{config.branch}", f"the session branch {config.branch}")
    if not gitops.is_ancestor(repo, start, head):
        raise StateError(f"the session branch {config.branch} no longer contains the session start "
                         f"{start[:12]} (was it rebased?); finalize needs the history since the start")
    shas = gitops.first_parent_commits(repo, start, head)
    commits = [_read(repo, sha) for sha in shas]
    committed = committed_experiments(Path(repo.working_dir), config.session_id)
    groups, grouped = _group(commits)
    prefix = f"refs/heads/autoresearch/{config.tag}-review/"
    checked_out = [w.branch for w in gitops.worktrees(repo) if w.branch and w.branch.startswith(prefix)]
    if checked_out:
        raise StateError(f"review branch {checked_out[0].removeprefix('refs/heads/')} is checked out; switch "
                         f"to another branch (e.g. git checkout {config.branch}) and finalize again")
    branches = []
    for i, group in enumerate(groups, start=1):
        tip, replayed = start, []
        for commit in group:
            tip = _replay(repo, commit, tip)
            replayed.append(tip)
        branches.append(ReviewBranch(
            name=f"{prefix}{i:02d}-{_slug(group[0].title)}".removeprefix("refs/heads/"), tip=tip,
            commits=replayed, titles=[c.title for c in group],
            experiments=[committed[c.sha] for c in group if c.sha in committed],
            files=sorted({f for c in group for f in c.files})))
    planned = {f"refs/heads/{b.name}": b.tip for b in branches}
    removed = _write_branches(repo, prefix, planned, zero="0" * len(start))
    verified, verification = _verify(repo, start, [b.tip for b in branches], head)
    message = (f"{len(commits)} commit(s) since {start[:12]} as {len(branches)} review branch(es) under "
               f"autoresearch/{config.tag}-review/; " + ("merged together they reproduce the session head"
                                                          if verified else "VERIFICATION FAILED: " + verification))
    return FinalizeResult(start_commit=start, head=head, branches=branches, grouped=grouped, verified=verified,
                          verification=verification, removed=removed, message=message)


def _resolve(repo: gitops.Repo, ref: str, what: str) -> str:
    try:
        return gitops.head_commit(repo, ref)
    except StateError:
        raise StateError(f"{what} ({ref}) is not a commit in {repo.working_dir}; finalize needs the session's "
                         "history (was the branch deleted, or the repository re-cloned?)") from None


def _record(ref: str) -> str:
    return RECORDS + ref.removeprefix("refs/heads/")


def _branch_of(record: str) -> str:
    return "refs/heads/" + record.removeprefix(RECORDS)


def _refs(repo: gitops.Repo, prefix: str) -> dict[str, str]:
    return {ref.name: ref.sha for ref in gitops.list_refs(repo, prefix)}


def _write_branches(repo: gitops.Repo, prefix: str, planned: dict[str, str], zero: str) -> list[str]:
    """Point the review branches at their planned tips and delete the stale ones, recording each tip
    written; refuse first, before any change, if a branch holds work finalize did not write."""
    existing = _refs(repo, prefix)
    recorded = {_branch_of(ref): tip for ref, tip in _refs(repo, _record(prefix)).items()}
    for ref, tip in existing.items():
        if tip in (recorded.get(ref), planned.get(ref)):
            continue
        short = ref.removeprefix("refs/heads/")
        was = (f"not the {recorded[ref][:12]} finalize wrote there" if ref in recorded
               else "not one finalize wrote")
        action = "rewrite" if ref in planned else "delete"
        raise StateError(
            f"review branch {short} has moved since finalize wrote it (its tip {tip[:12]} is {was}): someone's "
            f"commits are on it, and finalize would {action} the branch and lose them. Keep them under another name "
            f"(git branch -m {short} {short}-reviewed) or drop them (git branch -D {short}), then finalize again")
    for ref, tip in planned.items():
        if existing.get(ref) != tip:  # the old value makes git refuse if the branch moved meanwhile
            gitops.update_ref(repo, ref, tip, existing.get(ref, zero), reason="autoresearch finalize")
        gitops.update_ref(repo, _record(ref), tip)
    removed = []
    for ref, tip in existing.items():
        if ref not in planned:
            gitops.delete_ref(repo, ref, tip)
            removed.append(ref.removeprefix("refs/heads/"))
    for ref, tip in recorded.items():
        if ref not in planned:
            gitops.delete_ref(repo, _record(ref), tip)
    return removed


def _read(repo: gitops.Repo, sha: str) -> _Commit:
    info = gitops.commit_info(repo, sha)
    changes = [gitops.IndexEntry("0", "0" * len(c.blob), c.path) if c.status == "D"
               else gitops.IndexEntry(c.mode, c.blob, c.path) for c in gitops.changes(repo, info.parents[0], sha)]
    return _Commit(sha, info.message.strip() + "\n", info.identity, changes)


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


def _replay(repo: gitops.Repo, commit: _Commit, onto: str) -> str:
    """`commit`'s changes on top of `onto`, as a new commit with the same message and identity."""
    tree = gitops.tree_with(repo, onto, commit.changes)
    return gitops.commit_tree(repo, tree, onto, commit.message, identity=commit.identity)


def _verify(repo: gitops.Repo, start: str, tips: list[str], head: str) -> tuple[bool, str]:
    """Three-way merge every tip onto the start in a throwaway index; compare with the head's tree."""
    base = gitops.tree_of(repo, start)
    merged = base
    for tip in tips:
        try:
            merged = gitops.merge_trees(repo, base, merged, gitops.tree_of(repo, tip))
        except gitops.GitError as exc:
            detail = str(exc.stderr or exc).strip()[:600]
            return False, f"merging {tip[:12]} onto the others conflicts: {detail}"
    expected = gitops.tree_of(repo, head)
    if merged != expected:
        differ = gitops.changed_paths(repo, merged, expected)
        return False, f"the merged branches differ from the head in: {', '.join(differ[:10])}"
    return True, f"merging all {len(tips)} branch(es) onto {start[:12]} gives the head's tree {expected[:12]}"


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40].strip("-") or "change"

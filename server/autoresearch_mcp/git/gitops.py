"""The project's git module: every git operation the package runs, as plain typed functions.

Callers ask `gitops` for everything: it holds opening a repository, refs and branches, moving the work tree,
the session's reference-transaction guard, the build cache's worktrees and the protected paths, and re-exports
its siblings' functions: reading commits and trees (gitread) and writing trees and commits (gittrees). Each
runs git's documented command line through one runner (gitrun), with a timeout, reading git's `-z` output.

Candidates become commits on private refs (`refs/autoresearch/exp/<id>`) built with a throwaway index
(a temporary GIT_INDEX_FILE), so the user's index, HEAD and files are never touched unless they asked.

Only the gitops modules (this one, gitrun, gitread, gittrees) import GitPython or run git; elsewhere a
repository is a `gitops.Repo` whose `working_dir` may be read (tests/test_gitops_only.py checks it). The
exceptions are the hooks: the PreToolUse guard (guard.py) runs with the system python3 before the package's
environment exists, and the Stop hook (hooks.py), at the end of every turn, is kept free of GitPython's import;
both ask git read-only questions with the stdlib. Every git run here is the server's own (gitrun.OWN_GIT): no
hook of the repository runs from it.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import posixpath
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from autoresearch_mcp import limits
from autoresearch_mcp.errors import InputError, StateError
from autoresearch_mcp.git import gitread, gitrun, gittrees
from autoresearch_mcp.git.gitrun import NOT_A_REPO, git, run

logger = logging.getLogger(__name__)

Repo = gitrun.Repo
GitError = gitrun.GitError  # git ran and failed (or outlasted gitrun.TIMEOUT_S); `.stderr` holds what git said
# Reading commits and trees (gitread) and writing trees and commits (gittrees), asked of gitops like the rest.
CommitInfo = gitread.CommitInfo
Change = gitread.Change
LineCount = gitread.LineCount
LogEntry = gitread.LogEntry
TreeEntry = gitread.TreeEntry
IndexEntry = gittrees.IndexEntry
commit_info, changes, changed_paths, line_counts = (gitread.commit_info, gitread.changes, gitread.changed_paths,
                                                    gitread.line_counts)
log, tracked, tree_entries, read_blobs, file_at = (gitread.log, gitread.tracked, gitread.tree_entries,
                                                   gitread.read_blobs, gitread.file_at)
archive, grep_files, dirty_files, untracked_files = (gitread.archive, gitread.grep_files, gitread.dirty_files,
                                                     gitread.untracked_files)
diff, diff_hunks, worktree_drift, words_at = gitread.diff, gitread.diff_hunks, gitread.worktree_drift, gitread.words_at
hash_file, tree_with, merge_trees, commit_tree = (gittrees.hash_file, gittrees.tree_with, gittrees.merge_trees,
                                                  gittrees.commit_tree)
snapshot_worktree, patch_tree, object_union = gittrees.snapshot_worktree, gittrees.patch_tree, gittrees.object_union

EXP_REF = "refs/autoresearch/exp/"
REVIEW_REF = "refs/autoresearch/review/"  # + a review branch's name: the tip finalize last wrote there
# + a session's tag: its branch takes a set-up commit (its scripts alone) while this ref exists, which start_session
# writes and the session's first launch deletes; the reference-transaction hook and the PreToolUse guard read it
SETUP_REF = "refs/autoresearch/setup/"
BRANCH_REF = "refs/heads/"
SESSION_BRANCHES = "refs/heads/autoresearch/"
# Where a ref shadows a session branch `autoresearch/<tag>`: git resolves that short name by trying
# `<name>`, `refs/<name>`, `refs/tags/<name>` before `refs/heads/<name>` (and `refs/remotes/<name>` after it), so
# a ref there is what a short name means to git, or to a person reading `git log autoresearch/<tag>`.
SHADOWS = ("refs/tags/autoresearch/", "refs/remotes/autoresearch/", "refs/autoresearch/")
TOP_LEVEL = "autoresearch"  # a folder of the git directory holding `autoresearch/<tag>` refs outside refs/


# --- opening a repository -----------------------------------------------------------------------------


def open_repo(path: str | os.PathLike[str]) -> Repo:
    """The git work tree at `path` (its top level), or an error that says what `path` is instead."""
    p = Path(path).expanduser()
    if not p.exists():
        raise InputError(f"repo {str(p)!r} does not exist; pass the path of a git work tree")
    if not p.is_dir():
        raise InputError(f"repo {str(p)!r} is a file, not a directory; pass the path of a git work tree")
    try:
        repo = Repo(p, search_parent_directories=True)
    except NOT_A_REPO:
        raise InputError(
            f"{str(p)!r} is not inside a git repository; run `git init` and commit the code first"
        ) from None
    if repo.bare:
        raise InputError(f"{str(p)!r} is a bare repository; pass a work tree")
    return repo


def repo_at(path: str | os.PathLike[str]) -> Repo:
    """The repository whose top level (or git directory) is exactly `path`."""
    try:
        return Repo(path)
    except NOT_A_REPO:
        raise InputError(f"{str(path)!r} is not a git repository") from None


def is_work_tree(path: Path) -> bool:
    """Whether `path` is a folder inside a git work tree (not a .git folder, nor outside any repository)."""
    try:
        return git(path, "rev-parse", "--is-inside-work-tree") == "true"
    except GitError:
        return False


def init_repo(path: Path, branch: str) -> Repo:
    """A new repository in `path` (created if missing) whose first branch is `branch`."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", branch)
    return Repo(path)


def commit_all(repo: Repo, message: str, name: str, email: str) -> str:
    """Commit every file of the work tree (tracked or not, ignored ones excepted) as name <email>."""
    git(repo, "add", "-A")
    git(repo, "-c", f"user.name={name}", "-c", f"user.email={email}", "commit", "-q", "-m", message)
    return head_commit(repo)


# --- commits, refs and branches -----------------------------------------------------------------------


@dataclass(frozen=True)
class Ref:
    name: str  # refs/heads/main
    short: str  # main
    sha: str
    symref: str  # the ref it points to when it is symbolic (refs/remotes/origin/HEAD), else ""


@dataclass(frozen=True)
class Worktree:
    path: Path
    branch: str | None  # refs/heads/<name>; None when detached


def rev_parse(repo: Repo, rev: str) -> str | None:
    """The commit `rev` names (a sha, branch, tag, HEAD~1...), or None when it names none."""
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except GitError:
        return None


def head_commit(repo: Repo, ref: str = "HEAD") -> str:
    sha = rev_parse(repo, ref)
    if sha is None:
        raise StateError(f"{ref} does not name a commit; make an initial commit first")
    return sha


def resolve_commit(repo: Repo, commitish: str) -> str:
    if not commitish.strip():
        raise InputError("commit is empty; pass a commit-ish such as a sha, a branch or HEAD~1")
    sha = rev_parse(repo, commitish)
    if sha is None:
        raise InputError(f"{limits.shown(commitish)} does not name a commit in {repo.working_dir}")
    return sha


def tree_of(repo: Repo, commit: str) -> str:
    return git(repo, "rev-parse", f"{commit}^{{tree}}")


def current_branch(repo: Repo) -> str | None:
    """The branch HEAD is on (main, autoresearch/x), None when HEAD is detached."""
    try:
        ref = git(repo, "symbolic-ref", "-q", "HEAD")
    except GitError:
        return None
    return ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else None


def branch_exists(repo: Repo, name: str) -> bool:
    try:
        git(repo, "show-ref", "--verify", "--quiet", f"{BRANCH_REF}{name}")
    except GitError:
        return False
    return True


def branch_commit(repo: Repo, name: str) -> str:
    """The commit branch `name` points at, found by its full name `refs/heads/<name>` exactly: never a tag or
    another ref git would take the short name for first (issue 32)."""
    ref = branch_ref(repo, name)
    sha = rev_parse(repo, ref.sha) if ref is not None and ref.sha else None
    if sha is None:
        raise StateError(f"branch {name} ({BRANCH_REF}{name}) does not exist or names no commit")
    return sha


def shadowing_refs(repo: Repo) -> dict[str, str]:
    """Refs named like a session branch outside refs/heads (SHADOWS, and `autoresearch/...` files at the top of
    the git directory), the server's own refs/autoresearch/exp/, review/ and setup/ aside; each with the command that
    deletes it (git refuses to delete a top-level name it let be written: the file goes)."""
    found = {r.name: f"git update-ref -d {r.name}" for r in list_refs(repo, *SHADOWS)
             if not r.name.startswith((EXP_REF, REVIEW_REF, SETUP_REF))}
    for top in {Path(repo.git_dir), Path(repo.common_dir)}:
        for dirpath, _, files in os.walk(top / TOP_LEVEL):
            for f in files:
                path = Path(dirpath, f)
                found[path.relative_to(top).as_posix()] = f"rm -- {shlex.quote(str(path))}"
    return dict(sorted(found.items()))


def valid_ref(repo: Repo, ref: str) -> bool:
    """Whether git accepts `ref` (refs/heads/x) as the name of a ref."""
    try:
        git(repo, "check-ref-format", ref)
    except GitError:
        return False
    return True


def is_ancestor(repo: Repo, ancestor: str, descendant: str) -> bool:
    try:
        git(repo, "merge-base", "--is-ancestor", ancestor, descendant)
    except GitError as exc:
        if exc.status == 1:
            return False
        raise
    return True


def merge_base(repo: Repo, a: str, b: str) -> str | None:
    """The best common ancestor of two commits, None for unrelated histories."""
    try:
        return git(repo, "merge-base", a, b) or None
    except GitError:
        return None


def count_commits(repo: Repo, since: str, until: str) -> int:
    """How many commits `until` has that `since` has not."""
    return int(git(repo, "rev-list", "--count", f"{since}..{until}"))


def first_parent_commits(repo: Repo, start: str, end: str) -> list[str]:
    """The commits from `start` (excluded) to `end` along first parents, oldest first."""
    return git(repo, "rev-list", "--reverse", "--first-parent", f"{start}..{end}").split()


def list_refs(repo: Repo, *prefixes: str, newest_first: bool = False) -> list[Ref]:
    """The refs under `prefixes` (refs/heads, refs/autoresearch/...), by name or newest commit first."""
    order = ["--sort=-committerdate"] if newest_first else []
    out = git(repo, "for-each-ref", *order, "--format=%(refname)%00%(refname:short)%00%(objectname)%00%(symref)",
              *prefixes)
    return [Ref(*line.split("\0")) for line in out.splitlines() if line]


def worktrees(repo: Repo) -> list[Worktree]:
    """The repository's work trees, the main one first (`--porcelain` without -z, which needs git 2.36)."""
    found: list[Worktree] = []
    for line in git(repo, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            found.append(Worktree(Path(line.split(" ", 1)[1]), None))
        elif line.startswith("branch ") and found:
            found[-1] = Worktree(found[-1].path, line.split(" ", 1)[1])
    return found


def update_ref(repo: Repo, ref: str, new: str, old: str | None = None, reason: str | None = None) -> None:
    """Point `ref` at `new`; with `old` (the zero sha: must not exist yet), only if it still points there."""
    message = ["-m", reason] if reason else []
    git(repo, "update-ref", *message, ref, new, *([old] if old is not None else []))


def delete_ref(repo: Repo, ref: str, old: str) -> None:
    """Delete `ref`, only if it still points at `old`."""
    git(repo, "update-ref", "-d", ref, old)


def delete_branch(repo: Repo, name: str) -> None:
    git(repo, "branch", "-D", name)


@dataclass(frozen=True)
class BranchCommit:
    """A commit of a branch's history, as the report shows it."""

    sha: str
    committed_at: float  # unix time
    message: str  # the whole message, trailers included
    stat: str  # git's diffstat


def branch_log(repo: Repo, start: str, branch: str) -> list[BranchCommit]:
    """The commits of `branch` since `start` along first parents, oldest first, with messages and diffstats.

    git log has no NUL-separated form that keeps the diffstat, so %x1e opens each record and %x1f ends
    each field (control characters no commit message holds in practice)."""
    out = git(repo, "log", "--reverse", "--first-parent", "--stat=100", "--format=%x1e%H%x1f%ct%x1f%B%x1f",
              f"{start}..{BRANCH_REF}{branch}", "--")
    commits = []
    for chunk in out.split("\x1e")[1:]:
        sha, ts, message, stat = [*chunk.split("\x1f"), "", "", ""][:4]
        commits.append(BranchCommit(sha, float(ts or 0), message.strip(), stat.strip("\n")))
    return commits


# --- moving the work tree and HEAD (only where the user asked for it) ---------------------------------


def checkout(repo: Repo, rev: str) -> None:
    """Check out branch `rev` (or commit `rev`, detaching HEAD there)."""
    git(repo, "checkout", rev)


def checkout_new_branch(repo: Repo, branch: str, commit: str) -> None:
    git(repo, "checkout", "-b", branch, commit)


def checkout_detached(repo: Repo, commit: str) -> None:
    """Move a work tree of ours to `commit`, whatever it held (only for worktrees the package owns)."""
    git(repo, "checkout", "--detach", "--force", commit)


def fast_forward(repo: Repo, commit: str) -> None:
    """Move the current branch and work tree forward to `commit`; GitError if that is not a fast-forward
    or local changes would be overwritten."""
    git(repo, "merge", "--ff-only", "--quiet", commit)


def reset_hard(repo: Repo, commit: str) -> None:
    git(repo, "reset", "--hard", "--quiet", commit)


def reset_saving(repo: Repo, head: str, message: str) -> str:
    """Reset the work tree and index to `head`, first saving exactly what they held as a stash entry
    (index with partly staged files, tracked changes, untracked files), which `git stash apply --index`
    restores. Only what the stash holds is removed: ignored files and empty folders stay."""
    identity = gittrees.commit_identity(repo)
    with tempfile.TemporaryDirectory(prefix="autoresearch-index-") as tmp:
        index_tree = git(repo, "write-tree")  # the real index, as it is
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        real = Path(repo.git_dir) / "index"
        if real.exists():
            shutil.copy2(real, Path(tmp) / "index")  # with its time: see snapshot_worktree
        git(repo, "add", "-u", "--", ".", env=env)  # tracked files as in the work tree
        work_tree = git(repo, "write-tree", env=env)
        untracked = untracked_files(repo)
        parents = ["-p", head, "-p", commit_tree(repo, index_tree, head, f"index on {message}")]
        if untracked:
            (Path(tmp) / "index").unlink()
            git(repo, "update-index", "--add", "-z", "--stdin", env=env,
                stdin="".join(p + "\0" for p in untracked))
            untracked_tree = git(repo, "write-tree", env=env)
            parents += ["-p", git(repo, "commit-tree", untracked_tree, "-m", f"untracked files on {message}",
                                  env=identity)]
        stash = git(repo, "commit-tree", work_tree, *parents, "-m", message, env=identity)
    git(repo, "stash", "store", "-m", message, stash)
    git(repo, "reset", "--hard", head)
    root = Path(repo.working_dir)
    for rel in untracked:
        path = root / rel
        path.unlink(missing_ok=True)
        # folders this emptied go too; a folder that was empty before held no untracked file, so it stays
        for parent in path.parents:
            if parent == root or any(parent.iterdir()):
                break
            parent.rmdir()
    return stash


def refuse_if_dirty(repo: Repo, action: str) -> None:
    files = dirty_files(repo)
    if files:
        shown = ", ".join(files[:20]) + (f" and {len(files) - 20} more" if len(files) > 20 else "")
        raise StateError(
            f"the work tree of {repo.working_dir} has uncommitted changes ({shown}); "
            f"commit or stash them before {action}"
        )


def untracked_in_the_way(repo: Repo, head: str, new: str, limit: int = 50) -> list[str]:
    """Paths of the work tree that moving from `head` to `new` would overwrite although git does not
    track them at `head`: ignored or untracked files (git replaces ignored files without asking)."""
    root = Path(repo.working_dir)
    added = [c.path for c in changes(repo, head, new) if c.status == "A"]
    known = set(tracked(repo, head, "."))
    in_the_way: list[str] = []
    for path in added:
        parts = path.split("/")
        for k in range(1, len(parts) + 1):
            prefix = "/".join(parts[:k])
            target = root / prefix
            if not os.path.lexists(target):
                break
            folder = target.is_dir() and not target.is_symlink()
            if folder and k < len(parts):
                continue
            if folder:  # a folder where the winner puts a file: whatever git does not track in it is lost
                for dirpath, _, files in os.walk(target):
                    rel = Path(dirpath).relative_to(root).as_posix()
                    in_the_way += [f"{rel}/{f}" for f in files if f"{rel}/{f}" not in known]
            elif prefix not in known:
                in_the_way.append(prefix)
            break
        if len(in_the_way) >= limit:
            break
    return sorted(set(in_the_way))[:limit]


def ensure_excluded(repo: Repo, entry: str = ".autoresearch/") -> None:
    """Add `entry` to .git/info/exclude (the repository's private ignore list), once."""
    exclude = Path(repo.git_dir) / "info" / "exclude"
    if Path(repo.git_dir) != Path(repo.common_dir):
        exclude = Path(repo.common_dir) / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    lines = exclude.read_text().splitlines() if exclude.exists() else []
    if entry not in lines:
        with open(exclude, "a") as fh:
            if lines and lines[-1] != "":
                fh.write("\n")
            fh.write(entry + "\n")


# --- the session's reference-transaction guard ----------------------------------------------------------

REF_GUARD = "reference-transaction"
CHAINED = REF_GUARD + ".before-autoresearch"  # the repository's own hook of that name, which ours runs first
_GUARD_MARK = b"autoresearch-mcp reference-transaction guard"


def hooks_dir(repo: Repo) -> Path:
    """Where git runs the repository's hooks from: core.hooksPath, or the hooks folder of its git directory."""
    return Path(cast(str, run(repo, "rev-parse", "--path-format=absolute", "--git-path", "hooks", own=False)))


def _is_guard(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    with open(path, "rb") as fh:
        return _GUARD_MARK in fh.read(512)


def install_ref_guard(repo: Repo, script: bytes) -> str | None:
    """Install `script` as the repository's reference-transaction hook, moving a hook of that name the
    repository has aside (to CHAINED, which the script runs first). Installing again replaces only our
    own script. Returns why it could not be installed, or None."""
    hooks = hooks_dir(repo)
    if str(hooks) == os.devnull:
        return "this repository runs no hooks (core.hooksPath is /dev/null)"
    target, chained = hooks / REF_GUARD, hooks / CHAINED
    root = Path(repo.working_dir).resolve()
    inside = hooks.resolve().is_relative_to(root)
    if os.path.lexists(target) and not _is_guard(target):
        if os.path.lexists(chained):
            return f"{target} and {chained} both exist, and neither is autoresearch's"
        if inside and tracked(repo, "HEAD", target.resolve().relative_to(root).as_posix()):
            return f"{target} is tracked by git, so it cannot be moved aside without changing your files"
        os.replace(target, chained)
    if inside:  # a hooks folder in the work tree: our files are never untracked changes nor in a candidate
        for name in (target, chained):
            ensure_excluded(repo, "/" + name.resolve().relative_to(root).as_posix())
    try:
        hooks.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=hooks, prefix=".autoresearch-", delete=False) as fh:
            fh.write(script)
        os.chmod(fh.name, 0o755)
        os.replace(fh.name, target)
    except OSError as exc:
        return f"{hooks} cannot be written ({exc.strerror or exc})"
    return None


def remove_ref_guard(repo: Repo) -> bool:
    """Remove our reference-transaction hook and put back the one it ran first; whether ours was there."""
    hooks = hooks_dir(repo)
    target, chained = hooks / REF_GUARD, hooks / CHAINED
    if not _is_guard(target):
        return False
    if os.path.lexists(chained):
        os.replace(chained, target)
    else:
        target.unlink()
    return True


def branch_ref(repo: Repo, branch: str) -> Ref | None:
    """The branch `refs/heads/<branch>` as it is (its commit, or the ref it points to when symbolic)."""
    name = f"{BRANCH_REF}{branch}"
    return next((r for r in list_refs(repo, name) if r.name == name), None)


def trailer(message: str, key: str) -> str | None:
    """The value of trailer `key` in the last paragraph of a commit message (its last occurrence)."""
    last = message.strip().rsplit("\n\n", 1)[-1]
    values = [line.split(":", 1)[1].strip() for line in last.splitlines() if line.startswith(key + ":")]
    return values[-1] if values else None


# --- worktrees of our own (the build cache) -----------------------------------------------------------


def worktree_add(repo: Repo, path: Path, commit: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    git(repo, "worktree", "add", "--detach", "--force", str(path), commit)


def worktree_remove(repo: Repo, path: Path) -> None:
    try:
        git(repo, "worktree", "remove", "--force", "--force", str(path))
    except GitError:
        shutil.rmtree(path, ignore_errors=True)
        worktree_prune(repo)


def worktree_prune(repo: Repo) -> None:
    """Forget worktrees whose folder is gone."""
    git(repo, "worktree", "prune")


# --- protected paths ----------------------------------------------------------------------------------

# Always protected, whatever the config says: the session folder (config, ledger, logs: the evidence),
# and the files that change how other files are checked out (attributes: filters, line endings;
# submodules).
SESSION_DIR = ".autoresearch"
ALWAYS_PROTECTED_NAMES = (".gitattributes", ".gitmodules")
SCRIPTS = ("autoresearch.sh", "autoresearch.checks.sh")  # the benchmark and the checks: how a candidate is judged


def normalize_protected(entry: str) -> str:
    """A protected-path entry as git names paths: no './', no trailing '/', no '..' or absolute paths."""
    path = entry.replace("\\", "/") if os.sep == "\\" else entry
    while path.startswith("./"):
        path = path[2:]
    norm = posixpath.normpath(path) if path else ""
    if not norm or norm == "." or norm.startswith("/") or norm == ".." or norm.startswith("../"):
        raise ValueError(f"protected entry {entry!r} must be a path inside the repository (e.g. bench/run.sh "
                         "or 'data/*.csv'), not empty, absolute or leading outside with '..'")
    return norm


def _always_protected(path: str) -> bool:
    folded = path.casefold()
    top = folded.split("/", 1)[0]
    return top == SESSION_DIR or folded in SCRIPTS or folded.rsplit("/", 1)[-1] in ALWAYS_PROTECTED_NAMES


def _is_protected(path: str, pattern: str) -> bool:
    if path == pattern or path.startswith(pattern + "/") or fnmatch.fnmatchcase(path, pattern):
        return True
    # a file or link where a protected path has a folder changes how the protected path is checked out
    parts, pat_parts = path.split("/"), pattern.split("/")
    return len(parts) < len(pat_parts) and all(fnmatch.fnmatchcase(p, g) for p, g in zip(parts, pat_parts,
                                                                                         strict=False))


def protected_changes(changed: list[str], protected: list[str]) -> list[str]:
    """Changed paths that match a protected path, directory or glob pattern, or are always protected.

    Compared case-insensitively: on a case-insensitive file system (macOS, Windows) AUTORESEARCH.SH is
    checked out over autoresearch.sh."""
    patterns = [normalize_protected(p).casefold() for p in protected]
    return [path for path in changed
            if _always_protected(path) or any(_is_protected(path.casefold(), pat) for pat in patterns)]


_protected_files: dict[tuple[str, str, tuple[str, ...]], list[str]] = {}


def protected_files(repo: Repo, commit: str, protected: list[str]) -> list[str]:
    """The protected paths of `commit` (a sha: kept by it) as a job binds them, the session's scripts aside
    (bound from the session's own bytes): each topmost folder that holds nothing but protected files and
    links, and each protected file outside such a folder. One bind per folder, whatever it holds: what a
    job's commands may read and never change (worktrees.Worktrees.frozen_store holds their bytes)."""
    key = (str(repo.git_dir), commit, tuple(protected))
    if key not in _protected_files:
        entries = tree_entries(repo, commit)
        kinds = {e.path: e.mode for e in entries}
        hit = {p for p in protected_changes([e.path for e in entries if e.mode in ("100644", "100755", "120000")],
                                            protected) if p not in SCRIPTS}
        mixed: set[str] = set()  # folders holding something unprotected (a gitlink counts: it is not bound)
        for path in kinds:
            if path not in hit:
                parts = path.split("/")
                mixed.update("/".join(parts[:i]) for i in range(1, len(parts)))
        units = set()
        for path in hit:
            parts = path.split("/")
            top = next(("/".join(parts[:i]) for i in range(1, len(parts)) if "/".join(parts[:i]) not in mixed), None)
            if top is not None:
                units.add(top)
            elif kinds[path] != "120000":  # a link outside a bound folder: bound where it points, if at all
                units.add(path)
        _protected_files[key] = sorted(units)
    return _protected_files[key]


def new_gitlinks(repo: Repo, base: str, tree: str) -> list[str]:
    """Paths that are nested repositories (gitlinks, mode 160000) in `tree` but not in `base`."""
    def links(t: str) -> dict[str, str]:
        return {e.path: e.sha for e in tree_entries(repo, t) if e.mode == "160000"}

    before = links(base)
    return sorted(p for p, sha in links(tree).items() if before.get(p) != sha)

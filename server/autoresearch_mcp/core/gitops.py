"""The project's git module: every git operation the package runs, as plain typed functions.

One style: each function runs git's documented command line through one runner, `_run`, which
calls GitPython's command wrapper (`Git.execute`) with a timeout, and parses git's machine output
(`-z`, NUL-separated, wherever git offers it). Why the wrapper rather than raw subprocess: the
repository handle of the whole package (and of its tests) is a `git.Repo`; the wrapper raises one
exception type carrying git's own stderr (`GitError`, which the tool layer turns into a ToolError)
and merges a call's environment over the process's (the throwaway GIT_INDEX_FILE below). GitPython's
object API (repo.head, repo.index, ...) is not used: it would be a second way of asking git.

Candidates become commits on private refs (`refs/autoresearch/exp/<id>`) built with a throwaway index
(a temporary GIT_INDEX_FILE), so the user's index, HEAD and files are never touched unless they asked.

Only this module imports GitPython or runs git; elsewhere a repository is a `gitops.Repo` whose
`working_dir` may be read (tests/test_gitops_only.py checks it). The exceptions are the hooks: the
PreToolUse guard (guard.py) runs with the system python3 before the package's environment exists, and
the Stop hook (hooks.py), at the end of every turn, is kept free of GitPython's import; both ask git
read-only questions with the stdlib. Every git run here is the server's own (OWN_GIT): no hook of the
repository runs from it.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import posixpath
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

import git

from autoresearch_mcp import limits
from autoresearch_mcp.errors import InputError, RefusedError, StateError

logger = logging.getLogger(__name__)

Repo = git.Repo
GitError = git.GitCommandError  # git ran and failed (or outlasted TIMEOUT_S); `.stderr` holds what git said

EXP_REF = "refs/autoresearch/exp/"
REVIEW_REF = "refs/autoresearch/review/"  # + a review branch's name: the tip finalize last wrote there
BRANCH_REF = "refs/heads/"
SESSION_BRANCHES = "refs/heads/autoresearch/"
# Where a ref shadows a session branch `autoresearch/<tag>`: git resolves that short name by trying
# `<name>`, `refs/<name>`, `refs/tags/<name>` before `refs/heads/<name>` (and `refs/remotes/<name>` after it), so
# a ref there is what a short name means to git, or to a person reading `git log autoresearch/<tag>`.
SHADOWS = ("refs/tags/autoresearch/", "refs/remotes/autoresearch/", "refs/autoresearch/")
TOP_LEVEL = "autoresearch"  # a folder of the git directory holding `autoresearch/<tag>` refs outside refs/
# A git that hangs (a stalled network file system, a filter process that waits) must not hold the
# server forever; the limit is far above a normal run of any command here.
TIMEOUT_S = 600.0
_BOT = {"GIT_AUTHOR_NAME": "autoresearch", "GIT_AUTHOR_EMAIL": "autoresearch@localhost",
        "GIT_COMMITTER_NAME": "autoresearch", "GIT_COMMITTER_EMAIL": "autoresearch@localhost"}


# --- the runner ---------------------------------------------------------------------------------------


# Every git the server runs is its own: no hook of the repository runs (a planted post-checkout would
# run on `worktree add`, and the session's reference-transaction guard is meant for everyone else),
# no replacement object stands in for a commit (`git replace` could make a commit show another tree),
# and no fsmonitor program is started.
OWN_GIT = ("--no-replace-objects", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")


def _run(where: Repo | Path, *args: str, env: dict[str, str] | None = None, stdin: str | bytes | None = None,
         binary: bool = False, out: BinaryIO | None = None, own: bool = True) -> Any:
    """git `args` in the repository (or directory) `where`: its stdout as text (bytes with `binary`,
    streamed into `out` when given); raises GitError when git fails. `own=False` leaves out OWN_GIT,
    only to read the repository's own settings (where its hooks live)."""
    runner, at = (where.git, []) if isinstance(where, Repo) else (git.Git(), ["-C", str(where)])
    with _stdin(stdin) as istream:
        return runner.execute(
            ["git", *(OWN_GIT if own else ()), *at, *args], env=env, istream=istream, output_stream=out,
            stdout_as_string=not binary,
            strip_newline_in_stdout=not binary,
            kill_after_timeout=None if sys.platform == "win32" else TIMEOUT_S)  # GitPython: not on Windows


def _git(where: Repo | Path, *args: str, env: dict[str, str] | None = None, stdin: str | bytes | None = None) -> str:
    return cast(str, _run(where, *args, env=env, stdin=stdin))


@contextlib.contextmanager
def _stdin(data: str | bytes | None) -> Iterator[BinaryIO | None]:
    """`data` as a file git reads on its standard input (the wrapper takes a file, not bytes)."""
    if data is None:
        yield None
        return
    with tempfile.TemporaryFile() as fh:
        fh.write(data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data)
        fh.seek(0)
        yield fh


def _names(out: str) -> list[str]:
    """A `-z` list of paths as plain names (never git's quoted form)."""
    return [p for p in out.split("\0") if p]


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
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
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
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise InputError(f"{str(path)!r} is not a git repository") from None


def is_work_tree(path: Path) -> bool:
    """Whether `path` is a folder inside a git work tree (not a .git folder, nor outside any repository)."""
    try:
        return _git(path, "rev-parse", "--is-inside-work-tree") == "true"
    except GitError:
        return False


def init_repo(path: Path, branch: str) -> Repo:
    """A new repository in `path` (created if missing) whose first branch is `branch`."""
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q", "-b", branch)
    return Repo(path)


def commit_all(repo: Repo, message: str, name: str, email: str) -> str:
    """Commit every file of the work tree (tracked or not, ignored ones excepted) as name <email>."""
    _git(repo, "add", "-A")
    _git(repo, "-c", f"user.name={name}", "-c", f"user.email={email}", "commit", "-q", "-m", message)
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
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
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
    return _git(repo, "rev-parse", f"{commit}^{{tree}}")


def current_branch(repo: Repo) -> str | None:
    """The branch HEAD is on (main, autoresearch/x), None when HEAD is detached."""
    try:
        ref = _git(repo, "symbolic-ref", "-q", "HEAD")
    except GitError:
        return None
    return ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else None


def branch_exists(repo: Repo, name: str) -> bool:
    try:
        _git(repo, "show-ref", "--verify", "--quiet", f"{BRANCH_REF}{name}")
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
    the git directory), the server's own refs/autoresearch/exp/ and review/ aside; each with the command that
    deletes it (git refuses to delete a top-level name it let be written: the file goes)."""
    found = {r.name: f"git update-ref -d {r.name}" for r in list_refs(repo, *SHADOWS)
             if not r.name.startswith((EXP_REF, REVIEW_REF))}
    for top in {Path(repo.git_dir), Path(repo.common_dir)}:
        for dirpath, _, files in os.walk(top / TOP_LEVEL):
            for f in files:
                path = Path(dirpath, f)
                found[path.relative_to(top).as_posix()] = f"rm -- {shlex.quote(str(path))}"
    return dict(sorted(found.items()))


def valid_ref(repo: Repo, ref: str) -> bool:
    """Whether git accepts `ref` (refs/heads/x) as the name of a ref."""
    try:
        _git(repo, "check-ref-format", ref)
    except GitError:
        return False
    return True


def is_ancestor(repo: Repo, ancestor: str, descendant: str) -> bool:
    try:
        _git(repo, "merge-base", "--is-ancestor", ancestor, descendant)
    except GitError as exc:
        if exc.status == 1:
            return False
        raise
    return True


def merge_base(repo: Repo, a: str, b: str) -> str | None:
    """The best common ancestor of two commits, None for unrelated histories."""
    try:
        return _git(repo, "merge-base", a, b) or None
    except GitError:
        return None


def count_commits(repo: Repo, since: str, until: str) -> int:
    """How many commits `until` has that `since` has not."""
    return int(_git(repo, "rev-list", "--count", f"{since}..{until}"))


def first_parent_commits(repo: Repo, start: str, end: str) -> list[str]:
    """The commits from `start` (excluded) to `end` along first parents, oldest first."""
    return _git(repo, "rev-list", "--reverse", "--first-parent", f"{start}..{end}").split()


def list_refs(repo: Repo, *prefixes: str, newest_first: bool = False) -> list[Ref]:
    """The refs under `prefixes` (refs/heads, refs/autoresearch/...), by name or newest commit first."""
    order = ["--sort=-committerdate"] if newest_first else []
    out = _git(repo, "for-each-ref", *order, "--format=%(refname)%00%(refname:short)%00%(objectname)%00%(symref)",
               *prefixes)
    return [Ref(*line.split("\0")) for line in out.splitlines() if line]


def worktrees(repo: Repo) -> list[Worktree]:
    """The repository's work trees, the main one first (`--porcelain` without -z, which needs git 2.36)."""
    found: list[Worktree] = []
    for line in _git(repo, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            found.append(Worktree(Path(line.split(" ", 1)[1]), None))
        elif line.startswith("branch ") and found:
            found[-1] = Worktree(found[-1].path, line.split(" ", 1)[1])
    return found


def update_ref(repo: Repo, ref: str, new: str, old: str | None = None, reason: str | None = None) -> None:
    """Point `ref` at `new`; with `old` (the zero sha: must not exist yet), only if it still points there."""
    message = ["-m", reason] if reason else []
    _git(repo, "update-ref", *message, ref, new, *([old] if old is not None else []))


def delete_ref(repo: Repo, ref: str, old: str) -> None:
    """Delete `ref`, only if it still points at `old`."""
    _git(repo, "update-ref", "-d", ref, old)


def delete_branch(repo: Repo, name: str) -> None:
    _git(repo, "branch", "-D", name)


# --- reading commits and trees ------------------------------------------------------------------------


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    parents: list[str]
    message: str
    identity: dict[str, str]  # GIT_AUTHOR_*/GIT_COMMITTER_* (name, email, raw date): replays author and committer


@dataclass(frozen=True)
class Change:
    """One path that differs between two trees."""

    path: str
    status: str  # A added, D deleted, M modified, T type changed
    mode: str  # its mode on the new side ("000000" when deleted)
    blob: str  # its object on the new side (zeros when deleted)


@dataclass(frozen=True)
class LineCount:
    path: str
    added: int | None  # None for a binary file
    deleted: int | None


@dataclass(frozen=True)
class LogEntry:
    sha: str
    author: str
    authored: str  # ISO 8601
    committed: str  # ISO 8601
    subject: str


@dataclass(frozen=True)
class BranchCommit:
    """A commit of a branch's history, as the report shows it."""

    sha: str
    committed_at: float  # unix time
    message: str  # the whole message, trailers included
    stat: str  # git's diffstat


@dataclass(frozen=True)
class TreeEntry:
    path: str
    mode: str
    kind: str  # blob, tree or commit (a nested repository)
    sha: str
    size: int | None  # a blob's size in bytes, with `sizes`


def commit_info(repo: Repo, sha: str) -> CommitInfo:
    fields = _git(repo, "show", "-s", "--date=raw",
                  "--format=%an%x00%ae%x00%ad%x00%cn%x00%ce%x00%cd%x00%P%x00%B", sha)
    an, ae, ad, cn, ce, cd, parents, message = fields.split("\x00", 7)
    identity = {"GIT_AUTHOR_NAME": an, "GIT_AUTHOR_EMAIL": ae, "GIT_AUTHOR_DATE": ad,
                "GIT_COMMITTER_NAME": cn, "GIT_COMMITTER_EMAIL": ce, "GIT_COMMITTER_DATE": cd}
    return CommitInfo(sha, parents.split(), message, identity)


def changes(repo: Repo, a: str, b: str, paths: Sequence[str] = ()) -> list[Change]:
    """What differs from tree-ish `a` to tree-ish `b` (under `paths`), renames as a deletion and an addition."""
    raw = _git(repo, "diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", a, b, *_pathspec(paths))
    tokens = raw.split("\0")
    found = []
    for meta, path in zip(tokens[0::2], tokens[1::2], strict=False):
        _, new_mode, _, new_blob, status = meta.lstrip(":").split(" ")
        found.append(Change(path, status, new_mode, new_blob))
    return found


def changed_paths(repo: Repo, a: str, b: str) -> list[str]:
    """Paths that differ between two commits, as plain names (never git's quoted form)."""
    return [c.path for c in changes(repo, a, b)]


def line_counts(repo: Repo, a: str, b: str, paths: Sequence[str] = ()) -> list[LineCount]:
    """Lines added and deleted per changed file from `a` to `b` (under `paths`)."""
    out = _git(repo, "diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", "--numstat", a, b, *_pathspec(paths))
    counts = []
    for entry in out.split("\0"):
        if entry:
            added, deleted, path = entry.split("\t", 2)
            counts.append(LineCount(path, int(added) if added.isdigit() else None,
                                    int(deleted) if deleted.isdigit() else None))
    return counts


def log(repo: Repo, revisions: str, paths: Sequence[str] = (), limit: int | None = None) -> list[LogEntry]:
    """The commits of `revisions` (a range such as base..head, or one commit and its history), newest first."""
    most = [f"--max-count={limit}"] if limit is not None else []
    out = _git(repo, "log", "-z", *most, "--format=%H%x00%an%x00%aI%x00%cI%x00%s", revisions, *_pathspec(paths))
    fields = out.split("\0")
    return [LogEntry(*fields[i:i + 5]) for i in range(0, len(fields) - 4, 5)]


def branch_log(repo: Repo, start: str, branch: str) -> list[BranchCommit]:
    """The commits of `branch` since `start` along first parents, oldest first, with messages and diffstats.

    git log has no NUL-separated form that keeps the diffstat, so %x1e opens each record and %x1f ends
    each field (control characters no commit message holds in practice)."""
    out = _git(repo, "log", "--reverse", "--first-parent", "--stat=100", "--format=%x1e%H%x1f%ct%x1f%B%x1f",
               f"{start}..{BRANCH_REF}{branch}", "--")
    commits = []
    for chunk in out.split("\x1e")[1:]:
        sha, ts, message, stat = [*chunk.split("\x1f"), "", "", ""][:4]
        commits.append(BranchCommit(sha, float(ts or 0), message.strip(), stat.strip("\n")))
    return commits


def tracked(repo: Repo, commit: str, path: str) -> list[str]:
    """The files `commit` holds at `path` (the path itself, or the files in that folder)."""
    return _names(_git(repo, "ls-tree", "-r", "--name-only", "-z", commit, "--", path))


def tree_entries(repo: Repo, treeish: str, folder: str = ".", sizes: bool = False) -> list[TreeEntry]:
    """Every entry under `folder` (from the top) of `treeish`, recursively; blob sizes with `sizes`."""
    out = _git(repo, "ls-tree", "-r", "-z", "--full-tree", *(["-l"] if sizes else []), treeish, "--", folder)
    entries = []
    for entry in out.split("\0"):
        if entry:
            meta, path = entry.split("\t", 1)
            mode, kind, sha, *size = meta.split()
            entries.append(TreeEntry(path, mode, kind, sha, int(size[0]) if size and size[0].isdigit() else None))
    return entries


def read_blobs(repo: Repo, shas: Sequence[str]) -> list[bytes]:
    """The content of each blob, in order (one `cat-file --batch` for all)."""
    if not shas:
        return []
    out = cast(bytes, _run(repo, "cat-file", "--batch", stdin="".join(f"{sha}\n" for sha in shas), binary=True))
    blobs, pos = [], 0
    for sha in shas:
        header_end = out.index(b"\n", pos)
        header = out[pos:header_end].split()
        if len(header) != 3:
            raise StateError(f"object {sha} is not in {repo.working_dir} ({header[-1].decode(errors='replace')})")
        length = int(header[2])
        blobs.append(out[header_end + 1: header_end + 1 + length])
        pos = header_end + 1 + length + 1
    return blobs


def file_at(repo: Repo, commit: str, path: str, max_bytes: int | None = None) -> bytes | None:
    """The bytes of file `path` as `commit` holds it; None when it holds no such file, or one over `max_bytes`."""
    found = _git(repo, "cat-file", "--batch-check=%(objecttype) %(objectsize)", stdin=f"{commit}:{path}\n").split()
    if found[:1] != ["blob"] or (max_bytes is not None and int(found[1]) > max_bytes):
        return None  # "<commit>:<path> missing", or a folder
    return cast(bytes, _run(repo, "cat-file", "blob", f"{commit}:{path}", binary=True))


def archive(repo: Repo, commit: str, out: Path, paths: Sequence[str] = ()) -> None:
    """`commit`'s files (only `paths`, taken literally, when given) as a .tar.gz written to `out`."""
    with open(out, "wb") as fh:
        _run(repo, "--literal-pathspecs", "archive", "--format=tar.gz", commit, *_pathspec(paths), out=fh)


def grep_files(path: Path, words: Iterable[str], globs: Sequence[str]) -> list[str]:
    """The tracked files under `path` matching `globs` that contain any of `words` as a whole word."""
    args = ["grep", "-l", "-z", "-F", "-w"]
    for word in sorted(words):
        args += ["-e", word]
    try:
        return _names(_git(path, *args, *_pathspec(globs)))
    except GitError as exc:
        if exc.status == 1:  # no match
            return []
        raise


def dirty_files(repo: Repo) -> list[str]:
    """Modified, staged and untracked (not ignored) paths of the work tree, as plain names."""
    return _status_paths(_git(repo, "status", "--porcelain", "-z", "--untracked-files=all"))


def _status_paths(out: str) -> list[str]:
    """The paths of `git status --porcelain -z` output."""
    entries = out.split("\0")
    files, i = [], 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) > 3:
            files.append(entry[3:])
            if entry[0] in "RC":
                i += 1  # a rename's source follows as its own entry
    return files


def untracked_files(repo: Repo) -> list[str]:
    return _names(_git(repo, "ls-files", "--others", "--exclude-standard", "-z"))


def diff(repo: Repo, a: str, b: str) -> str:
    """The change from commit a to commit b as a patch `patch_tree` can apply (binary files included)."""
    return _git(repo, "diff", "--binary", "--full-index", "--no-renames", a, b)


def diff_hunks(repo: Repo, a: str, b: str) -> str:
    """The text change from commit a to commit b without context lines, each hunk headed by the line of its
    enclosing function (git's funcname), for reading what a change touches."""
    return _git(repo, "diff", "-U0", "--no-renames", "--no-color", "--no-ext-diff", a, b)


def _pathspec(paths: Sequence[str]) -> list[str]:
    return ["--", *paths]  # always: a revision is never taken for a path, nor a path for a revision


# --- writing objects: trees and commits, never a ref or the work tree ---------------------------------


@dataclass(frozen=True)
class IndexEntry:
    mode: str  # 100644, 100755, 120000; "0" removes the path
    blob: str
    path: str


def _with_temp_index(repo: Repo, base: str, *fill: str, stdin: str | None = None) -> str:
    """Write a tree: read `base` into a throwaway index, run one `fill` command on it (fed `stdin`)."""
    with tempfile.TemporaryDirectory(prefix="autoresearch-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(repo, "read-tree", base, env=env)
        _git(repo, *fill, env=env, stdin=stdin)
        return _git(repo, "write-tree", env=env)


def hash_file(repo: Repo, path: Path) -> str:
    """Store the file at `path` as a blob; its sha."""
    return _git(repo, "hash-object", "-w", "--", str(path))


def tree_with(repo: Repo, base: str, entries: Sequence[IndexEntry]) -> str:
    """`base`'s tree with `entries` set (or removed), as a new tree."""
    info = "".join(f"{e.mode} {e.blob}\t{e.path}\0" for e in entries)
    return _with_temp_index(repo, base, "update-index", "-z", "--index-info", stdin=info)


def merge_trees(repo: Repo, base: str, ours: str, theirs: str) -> str:
    """The three-way merge of two trees from their common `base`, as a tree; GitError on a conflict."""
    return _with_temp_index(repo, ours, "read-tree", "-m", "-i", "--aggressive", base, ours, theirs)


def commit_tree(repo: Repo, tree: str, parent: str, message: str, identity: dict[str, str] | None = None) -> str:
    """A commit of `tree` on `parent`; `identity` (GIT_AUTHOR_*/GIT_COMMITTER_* variables) replays a
    commit's author, committer and dates, otherwise the user's identity (or a bot's) is used."""
    env = identity if identity is not None else {} if _has_identity(repo) else _BOT
    return _git(repo, "commit-tree", tree, "-p", parent, "-F", "-", env=env, stdin=message)


def _has_identity(repo: Repo) -> bool:
    try:
        _git(repo, "var", "GIT_AUTHOR_IDENT")
        _git(repo, "var", "GIT_COMMITTER_IDENT")
        return True
    except GitError:
        return False


def snapshot_worktree(repo: Repo, base: str) -> str:
    """The work tree's content (tracked changes and untracked, non-ignored files) as a tree.

    The throwaway index starts as a copy of the real one: `add -A` makes it match the work tree
    whatever it held, and its stat cache spares git from hashing every file of a large tree. The copy
    keeps the index's modification time: git trusts an entry's stat data only when the file is older
    than the index, and a copy stamped now would pass off a same-size edit made in the second the
    index was written (git compares whole seconds) as unchanged.
    """
    with tempfile.TemporaryDirectory(prefix="autoresearch-index-") as tmp:
        index = Path(tmp) / "index"
        real = Path(repo.git_dir) / "index"
        env = {"GIT_INDEX_FILE": str(index)}
        if real.exists():
            shutil.copy2(real, index)
        else:
            _git(repo, "read-tree", base, env=env)
        _git(repo, "add", "-A", "--", ".", env=env)
        return _git(repo, "write-tree", env=env)


def patch_tree(repo: Repo, base: str, patch: str, three_way: bool = False) -> str:
    """`patch` (a unified diff) applied onto `base`, as a tree; the work tree is not involved. With `three_way`, a
    hunk whose context moved is merged from the blobs the patch names (git apply --3way: a change beside another
    in the same function applies; one that overlaps it does not)."""
    if not patch.strip():
        raise InputError("patch is empty; pass a unified diff (the output of `git diff`)")
    with tempfile.NamedTemporaryFile("w", suffix=".patch", delete=False) as fh:
        fh.write(patch if patch.endswith("\n") else patch + "\n")
        patch_path = fh.name
    try:
        return _with_temp_index(repo, base, "apply", "--cached", "--whitespace=nowarn",
                                *(["--3way"] if three_way else []), patch_path)
    except GitError as exc:
        detail = (exc.stderr or "").strip().replace("\n", " ")[:800]
        raise RefusedError(
            f"the patch does not apply onto the session head {base[:12]}: {detail}. "
            "Rebase it on the session branch (git diff against its tip) and launch again"
        ) from None
    finally:
        os.unlink(patch_path)


def object_union(repos: Sequence[Repo], scratch: Path) -> Repo:
    """A scratch bare repository that borrows the objects of `repos` (git alternates), so commits of
    several clones can be compared without writing anything into any of them."""
    scratch.mkdir(parents=True, exist_ok=True)
    _git(scratch, "init", "-q", "--bare")
    bare = Repo(scratch)
    alternates = Path(bare.git_dir) / "objects" / "info" / "alternates"
    alternates.write_text("".join(f"{Path(r.common_dir).resolve() / 'objects'}\n" for r in repos), encoding="utf-8")
    return bare



# --- moving the work tree and HEAD (only where the user asked for it) ---------------------------------


def checkout(repo: Repo, rev: str) -> None:
    """Check out branch `rev` (or commit `rev`, detaching HEAD there)."""
    _git(repo, "checkout", rev)


def checkout_new_branch(repo: Repo, branch: str, commit: str) -> None:
    _git(repo, "checkout", "-b", branch, commit)


def checkout_detached(repo: Repo, commit: str) -> None:
    """Move a work tree of ours to `commit`, whatever it held (only for worktrees the package owns)."""
    _git(repo, "checkout", "--detach", "--force", commit)


def fast_forward(repo: Repo, commit: str) -> None:
    """Move the current branch and work tree forward to `commit`; GitError if that is not a fast-forward
    or local changes would be overwritten."""
    _git(repo, "merge", "--ff-only", "--quiet", commit)


def reset_hard(repo: Repo, commit: str) -> None:
    _git(repo, "reset", "--hard", "--quiet", commit)


def reset_saving(repo: Repo, head: str, message: str) -> str:
    """Reset the work tree and index to `head`, first saving exactly what they held as a stash entry
    (index with partly staged files, tracked changes, untracked files), which `git stash apply --index`
    restores. Only what the stash holds is removed: ignored files and empty folders stay."""
    identity = {} if _has_identity(repo) else _BOT
    with tempfile.TemporaryDirectory(prefix="autoresearch-index-") as tmp:
        index_tree = _git(repo, "write-tree")  # the real index, as it is
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        real = Path(repo.git_dir) / "index"
        if real.exists():
            shutil.copy2(real, Path(tmp) / "index")  # with its time: see snapshot_worktree
        _git(repo, "add", "-u", "--", ".", env=env)  # tracked files as in the work tree
        work_tree = _git(repo, "write-tree", env=env)
        untracked = untracked_files(repo)
        parents = ["-p", head, "-p", commit_tree(repo, index_tree, head, f"index on {message}")]
        if untracked:
            (Path(tmp) / "index").unlink()
            _git(repo, "update-index", "--add", "-z", "--stdin", env=env,
                 stdin="".join(p + "\0" for p in untracked))
            untracked_tree = _git(repo, "write-tree", env=env)
            parents += ["-p", _git(repo, "commit-tree", untracked_tree, "-m", f"untracked files on {message}",
                                   env=identity)]
        stash = _git(repo, "commit-tree", work_tree, *parents, "-m", message, env=identity)
    _git(repo, "stash", "store", "-m", message, stash)
    _git(repo, "reset", "--hard", head)
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
    return Path(cast(str, _run(repo, "rev-parse", "--path-format=absolute", "--git-path", "hooks", own=False)))


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


def worktree_drift(path: Path, tree: str) -> list[str]:
    """How the work tree at `path` differs from git tree `tree` in its tracked files: another HEAD, or the
    tracked paths changed (files the build made, untracked or ignored, are not looked at)."""
    head = _git(path, "rev-parse", "HEAD^{tree}")
    if head != tree:
        return [f"HEAD holds tree {head[:12]}, not {tree[:12]}"]
    return _status_paths(_git(path, "status", "--porcelain", "-z", "--untracked-files=no"))


# --- worktrees of our own (the build cache) -----------------------------------------------------------


def worktree_add(repo: Repo, path: Path, commit: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    _git(repo, "worktree", "add", "--detach", "--force", str(path), commit)


def worktree_remove(repo: Repo, path: Path) -> None:
    try:
        _git(repo, "worktree", "remove", "--force", "--force", str(path))
    except GitError:
        shutil.rmtree(path, ignore_errors=True)
        worktree_prune(repo)


def worktree_prune(repo: Repo) -> None:
    """Forget worktrees whose folder is gone."""
    _git(repo, "worktree", "prune")


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

"""Reading commits and trees: what git holds, asked and never written (one of the gitops modules; gitops.py
re-exports every public name, so callers ask `gitops`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from autoresearch_mcp.errors import StateError
from autoresearch_mcp.git.gitrun import GitError, Repo, git, names, run


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
class TreeEntry:
    path: str
    mode: str
    kind: str  # blob, tree or commit (a nested repository)
    sha: str
    size: int | None  # a blob's size in bytes, with `sizes`


def commit_info(repo: Repo, sha: str) -> CommitInfo:
    fields = git(repo, "show", "-s", "--date=raw",
                 "--format=%an%x00%ae%x00%ad%x00%cn%x00%ce%x00%cd%x00%P%x00%B", sha)
    an, ae, ad, cn, ce, cd, parents, message = fields.split("\x00", 7)
    identity = {"GIT_AUTHOR_NAME": an, "GIT_AUTHOR_EMAIL": ae, "GIT_AUTHOR_DATE": ad,
                "GIT_COMMITTER_NAME": cn, "GIT_COMMITTER_EMAIL": ce, "GIT_COMMITTER_DATE": cd}
    return CommitInfo(sha, parents.split(), message, identity)


def changes(repo: Repo, a: str, b: str, paths: Sequence[str] = ()) -> list[Change]:
    """What differs from tree-ish `a` to tree-ish `b` (under `paths`), renames as a deletion and an addition."""
    raw = git(repo, "diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", a, b, *_pathspec(paths))
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
    out = git(repo, "diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", "--numstat", a, b, *_pathspec(paths))
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
    out = git(repo, "log", "-z", *most, "--format=%H%x00%an%x00%aI%x00%cI%x00%s", revisions, *_pathspec(paths))
    fields = out.split("\0")
    return [LogEntry(*fields[i:i + 5]) for i in range(0, len(fields) - 4, 5)]


def tracked(repo: Repo, commit: str, path: str) -> list[str]:
    """The files `commit` holds at `path` (the path itself, or the files in that folder)."""
    return names(git(repo, "ls-tree", "-r", "--name-only", "-z", commit, "--", path))


def tree_entries(repo: Repo, treeish: str, folder: str = ".", sizes: bool = False) -> list[TreeEntry]:
    """Every entry under `folder` (from the top) of `treeish`, recursively; blob sizes with `sizes`."""
    out = git(repo, "ls-tree", "-r", "-z", "--full-tree", *(["-l"] if sizes else []), treeish, "--", folder)
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
    out = cast(bytes, run(repo, "cat-file", "--batch", stdin="".join(f"{sha}\n" for sha in shas), binary=True))
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
    found = git(repo, "cat-file", "--batch-check=%(objecttype) %(objectsize)", stdin=f"{commit}:{path}\n").split()
    if found[:1] != ["blob"] or (max_bytes is not None and int(found[1]) > max_bytes):
        return None  # "<commit>:<path> missing", or a folder
    return cast(bytes, run(repo, "cat-file", "blob", f"{commit}:{path}", binary=True))


def archive(repo: Repo, commit: str, out: Path, paths: Sequence[str] = ()) -> None:
    """`commit`'s files (only `paths`, taken literally, when given) as a .tar.gz written to `out`."""
    with open(out, "wb") as fh:
        run(repo, "--literal-pathspecs", "archive", "--format=tar.gz", commit, *_pathspec(paths), out=fh)


def grep_files(path: Path, words: Iterable[str], globs: Sequence[str]) -> list[str]:
    """The tracked files under `path` matching `globs` that contain any of `words` as a whole word."""
    args = ["grep", "-l", "-z", "-F", "-w"]
    for word in sorted(words):
        args += ["-e", word]
    try:
        return names(git(path, *args, *_pathspec(globs)))
    except GitError as exc:
        if exc.status == 1:  # no match
            return []
        raise


def words_at(repo: Repo, commit: str, words: Iterable[str]) -> set[str]:
    """Which of `words` some tracked file of `commit` holds as a whole word."""
    wanted = sorted({w for w in words if w})
    if not wanted:
        return set()
    args = ["grep", "-o", "-h", "-I", "-F", "-w"]
    for word in wanted:
        args += ["-e", word]
    try:
        out = git(repo, *args, commit)
    except GitError as exc:
        if exc.status == 1:  # no match
            return set()
        raise
    return {line.strip() for line in out.splitlines()} & set(wanted)


def dirty_files(repo: Repo) -> list[str]:
    """Modified, staged and untracked (not ignored) paths of the work tree, as plain names."""
    return _status_paths(git(repo, "status", "--porcelain", "-z", "--untracked-files=all"))


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
    return names(git(repo, "ls-files", "--others", "--exclude-standard", "-z"))


def diff(repo: Repo, a: str, b: str) -> str:
    """The change from commit a to commit b as a patch `patch_tree` can apply (binary files included)."""
    return git(repo, "diff", "--binary", "--full-index", "--no-renames", a, b)


def diff_hunks(repo: Repo, a: str, b: str) -> str:
    """The text change from commit a to commit b without context lines, each hunk headed by the line of its
    enclosing function (git's funcname), for reading what a change touches."""
    return git(repo, "diff", "-U0", "--no-renames", "--no-color", "--no-ext-diff", a, b)


def _pathspec(paths: Sequence[str]) -> list[str]:
    return ["--", *paths]  # always: a revision is never taken for a path, nor a path for a revision


def worktree_drift(path: Path, tree: str) -> list[str]:
    """How the work tree at `path` differs from git tree `tree` in its tracked files: another HEAD, or the
    tracked paths changed (files the build made, untracked or ignored, are not looked at)."""
    head = git(path, "rev-parse", "HEAD^{tree}")
    if head != tree:
        return [f"HEAD holds tree {head[:12]}, not {tree[:12]}"]
    return _status_paths(git(path, "status", "--porcelain", "-z", "--untracked-files=no"))

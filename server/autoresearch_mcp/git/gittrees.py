"""Writing objects: trees and commits built in a throwaway index, never a ref, the user's index or the work tree
(one of the gitops modules; gitops.py re-exports every public name, so callers ask `gitops`). Candidates are
built so: a patch applied, two trees merged, the work tree snapshotted, a commit made on a parent."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autoresearch_mcp.errors import InputError, RefusedError
from autoresearch_mcp.git.gitrun import GitError, Repo, git

_BOT = {"GIT_AUTHOR_NAME": "autoresearch", "GIT_AUTHOR_EMAIL": "autoresearch@localhost",
        "GIT_COMMITTER_NAME": "autoresearch", "GIT_COMMITTER_EMAIL": "autoresearch@localhost"}


@dataclass(frozen=True)
class IndexEntry:
    mode: str  # 100644, 100755, 120000; "0" removes the path
    blob: str
    path: str


def _with_temp_index(repo: Repo, base: str, *fill: str, stdin: str | None = None) -> str:
    """Write a tree: read `base` into a throwaway index, run one `fill` command on it (fed `stdin`)."""
    with tempfile.TemporaryDirectory(prefix="autoresearch-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(repo, "read-tree", base, env=env)
        git(repo, *fill, env=env, stdin=stdin)
        return git(repo, "write-tree", env=env)


def hash_file(repo: Repo, path: Path) -> str:
    """Store the file at `path` as a blob; its sha."""
    return git(repo, "hash-object", "-w", "--", str(path))


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
    env = identity if identity is not None else commit_identity(repo)
    return git(repo, "commit-tree", tree, "-p", parent, "-F", "-", env=env, stdin=message)


def commit_identity(repo: Repo) -> dict[str, str]:
    """The environment a commit of ours is made with: none (the user's identity) where git has one, else a bot's."""
    try:
        git(repo, "var", "GIT_AUTHOR_IDENT")
        git(repo, "var", "GIT_COMMITTER_IDENT")
        return {}
    except GitError:
        return _BOT


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
            git(repo, "read-tree", base, env=env)
        git(repo, "add", "-A", "--", ".", env=env)
        return git(repo, "write-tree", env=env)


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
    git(scratch, "init", "-q", "--bare")
    bare = Repo(scratch)
    alternates = Path(bare.git_dir) / "objects" / "info" / "alternates"
    alternates.write_text("".join(f"{Path(r.common_dir).resolve() / 'objects'}\n" for r in repos), encoding="utf-8")
    return bare

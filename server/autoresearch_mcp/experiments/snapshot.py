"""Git plumbing for candidates: snapshots, patches, commits and protected paths.

Every candidate becomes a commit on a private ref (`refs/autoresearch/exp/<id>`), built with a
temporary index, so the user's index, HEAD and files are never touched unless they asked for it.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import tempfile
from pathlib import Path

import git

from autoresearch_mcp.errors import InputError, RefusedError, StateError

EXP_REF = "refs/autoresearch/exp/"
_BOT = {"GIT_AUTHOR_NAME": "autoresearch", "GIT_AUTHOR_EMAIL": "autoresearch@localhost",
        "GIT_COMMITTER_NAME": "autoresearch", "GIT_COMMITTER_EMAIL": "autoresearch@localhost"}


def open_repo(path: str | os.PathLike[str]) -> git.Repo:
    """The git work tree at `path` (its top level), or an error that says what `path` is instead."""
    p = Path(path).expanduser()
    if not p.exists():
        raise InputError(f"repo {str(p)!r} does not exist; pass the path of a git work tree")
    if not p.is_dir():
        raise InputError(f"repo {str(p)!r} is a file, not a directory; pass the path of a git work tree")
    try:
        repo = git.Repo(p, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise InputError(
            f"{str(p)!r} is not inside a git repository; run `git init` and commit the code first"
        ) from None
    if repo.bare:
        raise InputError(f"{str(p)!r} is a bare repository; pass a work tree")
    return repo


def dirty_files(repo: git.Repo) -> list[str]:
    """Modified, staged and untracked (not ignored) paths of the work tree."""
    out = repo.git.status("--porcelain", "--untracked-files=all")
    return [line[3:] for line in out.splitlines() if line.strip()]


def head_commit(repo: git.Repo, ref: str = "HEAD") -> str:
    try:
        return str(repo.git.rev_parse("--verify", "--quiet", f"{ref}^{{commit}}"))
    except git.GitCommandError:
        raise StateError(f"{ref} does not name a commit; make an initial commit first") from None


def resolve_commit(repo: git.Repo, commitish: str) -> str:
    if not commitish.strip():
        raise InputError("commit is empty; pass a commit-ish such as a sha, a branch or HEAD~1")
    try:
        return str(repo.git.rev_parse("--verify", "--quiet", f"{commitish}^{{commit}}"))
    except git.GitCommandError:
        raise InputError(f"{commitish!r} does not name a commit in {repo.working_dir}") from None


def tree_of(repo: git.Repo, commit: str) -> str:
    return str(repo.git.rev_parse(f"{commit}^{{tree}}"))


def with_temp_index(repo: git.Repo, base: str, fill: list[str], stdin: str | None = None) -> str:
    """Write a tree: read `base` into a throwaway index, run one `fill` command on it (fed `stdin`)."""
    with tempfile.TemporaryDirectory(prefix="autoresearch-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        repo.git.read_tree(base, env=env)
        if stdin is None:
            repo.git.execute(["git", *fill], env=env)
        else:
            (Path(tmp) / "stdin").write_text(stdin, encoding="utf-8")
            with open(Path(tmp) / "stdin", "rb") as fh:
                repo.git.execute(["git", *fill], env=env, istream=fh)
        return str(repo.git.write_tree(env=env))


def commit_tree(repo: git.Repo, tree: str, parent: str, message: str, identity: dict[str, str] | None = None) -> str:
    """A commit of `tree` on `parent`; `identity` (GIT_AUTHOR_*/GIT_COMMITTER_* variables) replays a
    commit's author, committer and dates, otherwise the user's identity (or a bot's) is used."""
    env = identity if identity is not None else {} if _has_identity(repo) else _BOT
    with tempfile.NamedTemporaryFile("w", suffix=".msg", delete=False) as fh:
        fh.write(message)
        msg_path = fh.name
    try:
        return str(repo.git.commit_tree(tree, "-p", parent, "-F", msg_path, env=env))
    finally:
        os.unlink(msg_path)


def _has_identity(repo: git.Repo) -> bool:
    try:
        repo.git.var("GIT_AUTHOR_IDENT")
        repo.git.var("GIT_COMMITTER_IDENT")
        return True
    except git.GitCommandError:
        return False


def snapshot_worktree(repo: git.Repo, base: str) -> str:
    """The work tree's content (tracked changes and untracked, non-ignored files) as a tree.

    The throwaway index starts as a copy of the real one: `add -A` makes it match the work tree
    whatever it held, and its stat cache spares git from hashing every file of a large tree.
    """
    with tempfile.TemporaryDirectory(prefix="autoresearch-index-") as tmp:
        index = Path(tmp) / "index"
        real = Path(repo.git_dir) / "index"
        env = {"GIT_INDEX_FILE": str(index)}
        if real.exists():
            shutil.copyfile(real, index)
        else:
            repo.git.read_tree(base, env=env)
        repo.git.execute(["git", "add", "-A", "--", "."], env=env)
        return str(repo.git.write_tree(env=env))


def patch_tree(repo: git.Repo, base: str, patch: str) -> str:
    """`patch` (a unified diff) applied onto `base`, as a tree; the work tree is not involved."""
    if not patch.strip():
        raise InputError("patch is empty; pass a unified diff (the output of `git diff`)")
    with tempfile.NamedTemporaryFile("w", suffix=".patch", delete=False) as fh:
        fh.write(patch if patch.endswith("\n") else patch + "\n")
        patch_path = fh.name
    try:
        return with_temp_index(repo, base, ["apply", "--cached", "--whitespace=nowarn", patch_path])
    except git.GitCommandError as exc:
        detail = (exc.stderr or "").strip().replace("\n", " ")[:800]
        raise RefusedError(
            f"the patch does not apply onto the session head {base[:12]}: {detail}. "
            "Rebase it on the session branch (git diff against its tip) and launch again"
        ) from None
    finally:
        os.unlink(patch_path)


def set_ref(repo: git.Repo, ref: str, commit: str) -> None:
    repo.git.update_ref(ref, commit)


def changed_paths(repo: git.Repo, a: str, b: str) -> list[str]:
    out = repo.git.diff("--name-only", "--no-renames", a, b)
    return [p for p in out.splitlines() if p]


def protected_changes(changed: list[str], protected: list[str]) -> list[str]:
    """Changed paths that match a protected path, directory or glob pattern."""
    hits = []
    for path in changed:
        for pat in protected:
            pat = pat.rstrip("/")
            if path == pat or path.startswith(pat + "/") or fnmatch.fnmatchcase(path, pat):
                hits.append(path)
                break
    return hits


def ensure_excluded(repo: git.Repo, entry: str = ".autoresearch/") -> None:
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


def worktree_add(repo: git.Repo, path: Path, commit: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    repo.git.worktree("add", "--detach", "--force", str(path), commit)


def worktree_remove(repo: git.Repo, path: Path) -> None:
    try:
        repo.git.worktree("remove", "--force", "--force", str(path))
    except git.GitCommandError:
        shutil.rmtree(path, ignore_errors=True)
        repo.git.worktree("prune")


def refuse_if_dirty(repo: git.Repo, action: str) -> None:
    files = dirty_files(repo)
    if files:
        shown = ", ".join(files[:20]) + (f" and {len(files) - 20} more" if len(files) > 20 else "")
        raise StateError(
            f"the work tree of {repo.working_dir} has uncommitted changes ({shown}); "
            f"commit or stash them before {action}"
        )

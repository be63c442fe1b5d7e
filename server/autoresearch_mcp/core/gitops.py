"""Git plumbing for candidates: snapshots, patches, commits and protected paths.

Every candidate becomes a commit on a private ref (`refs/autoresearch/exp/<id>`), built with a
temporary index, so the user's index, HEAD and files are never touched unless they asked for it.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import shutil
import tempfile
from pathlib import Path

import git

from autoresearch_mcp import limits
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
    """Modified, staged and untracked (not ignored) paths of the work tree, as plain names."""
    out = repo.git.status("--porcelain", "-z", "--untracked-files=all")
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
        raise InputError(f"{limits.shown(commitish)} does not name a commit in {repo.working_dir}") from None


def tree_of(repo: git.Repo, commit: str) -> str:
    return str(repo.git.rev_parse(f"{commit}^{{tree}}"))


def file_at(repo: git.Repo, commit: str, path: str, max_bytes: int) -> bytes | None:
    """A file's bytes as `commit` has it; None when it has no such file or the file is over `max_bytes`."""
    try:
        blob = repo.commit(commit).tree / path
    except (KeyError, ValueError):
        return None
    if blob.type != "blob" or blob.size > max_bytes:
        return None
    data: bytes = blob.data_stream.read()
    return data


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


def diff(repo: git.Repo, a: str, b: str) -> str:
    """The change from commit a to commit b as a patch `patch_tree` can apply (binary files included)."""
    out: str = repo.git.diff("--binary", "--full-index", "--no-renames", a, b)
    return out


def set_ref(repo: git.Repo, ref: str, commit: str) -> None:
    repo.git.update_ref(ref, commit)


def changed_paths(repo: git.Repo, a: str, b: str) -> list[str]:
    """Paths that differ between two commits, as plain names (never git's quoted form)."""
    out = repo.git.diff("--name-only", "-z", "--no-renames", a, b)
    return [p for p in out.split("\0") if p]


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


def new_gitlinks(repo: git.Repo, base: str, tree: str) -> list[str]:
    """Paths that are nested repositories (gitlinks, mode 160000) in `tree` but not in `base`."""
    def links(t: str) -> dict[str, str]:
        out = repo.git.ls_tree("-r", "-z", t)
        found = {}
        for entry in out.split("\0"):
            if entry.startswith("160000 "):
                meta, path = entry.split("\t", 1)
                found[path] = meta.split()[2]
        return found

    before = links(base)
    return sorted(p for p, sha in links(tree).items() if before.get(p) != sha)


def untracked_in_the_way(repo: git.Repo, head: str, new: str, limit: int = 50) -> list[str]:
    """Paths of the work tree that moving from `head` to `new` would overwrite although git does not
    track them at `head`: ignored or untracked files (git replaces ignored files without asking)."""
    root = Path(repo.working_dir)
    out = repo.git.diff("--name-only", "-z", "--no-renames", "--diff-filter=A", head, new)
    tracked = set(repo.git.ls_tree("-r", "--name-only", "-z", head).split("\0"))
    in_the_way: list[str] = []
    for path in (p for p in out.split("\0") if p):
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
                    in_the_way += [f"{rel}/{f}" for f in files if f"{rel}/{f}" not in tracked]
            elif prefix not in tracked:
                in_the_way.append(prefix)
            break
        if len(in_the_way) >= limit:
            break
    return sorted(set(in_the_way))[:limit]


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


def untracked_files(repo: git.Repo) -> list[str]:
    out = repo.git.ls_files("--others", "--exclude-standard", "-z")
    return [p for p in out.split("\0") if p]


def reset_saving(repo: git.Repo, head: str, message: str) -> str:
    """Reset the work tree and index to `head`, first saving exactly what they held as a stash entry
    (index with partly staged files, tracked changes, untracked files), which `git stash apply --index`
    restores. Only what the stash holds is removed: ignored files and empty folders stay."""
    with tempfile.TemporaryDirectory(prefix="autoresearch-index-") as tmp:
        index_tree = str(repo.git.write_tree())  # the real index, as it is
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        real = Path(repo.git_dir) / "index"
        if real.exists():
            shutil.copyfile(real, Path(tmp) / "index")
        repo.git.execute(["git", "add", "-u", "--", "."], env=env)  # tracked files as in the work tree
        work_tree = str(repo.git.write_tree(env=env))
        untracked = untracked_files(repo)
        parents = ["-p", head, "-p", commit_tree(repo, index_tree, head, f"index on {message}")]
        if untracked:
            (Path(tmp) / "index").unlink()
            paths = Path(tmp) / "paths"
            paths.write_bytes(b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in untracked))
            with open(paths, "rb") as fh:
                repo.git.execute(["git", "update-index", "--add", "-z", "--stdin"], env=env, istream=fh)
            parents += ["-p", _root_commit(repo, str(repo.git.write_tree(env=env)), f"untracked files on {message}")]
        stash = str(repo.git.commit_tree(work_tree, *parents, "-m", message,
                                         env={} if _has_identity(repo) else _BOT))
    repo.git.stash("store", "-m", message, stash)
    repo.git.reset("--hard", head)
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


def _root_commit(repo: git.Repo, tree: str, message: str) -> str:
    return str(repo.git.commit_tree(tree, "-m", message, env={} if _has_identity(repo) else _BOT))

"""How the package runs git: one runner, used by the gitops modules (gitops, gitread, gittrees) and no other.

Each git operation runs git's documented command line through `run`, which calls GitPython's command wrapper
(`Git.execute`) with a timeout and reads git's machine output (`-z`, NUL-separated, wherever git offers it). Why
the wrapper rather than raw subprocess: the repository handle of the whole package (and of its tests) is a
`git.Repo`; the wrapper raises one exception type carrying git's own stderr (`GitError`, which the tool layer
turns into a ToolError) and merges a call's environment over the process's (a throwaway GIT_INDEX_FILE).
GitPython's object API (repo.head, repo.index, ...) is not used: it would be a second way of asking git.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast

import git as gitpython

Repo = gitpython.Repo
GitError = gitpython.GitCommandError  # git ran and failed (or outlasted TIMEOUT_S); `.stderr` holds what git said
NOT_A_REPO = (gitpython.InvalidGitRepositoryError, gitpython.NoSuchPathError)  # opening a path that holds none
# A git that hangs (a stalled network file system, a filter process that waits) must not hold the
# server forever; the limit is far above a normal run of any command here.
TIMEOUT_S = 600.0


# Every git the server runs is its own: no hook of the repository runs (a planted post-checkout would
# run on `worktree add`, and the session's reference-transaction guard is meant for everyone else),
# no replacement object stands in for a commit (`git replace` could make a commit show another tree),
# and no fsmonitor program is started.
OWN_GIT = ("--no-replace-objects", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")


def run(where: Repo | Path, *args: str, env: dict[str, str] | None = None, stdin: str | bytes | None = None,
        binary: bool = False, out: BinaryIO | None = None, own: bool = True) -> Any:
    """git `args` in the repository (or directory) `where`: its stdout as text (bytes with `binary`,
    streamed into `out` when given); raises GitError when git fails. `own=False` leaves out OWN_GIT,
    only to read the repository's own settings (where its hooks live)."""
    runner, at = (where.git, []) if isinstance(where, Repo) else (gitpython.Git(), ["-C", str(where)])
    with _stdin(stdin) as istream:
        return runner.execute(
            ["git", *(OWN_GIT if own else ()), *at, *args], env=env, istream=istream, output_stream=out,
            stdout_as_string=not binary,
            strip_newline_in_stdout=not binary,
            kill_after_timeout=None if sys.platform == "win32" else TIMEOUT_S)  # GitPython: not on Windows


def git(where: Repo | Path, *args: str, env: dict[str, str] | None = None, stdin: str | bytes | None = None) -> str:
    """git `args` in `where`, its stdout as text (`run`)."""
    return cast(str, run(where, *args, env=env, stdin=stdin))


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


def names(out: str) -> list[str]:
    """A `-z` list of paths as plain names (never git's quoted form)."""
    return [p for p in out.split("\0") if p]

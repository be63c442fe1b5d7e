"""Writes of the server's own files that never follow a symbolic link.

Every file the server writes in a repository (config, ledger, logs, report) lives under
`.autoresearch/`. A link planted there (by a candidate, or by hand) must not turn a write into a
write somewhere else, so each path is opened one component at a time from an anchor directory with
O_NOFOLLOW: a link anywhere below the anchor is refused, never followed. The anchor itself (the
repository the user named) may be reached through links.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal, overload

from autoresearch_mcp.errors import StateError

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_NOFOLLOW


def _refuse(path: Path, what: str) -> StateError:
    return StateError(
        f"{path} is {what}: the server never writes its files through a link or over a non-directory. "
        "Remove it (it is not part of your code; the session folder is the server's) and try again")


def _parts(anchor: Path, path: Path) -> list[str]:
    try:
        rel = path.relative_to(anchor)
    except ValueError:
        raise StateError(f"{path} is outside {anchor}; the server only writes inside its session folder") from None
    parts = list(rel.parts)
    if not parts or any(p in ("", ".", "..") for p in parts):
        raise StateError(f"{path} is not a file below {anchor}")
    return parts


@contextlib.contextmanager
def _dir_fd(anchor: Path, parts: list[str], create: bool) -> Iterator[int]:
    """A descriptor of anchor/parts..., each component opened without following links."""
    fd = os.open(anchor, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        here = anchor
        for part in parts:
            here = here / part
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                nxt = _open_existing_dir(fd, part, here)
            except OSError as exc:
                raise _classify(fd, part, here, exc) from None
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def _open_existing_dir(fd: int, part: str, here: Path) -> int:
    try:
        return os.open(part, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        raise _classify(fd, part, here, exc) from None


def _classify(fd: int, part: str, here: Path, exc: OSError) -> Exception:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        try:
            mode = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
        except OSError:
            return exc
        return _refuse(here, "a symbolic link" if stat.S_ISLNK(mode) else "not a directory")
    return exc


def ensure_dir(anchor: Path, path: Path) -> Path:
    """Create `path` (a directory below `anchor`) and its parents; refuse links on the way."""
    with _dir_fd(anchor, _parts(anchor, path), create=True):
        return path


def _open_file(anchor: Path, path: Path, flags: int) -> int:
    parts = _parts(anchor, path)
    with _dir_fd(anchor, parts[:-1], create=True) as dfd:
        try:
            return os.open(parts[-1], flags | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
        except OSError as exc:
            raise _classify(dfd, parts[-1], path, exc) from None


@overload
def open_write(anchor: Path, path: Path, mode: Literal["a", "w"] = "a") -> IO[str]: ...
@overload
def open_write(anchor: Path, path: Path, mode: Literal["ab", "wb"]) -> IO[bytes]: ...
def open_write(anchor: Path, path: Path, mode: str = "a") -> IO[str] | IO[bytes]:
    """Open `path` for appending ("a") or truncating ("w"), text or binary, refusing links."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode.startswith("a") else os.O_TRUNC)
    fd = _open_file(anchor, path, flags)
    if "b" in mode:
        return os.fdopen(fd, mode)
    return os.fdopen(fd, mode, encoding="utf-8")


def write_bytes(anchor: Path, path: Path, data: bytes) -> None:
    """Replace `path` atomically: a fresh temporary file beside it, renamed over it (a rename replaces a
    link itself, never its target)."""
    parts = _parts(anchor, path)
    with _dir_fd(anchor, parts[:-1], create=True) as dfd:
        tmp = f".{parts[-1]}.{uuid.uuid4().hex[:8]}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, parts[-1], src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise


def write_text(anchor: Path, path: Path, text: str) -> None:
    write_bytes(anchor, path, text.encode("utf-8"))

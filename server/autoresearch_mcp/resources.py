"""Files shipped with the package: benchmark templates, the bundled example and the brief."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

_PACKAGE = Path(__file__).resolve().parent
# In a wheel the files are force-included under the package; in a source checkout (editable
# install, tests) they live at the repository root, two levels above the package.
_ROOTS = (_PACKAGE, _PACKAGE.parents[1])
# `<!-- claude-code -->` ... `<!-- /claude-code -->` (or `mcp`): lines for one kind of client only
_AUDIENCE = re.compile(r"<!-- (/?)(claude-code|mcp) -->")


def _find(*candidates: str) -> Path:
    for root in _ROOTS:
        for rel in candidates:
            path = root / rel
            if path.exists():
                return path
    raise FileNotFoundError(f"packaged resource not found: {candidates[0]} (looked in {_ROOTS})")


def template(name: str) -> Path:
    """Path of `autoresearch.sh.template` or `autoresearch.checks.sh.template`."""
    return _find(f"templates/{name}", name)


def toolchain(name: str) -> Path:
    """Path of a CMake toolchain file shipped for a platform preset (e.g. `aarch64-linux-gnu.cmake`)."""
    return _find(f"toolchains/{name}")


def git_hook(name: str) -> Path:
    """Path of a git hook the server installs (`reference-transaction`: the session branch's guard)."""
    return _find(f"githooks/{name}")


def example_dir() -> Path:
    """Path of the bundled multi-backend example target."""
    return _find("examples")


def brief(client: Literal["claude-code", "mcp"] = "mcp") -> str:
    """The brief the agent follows (`instructions.md`, its one source) as `client` gets it: Claude
    Code's rendering keeps the lines only Claude Code can act on (subagents, skills, hooks), other MCP
    clients' keeps theirs instead; the maintainers' comments go."""
    kept: list[str] = []
    inside: str | None = None
    for line in _find("instructions.md").read_text(encoding="utf-8").splitlines():
        mark = _AUDIENCE.fullmatch(line.strip())
        if mark:
            inside = None if mark[1] else mark[2]
        elif inside in (None, client):
            kept.append(line)
    return re.sub(r"<!--.*?-->\n?", "", "\n".join(kept), flags=re.S).strip() + "\n"

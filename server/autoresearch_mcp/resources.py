"""Files shipped with the package: benchmark templates, the bundled example and the brief."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
# In a wheel the files are force-included under the package; in a source checkout (editable
# install, tests) they live at the repository root, two levels above the package.
_ROOTS = (_PACKAGE, _PACKAGE.parents[1])


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


def brief() -> str:
    """The research brief the agent follows: the body of the `autoresearch` skill (one text serves
    Claude Code's `/autoresearch` and the MCP prompt of the same name)."""
    text = _find("skills/autoresearch/SKILL.md").read_text()
    if text.startswith("---\n"):
        text = text.split("\n---\n", 1)[1]  # drop the skill's frontmatter
    return text.strip() + "\n"

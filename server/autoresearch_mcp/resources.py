"""Files shipped with the package: benchmark templates and the bundled example."""

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


def example_dir() -> Path:
    """Path of the bundled multi-backend example target."""
    return _find("examples")

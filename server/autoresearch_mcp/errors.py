"""One exception hierarchy for failures the user can act on; app.py maps them to ToolError."""

from __future__ import annotations


class AutoresearchError(Exception):
    """An expected failure: the message says what was wrong and what to do about it."""


class InputError(AutoresearchError):
    """A tool was given an argument it cannot use."""


class StateError(AutoresearchError):
    """The session or repository is not in a state that allows the request."""


class RefusedError(AutoresearchError):
    """A guard rail refused the request (protected files, unproven winner, duplicate...)."""


class ExternalError(AutoresearchError):
    """A remote service (arXiv, GitHub, Hugging Face, a cloud) failed or is unreachable."""

"""One exception hierarchy for the whole tool.

A `UserError` is the user's to fix: its message is a single line that names the file, line, column or value
and says how to fix it. The CLI prints it and exits 2. Anything else is our bug and exits 1. Parameter checks
live in `erroranalysis.core.validation`.
"""

from __future__ import annotations

from pathlib import Path


class ErrorAnalysisError(Exception):
    """Base class for every error raised on purpose by erroranalysis."""

    exit_code = 1


class UserError(ErrorAnalysisError):
    """Bad input or usage: the message alone tells the user what to change."""

    exit_code = 2


class DataError(UserError):
    """An eval set, predictions file or log that cannot be read as given."""


class ModelError(UserError):
    """A checkpoint that cannot be loaded safely."""


class RunError(UserError):
    """A run directory that is missing, incomplete or would be overwritten."""


class ParameterError(UserError):
    """A parameter value out of its allowed range. `param` names the parameter; `flag`, when the parameter is
    declared (`erroranalysis.core.params`), the option that sets it, so the CLI names what the user typed."""

    def __init__(self, param: str, value, expected: str, flag: str | None = None, none: str | None = None):
        # `none`: what None means, where None is allowed too (the Python API may pass it; a flag not given is it)
        self.param, self.value, self.expected, self.flag = param, value, expected, flag
        also = f", or None ({none})" if none else ""
        super().__init__(f"{param}={value!r} is invalid: expected {expected}{also}.")


def where(path: str | Path, line: int | None = None, column: str | None = None) -> str:
    """Format a location prefix: `data.jsonl, line 3, column 'label'`."""
    parts = [str(path)]
    if line is not None:
        parts.append(f"line {line}")
    if column is not None:
        parts.append(f"column {column!r}")
    return ", ".join(parts)


def preview(values, limit: int = 5) -> str:
    """A short, readable list of values for error messages."""
    values = list(values)
    shown = ", ".join(repr(_plain(v)) for v in values[:limit])
    return shown + (f", ... ({len(values)} in all)" if len(values) > limit else "")


def _plain(value):
    """A numpy scalar as the Python value it holds, so a message says 1.5, not np.float64(1.5)."""
    return value.item() if getattr(value, "ndim", None) == 0 and hasattr(value, "item") else value

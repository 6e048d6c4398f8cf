"""Parameter checks: one message format for every bad parameter, as scikit-learn has.

`check_param` raises a `ParameterError` that carries the parameter's name, its value and what was expected; the
CLI turns the name into the flag the user typed (`erroranalysis.cli.flags`).
"""

from __future__ import annotations

import math
from numbers import Integral, Real

from erroranalysis.errors import ParameterError


def check_param(name: str, value, ok: bool, expected: str) -> None:
    """Raise a ParameterError in the one message format used for every parameter."""
    if not ok:
        raise ParameterError(name, value, expected)


def is_int(value) -> bool:
    """An integer that is not a bool (numpy integers included)."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A finite real number that is not a bool."""
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


def check_int(name: str, value, low: int | None = None, high: int | None = None) -> None:
    """`value` is an integer in [low, high] (either bound may be open)."""
    ok = is_int(value) and (low is None or value >= low) and (high is None or value <= high)
    check_param(name, value, ok, _range("an integer", low, high))


def check_number(name: str, value, low: float | None = None, high: float | None = None, *,
                 low_open: bool = False, high_open: bool = False) -> None:
    """`value` is a finite number in the given interval."""
    ok = is_number(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    left, right = "(" if low_open else "[", ")" if high_open else "]"
    if low is not None and high is not None:
        expected = f"a number in {left}{low}, {high}{right}"
    elif low is not None:
        expected = f"a number {'>' if low_open else '>='} {low}"
    elif high is not None:
        expected = f"a number {'<' if high_open else '<='} {high}"
    else:
        expected = "a finite number"
    check_param(name, value, ok, expected)


def check_choice(name: str, value, choices) -> None:
    """`value` is one of `choices`."""
    choices = tuple(choices)
    check_param(name, value, value in choices, "one of " + ", ".join(map(str, choices)))


def _range(kind: str, low, high) -> str:
    if low is not None and high is not None:
        return f"{kind} in [{low}, {high}]"
    if low is not None:
        return f"{kind} >= {low}"
    if high is not None:
        return f"{kind} <= {high}"
    return kind


class Params:
    """Base of the stages' frozen parameter dataclasses: validated once, at construction (`validate` raises, it
    never writes), changed only by `replace`, recorded in the manifest by `record`."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise a ParameterError for the first bad value."""

    def replace(self, **changes):
        """A copy with `changes`; an unknown name is a ParameterError, not a TypeError."""
        import dataclasses

        names = {f.name for f in dataclasses.fields(self)}
        for name, value in changes.items():
            check_param(name, value, name in names, f"a parameter of {type(self).__name__} "
                        f"({', '.join(sorted(names))})")
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, **values):
        """`cls(**values)`, with an unknown name reported as a ParameterError."""
        return cls().replace(**values)

    def record(self) -> dict:
        """The parameters as JSON for the manifest (objects by their name)."""
        import dataclasses

        def plain(value):
            if value is None or isinstance(value, (bool, int, float, str)):
                return value
            if isinstance(value, (list, tuple)):
                return [plain(v) for v in value]
            if isinstance(value, dict):
                return {str(k): plain(v) for k, v in value.items()}
            return getattr(value, "key", None) or getattr(value, "__name__", None) or type(value).__name__

        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

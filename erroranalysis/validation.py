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

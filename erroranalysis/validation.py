"""Checks of single values outside a parameter dataclass, in the one message format of `erroranalysis.core.params`.

A declared parameter is checked by its dataclass (`erroranalysis.core.params.Params`); these are for values a function
takes directly (a threshold argument, a column count). Each raises a `ParameterError` carrying the parameter's
name, its value and what was expected.
"""

from __future__ import annotations

from erroranalysis.core.errors import ParameterError
from erroranalysis.core.params import Choice, Float, Int


def check_param(name: str, value, ok: bool, expected: str) -> None:
    """Raise a ParameterError in the one message format used for every parameter."""
    if not ok:
        raise ParameterError(name, value, expected)


def check_int(name: str, value, low: int | None = None, high: int | None = None) -> None:
    """`value` is an integer in [low, high] (either bound may be open)."""
    rule = Int(low, high)
    check_param(name, value, rule.ok(value), rule.describe())


def check_number(name: str, value, low: float | None = None, high: float | None = None, *,
                 low_open: bool = False, high_open: bool = False) -> None:
    """`value` is a finite number in the given interval."""
    rule = Float(low, high, low_open, high_open)
    check_param(name, value, rule.ok(value), rule.describe())


def check_choice(name: str, value, choices) -> None:
    """`value` is one of `choices`."""
    rule = Choice(*choices)
    check_param(name, value, rule.ok(value) or value in rule.values, rule.describe())

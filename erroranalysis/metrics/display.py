"""A rate as people read it (pure): three significant digits (0.787, 0.0123, 1.00) or a percent with one decimal
(78.7%). Only what is shown is rounded; metrics.json and every `--json` keep full precision."""

from __future__ import annotations

import math

MISSING = "–"


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def rate(value) -> str:
    """0.78712 -> "0.787"; 0.012345 -> "0.0123"; 1.0 -> "1.00"; None or NaN -> "–"."""
    return format(float(value), "#.3g") if _finite(value) else MISSING


def percent(value, digits: int = 1) -> str:
    """0.78712 -> "78.7%" (`digits` decimals: one, as a rate is shown; 0 for a share of a headline tile); None or
    NaN -> "–"."""
    return f"{float(value) * 100:.{digits}f}%" if _finite(value) else MISSING

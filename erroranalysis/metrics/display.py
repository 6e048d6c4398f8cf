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


def output_length(length: dict) -> str:
    """A generation run's output lengths against the limit, in one sentence (metrics.json's
    `output_checks.output_length`), for `show`, the report and the app alike."""
    text = (f"output length (n_output_tokens): median {rate(length['median'])}, 95th percentile "
            f"{rate(length['p95'])}, max {rate(length['max'])}; passing {rate(length['mean_passed'])} vs failing "
            f"{rate(length['mean_failed'])} on average")
    if length.get("limit"):
        return text + f"; limit {length['limit']:,}: {length['at_limit']:,} outputs reached it"
    stopped = length.get("stopped_by_length")
    return text + "; limit unknown" + (f" ({stopped:,} stopped for length)" if stopped else "")

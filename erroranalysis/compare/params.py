"""The comparison's parameters, each declared once (`erroranalysis.core.params`): `compare`, the step gate of
`watch` and the callback, and the app's Compare page take them from here."""

from __future__ import annotations

from dataclasses import dataclass

from erroranalysis.compare.gate import GATE_ALPHA
from erroranalysis.compare.pairs import MIN_OVERLAP
from erroranalysis.compare.stats import LEVEL
from erroranalysis.core.params import SEED, Float, Int, Params, param, spec_field


@dataclass(frozen=True)
class CompareParams(Params):
    """How runs are compared: the paired bootstrap, the cluster matching, the regression gate's test."""

    n_resamples: int = param(1000, Int(1, 100_000), "Paired bootstrap resamples.", flag="--resamples")
    seed: int = spec_field(SEED)
    level: float = param(LEVEL, Float(0, 1, low_open=True, high_open=True), "Confidence level of the intervals.",
                         advanced=True)
    min_overlap: float = param(MIN_OVERLAP, Float(0, 1, low_open=True), "Clusters match across runs when their "
                               "shared still-failing members reach this Jaccard overlap.")
    alpha: float = param(GATE_ALPHA, Float(0, 1, low_open=True, high_open=True), "Significance level of "
                         "--fail-on-regression's binomial test.")

"""The stages every task shares once predictions exist, in the order each one's inputs need.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from erroranalysis.rundir import Run
from erroranalysis.stages.metrics import compute_run_metrics


@dataclass
class AfterOptions:
    """Which stages follow metrics, and their parameters."""

    cluster: bool = True
    cluster_params: dict = field(default_factory=dict)
    slices: bool = True
    checks: bool = True
    checks_params: dict = field(default_factory=dict)
    seed: int = 0


def after_predictions(run: Run, after: AfterOptions) -> None:
    """The stages every task shares once predictions.parquet exists, in the order each one's inputs need:
    metrics, data checks (label issues, duplicates), slices, then clusters (which read checks and slices)."""
    from erroranalysis.stages.checks import checks_run
    from erroranalysis.stages.cluster import cluster_run
    from erroranalysis.stages.slices import slices_run

    compute_run_metrics(run, seed=after.seed)
    if after.checks:
        checks_run(run.path, seed=after.seed, **after.checks_params)
    if after.slices:
        slices_run(run.path)
    if after.cluster:
        cluster_run(run.path, seed=after.seed, **after.cluster_params)

"""The stages every task shares once predictions exist, in the order each one's inputs need."""

from __future__ import annotations

from dataclasses import dataclass

from erroranalysis.core.params import Params
from erroranalysis.rundir import Run
from erroranalysis.stages.cluster import ClusterParams
from erroranalysis.stages.data_checks import CheckParams
from erroranalysis.stages.metrics import MetricsParams
from erroranalysis.stages.slices import SliceParams


@dataclass(frozen=True)
class AfterParams(Params):
    """Which stages follow the predictions, each with its parameters; None skips it (`--no-checks`, ...)."""

    metrics: MetricsParams = MetricsParams()
    checks: CheckParams | None = CheckParams()
    slices: SliceParams | None = SliceParams()
    cluster: ClusterParams | None = ClusterParams()

    def validate(self) -> None:
        for name, kind in (("metrics", MetricsParams), ("checks", CheckParams), ("slices", SliceParams),
                           ("cluster", ClusterParams)):
            value = getattr(self, name)
            if not (isinstance(value, kind) or (value is None and name != "metrics")):
                self.fail(name, value, f"a {kind.__name__}" + (" or None" if name != "metrics" else ""))

    @property
    def seed(self) -> int:
        return self.metrics.seed

    @classmethod
    def with_seed(cls, seed: int, *, checks: bool = True, slices: bool = True, cluster: bool = True,
                  check_params: dict | None = None, cluster_params: dict | None = None) -> "AfterParams":
        """Every stage with the same seed; the booleans skip stages, the dicts override their defaults."""
        return cls(metrics=MetricsParams(seed=seed),
                   checks=CheckParams.of(seed=seed, **(check_params or {})) if checks else None,
                   slices=SliceParams() if slices else None,
                   cluster=ClusterParams.of(seed=seed, **(cluster_params or {})) if cluster else None)


def after_predictions(run: Run, after: AfterParams, *, embedder=None, progress=None, engine=None) -> None:
    """Metrics, data checks (label issues, duplicates), slices, then clusters (which read checks and slices).
    `embedder` (an object with `key` and `embed(frame)`) replaces the cluster stage's default one; `progress` (an
    `erroranalysis.core.progress.Reporter`) reports each stage; `engine` says where each stage runs (this process,
    or Ray workers over blocks of the predictions)."""
    from erroranalysis.core.progress import as_reporter
    from erroranalysis.stages.cluster import cluster_run
    from erroranalysis.stages.data_checks import checks_run
    from erroranalysis.stages.metrics import compute_run_metrics
    from erroranalysis.stages.slices import slices_run

    reporter = as_reporter(progress)
    with reporter.stage("metrics"):
        compute_run_metrics(run, after.metrics, engine=engine)
    if after.checks is not None:
        checks_run(run.path, after.checks, progress=reporter, engine=engine)
    if after.slices is not None:
        with reporter.stage("slices"):
            slices_run(run.path, after.slices, engine=engine)
    if after.cluster is not None:
        summary = cluster_run(run.path, after.cluster, embedder=embedder, progress=reporter.phases("cluster"))
        if summary.get("embedder_note"):
            reporter.note(f"cluster: {summary['embedder_note']}")

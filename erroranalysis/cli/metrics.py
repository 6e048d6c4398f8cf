"""`erroranalysis metrics RUN`: recompute metrics.json from a run's predictions."""

from __future__ import annotations

from typing import Annotated

import typer

from erroranalysis.cli import common


def register(app: typer.Typer) -> None:
    @app.command("metrics")
    @common.handle_errors
    def metrics_command(
        run_dir: common.RunDir,
        seed: common.Seed = 0,
        n_resamples: Annotated[int, typer.Option("--bootstrap", help="Bootstrap resamples for the 95% intervals.")] = 1000,
    ) -> None:
        """Recompute metrics.json from predictions.parquet (and probs.npy) without re-running inference."""
        from erroranalysis import stages
        from erroranalysis.cli.show import print_summary
        from erroranalysis.rundir import Run

        params = stages.MetricsParams(seed=seed, n_resamples=n_resamples)
        run = Run.open(run_dir)
        print_summary(stages.compute_run_metrics(run, params), run)

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
        from erroranalysis.cli.show import print_summary
        from erroranalysis.rundir import Run
        from erroranalysis.stages.metrics import compute_run_metrics
        from erroranalysis.validation import check_param

        check_param("--bootstrap", n_resamples, n_resamples >= 0, "an integer >= 0")
        run = Run.open(run_dir)
        run.require("infer" if run.stage_status("infer") else "load_predictions",
                    "re-create the run with 'erroranalysis run' or 'analyze'")
        print_summary(compute_run_metrics(run, seed=seed, n_resamples=n_resamples), run)

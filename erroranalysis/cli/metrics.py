"""`erroranalysis metrics RUN`: recompute metrics.json from a run's predictions."""

from __future__ import annotations

import typer

from erroranalysis.cli import common, options
from erroranalysis.cli import stage_groups as groups


def register(app: typer.Typer) -> None:
    @app.command("metrics")
    @common.handle_errors
    @options.takes(groups.METRICS, groups.ENGINE)
    def metrics_command(run_dir: common.RunDir, as_json: common.Json = False, *, metrics, engine) -> None:
        """Recompute metrics.json from predictions.parquet (and probs.npy) without re-running inference."""
        from erroranalysis import stages
        from erroranalysis.cli.show import print_summary
        from erroranalysis.rundir import Run

        run = Run.open(run_dir)
        result = stages.compute_run_metrics(run, metrics, engine=engine)
        if as_json:
            common.print_json({"run": str(run.path), **result})
            return
        print_summary(result, run)

"""`erroranalysis analyze`: bring your own predictions (vLLM, an API, another framework)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from erroranalysis.cli import common, options
from erroranalysis.cli import stage_groups as groups
from erroranalysis.cli.run import CHECKS, report


def register(app: typer.Typer) -> None:
    @app.command("analyze")
    @common.handle_errors
    @options.takes(groups.DATA, groups.ENGINE, groups.METRICS, CHECKS, groups.SLICES, groups.CLUSTER)
    def analyze_command(
        predictions: Annotated[Path, typer.Option("--predictions", "-p", help="File with text, label, pred and "
                                                                             "optional prob_<label> columns.")],
        out: common.OutDir,
        pred_column: Annotated[str, typer.Option("--pred-column", help="Column holding the predicted label.")] = "pred",
        overwrite: common.Overwrite = False,
        as_json: common.Json = False,
        *, data_options, engine, metrics, checks, slices, cluster,
    ) -> None:
        """Analyze predictions made elsewhere: metrics, data checks, slices and failure clusters, in a run."""
        from erroranalysis import stages
        from erroranalysis.progress import reporter

        run = stages.analyze_predictions(predictions, out, data_opts=data_options, pred_column=pred_column,
                                         after=groups.after(metrics, checks, slices, cluster), overwrite=overwrite,
                                         progress=reporter(), engine=engine)
        report(run, as_json)

"""`erroranalysis analyze`: bring your own predictions (vLLM, an API, another framework)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from erroranalysis.cli import common
from erroranalysis.cli.run import (
    CheckEmbedder,
    Encoding,
    EngineName,
    IdColumn,
    LabelColumn,
    MaxChars,
    NoChecks,
    NoCluster,
    NoSlices,
    RayAddress,
    Split,
    TextColumn,
    Train,
    after_params,
    data_options,
    engine_of,
    report,
)


def register(app: typer.Typer) -> None:
    @app.command("analyze")
    @common.handle_errors
    def analyze_command(
        predictions: Annotated[Path, typer.Option("--predictions", "-p", help="File with text, label, pred and optional prob_<label> columns.")],
        out: common.OutDir,
        text_column: TextColumn = "text",
        label_column: LabelColumn = "label",
        pred_column: Annotated[str, typer.Option("--pred-column", help="Column holding the predicted label.")] = "pred",
        id_column: IdColumn = None,
        encoding: Encoding = "utf-8",
        split: Split = None,
        max_chars: MaxChars = 100_000,
        no_cluster: NoCluster = False,
        no_slices: NoSlices = False,
        no_checks: NoChecks = False,
        train: Train = None,
        check_embedder: CheckEmbedder = "auto",
        engine: EngineName = "local",
        ray_address: RayAddress = None,
        seed: common.Seed = 0,
        overwrite: common.Overwrite = False,
    ) -> None:
        """Analyze predictions made elsewhere: metrics and failure clusters, in a run directory."""
        from erroranalysis import stages
        from erroranalysis.progress import reporter

        after = after_params(no_cluster, no_slices, no_checks, train, seed, check_embedder)
        run = stages.analyze_predictions(predictions, out,
                                  data_opts=data_options(text_column, label_column, id_column, encoding, split, max_chars),
                                  pred_column=pred_column, after=after, overwrite=overwrite, progress=reporter(),
                                  engine=engine_of(engine, ray_address))
        report(run)

"""`erroranalysis log RUN --log-to mlflow|wandb|tensorboard`: a run that already exists (or a training run's whole
timeline, from its folder of step runs) sent to experiment trackers, as `run --log-to` sends a run it makes;
`--tracker-run ID` adds it to the training run's own tracker run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from erroranalysis.cli import common, options
from erroranalysis.cli.stage_groups import TRACKERS
from erroranalysis.rundir import MANIFEST


def register(app: typer.Typer) -> None:
    app.command("log", help="Log a run that exists, or a training run's timeline (its folder of step runs), to "
                            "experiment trackers: metrics, per-class and error-type tables, the HTML report. "
                            "--tracker-run adds to the training run's tracker run instead of starting one.")(log)


@common.handle_errors
@options.takes(TRACKERS)
def log(
    path: Annotated[Path, typer.Argument(help="A run directory, or a training run's folder of step runs "
                                              "(runs/EXPERIMENT) to log its timeline.")],
    labels_db: Annotated[Optional[Path], typer.Option(
        "--labels-db", help="Labels database whose error types key the clusters (default: the workspace's, "
                            "docs/labels.md).")] = None,
    *, trackers,
) -> None:
    """Log a run or a timeline to experiment trackers."""
    from erroranalysis import stages
    from erroranalysis.core.errors import UserError
    from erroranalysis.integrations import trackers as tracking

    if not trackers.log_to:
        raise UserError("erroranalysis log: name a tracker with --log-to mlflow, wandb or tensorboard.")
    if not path.is_dir():
        raise UserError(f"{path}: no such folder; pass a run directory or a folder of step runs (runs/EXPERIMENT).")
    trackers.require()
    if (path / MANIFEST).is_file():
        used = tracking.log_run(path, trackers, labels_db=labels_db)
    else:
        used = tracking.log_timeline(stages.build_timeline(path, labels_db=labels_db), trackers)
    print(f"logged {path} to {'; '.join(used)}", file=sys.stderr)

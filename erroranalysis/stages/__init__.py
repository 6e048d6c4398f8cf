"""Stages: the only code that reads or writes a run directory.

Each stage reads its inputs through `erroranalysis.rundir`'s readers, calls the pure cores (`metrics`, `cluster`,
`slices`, `datachecks`, `labels`), and commits its artifacts with the manifest. The CLI and the app call the
functions below; the modules behind them are internal.
"""

from __future__ import annotations

from erroranalysis.stages.after import AfterOptions, after_predictions
from erroranalysis.stages.checks import (
    checks_run,
    label_issue_share,
    load_train,
    read_checks,
    read_checks_report,
    read_train_file,
)
from erroranalysis.stages.cluster import cluster_run, name_run
from erroranalysis.stages.compare import compare_runs, read_run
from erroranalysis.stages.doctor import run_doctor
from erroranalysis.stages.export import build_taxonomy, example_table, export_taxonomy, open_store, render
from erroranalysis.stages.generate import run_generation
from erroranalysis.stages.infer import InferOptions, run_checkpoint
from erroranalysis.stages.load_predictions import analyze_predictions
from erroranalysis.stages.metrics import compute_run_metrics
from erroranalysis.stages.slices import read_slices, slices_run
from erroranalysis.stages.suggestions import apply_taxonomy, read_suggestions, review, suggest

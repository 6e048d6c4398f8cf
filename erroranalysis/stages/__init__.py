"""Stages: the only code that reads or writes a run directory.

Each stage reads its inputs through `erroranalysis.rundir.readers`, calls the pure cores (`metrics`, `cluster`,
`slices`, `datachecks`, `labels`), and commits its artifacts with the manifest. Each takes its parameters as one
frozen dataclass (`ClusterParams`, `SliceParams`, `CheckParams`, ...), validated when it is built. The CLI and the
app call the names below; the modules behind them are internal.
"""

from __future__ import annotations

from erroranalysis.stages.after import AfterParams, after_predictions
from erroranalysis.stages.analyze import OutputParams, Reading, analyze
from erroranalysis.stages.cluster import ClusterParams, cluster_run
from erroranalysis.stages.cluster_names import name_run
from erroranalysis.stages.compare import compare_runs, read_run, write_report
from erroranalysis.stages.data_checks import CheckParams, check_vectors, checks_run, label_issue_share
from erroranalysis.stages.doctor import run_doctor, run_doctor_generation
from erroranalysis.stages.export import (
    attach_labels,
    base_table,
    build_taxonomy,
    example_table,
    export_notes,
    export_taxonomy,
    label_tables,
    open_store,
    patch_labels,
    render,
)
from erroranalysis.stages.generate import prepare_eval_set as prepare_prompts
from erroranalysis.stages.generate import run_generation
from erroranalysis.stages.infer import InferParams, resolve_task, run_checkpoint
from erroranalysis.stages.infer import prepare as prepare_checkpoint
from erroranalysis.stages.metrics import MetricsParams, compute_run_metrics
from erroranalysis.stages.report import Limits as ReportLimits
from erroranalysis.stages.report import run_document, why_no_clusters, write_compare_html, write_run_report
from erroranalysis.stages.runner import Setup, run_model
from erroranalysis.stages.sft_check import read_sft_run, sft_check
from erroranalysis.stages.slices import SliceParams, slices_run
from erroranalysis.stages.steps import (
    Gate,
    analyze_generation_step,
    analyze_step,
    analyze_token_step,
    apply_latest_taxonomy,
    classifier_job,
    gate_step,
    head_job,
    model_task,
    same_predictions,
    token_step_job,
)
from erroranalysis.stages.suggestions import apply_taxonomy, review, suggest
from erroranalysis.stages.timeline import (
    build_timeline,
    error_type_keys,
    experiment_folder,
    previous_step,
    prune_run,
    prune_steps,
    step_runs,
    write_timeline,
)
from erroranalysis.stages.tokens import TokenParams, prepare_tokens, run_token_classification

"""The names of a run directory's files, which stage writes each, and the command that (re)runs a stage.

One table, so the commit protocol, the readers' messages and the docs agree on who owns what.
"""

from __future__ import annotations

MANIFEST = "manifest.json"
LOCK = ".lock"
STAGING = ".staging"

PREDICTIONS = "predictions.parquet"
PROBS = "probs.npy"
HIDDEN = "hidden_states.npy"
TRAINER_STATE = "trainer_state.json"
METRICS = "metrics.json"
CHECKS = "checks.parquet"
CHECKS_JSON = "checks.json"
SLICES = "slices.parquet"
SLICE_MEMBERS = "slice_members.parquet"
EMBEDDINGS = "embeddings.npy"
EMBEDDINGS_META = "embeddings.json"
CLUSTERS = "clusters.parquet"
ASSIGNMENTS = "assignments.parquet"
SUGGESTIONS = "taxonomy_suggestions.parquet"
DOCTOR_MD = "doctor.md"
DOCTOR_JSON = "doctor.json"
SPANS = "spans.parquet"  # token classification: one row per gold or predicted span, with its error kind
CENTROIDS = "cluster_centroids.parquet"  # what `timeline --prune` keeps of embeddings.npy: one vector per cluster
SFT_FINDINGS = "sft_findings.parquet"  # `erroranalysis sft-check`: one row per finding
SFT_ROWS = "sft_rows.parquet"  # each training row's text as trained / masked / cut spans
SFT_SUMMARY = "sft_summary.json"  # counts per kind, tokens per row, trained tokens per row and per source

from erroranalysis.core import schemas

CORE_COLUMNS = schemas.PREDICTIONS.columns  # predictions.parquet's own columns; the eval set's own follow

# artifact -> its columns, declared once in erroranalysis.core.schemas; writes and reads are checked against them
TABLES = {PREDICTIONS: schemas.PREDICTIONS, CLUSTERS: schemas.CLUSTERS, ASSIGNMENTS: schemas.ASSIGNMENTS,
          SLICES: schemas.SLICES, SLICE_MEMBERS: schemas.SLICE_MEMBERS, CHECKS: schemas.CHECKS,
          SUGGESTIONS: schemas.SUGGESTIONS, CENTROIDS: schemas.CENTROIDS, SPANS: schemas.SPANS,
          SFT_FINDINGS: schemas.SFT_FINDINGS, SFT_ROWS: schemas.SFT_ROWS}

# stage -> the artifacts it owns. A stage's artifacts are committed together; one it owns but did not write this
# time is removed at the commit, so no file outlives the stage run that made it.
STAGE_ARTIFACTS = {
    "infer": (PREDICTIONS, PROBS, HIDDEN, TRAINER_STATE, SPANS),
    "load_predictions": (PREDICTIONS, PROBS, SPANS),
    "metrics": (METRICS,),
    "checks": (CHECKS, CHECKS_JSON),
    "slices": (SLICES, SLICE_MEMBERS),
    "cluster": (EMBEDDINGS, EMBEDDINGS_META, CLUSTERS, ASSIGNMENTS),
    "cluster_names": (CLUSTERS,),
    "apply_taxonomy": (SUGGESTIONS,),
    "doctor": (DOCTOR_MD, DOCTOR_JSON),
    "sft_check": (SFT_FINDINGS, SFT_ROWS, SFT_SUMMARY),  # a run of its own: training data, no predictions
    # `erroranalysis timeline --prune`: an old step of a training run drops its bulky artifacts (committing their
    # removal, so the manifest says they are gone) and keeps its clusters' centroids for matching across steps
    "prune": (PROBS, HIDDEN, EMBEDDINGS, CENTROIDS),
}

# The stages that create a run's predictions; every other stage reads them.
SOURCE_STAGES = ("infer", "load_predictions")

# stage -> the stages whose artifacts it reads ("source" = whichever of SOURCE_STAGES made the run)
INPUTS = {
    "metrics": ("source",),
    "checks": ("source",),
    "slices": ("source",),
    "cluster": ("source",),
    "cluster_names": ("source", "cluster"),
    "apply_taxonomy": ("source",),
    "doctor": ("source", "metrics"),
    "prune": ("source",),
}

# stage -> the command that runs it again over the run ({run}); the source stages re-run the run's own command
COMMANDS = {
    "metrics": "erroranalysis metrics {run}",
    "checks": "erroranalysis data-checks {run}",
    "slices": "erroranalysis slices {run}",
    "cluster": "erroranalysis cluster {run}",
    "cluster_names": "erroranalysis cluster {run} --names-only",
    "apply_taxonomy": "erroranalysis apply-taxonomy TAXONOMY.json {run}",
    "prune": "erroranalysis timeline {run} --prune",
}


def owner(name: str) -> tuple[str, ...]:
    """The stages that may write artifact `name`."""
    return tuple(stage for stage, names in STAGE_ARTIFACTS.items() if name in names)

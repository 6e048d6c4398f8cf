"""The run directory: the contract between stages, the CLI, the UI and users' own scripts.

    with create_run("runs/x", task="classification", labels=[...]) as run:   # --overwrite builds beside, swaps
        with run.stage("metrics", params) as staging:
            staging.write_json(METRICS, result)                             # committed with the stage
    readers.read_metrics(Run.open("runs/x"))                                # refused unless 'metrics' is done

See docs/run-directory.md for the format, the stage states and the commit protocol.
"""

from __future__ import annotations

from erroranalysis.rundir import readers
from erroranalysis.rundir.artifacts import (
    ASSIGNMENTS,
    CENTROIDS,
    CHECKS,
    CHECKS_JSON,
    CLUSTERS,
    CORE_COLUMNS,
    DOCTOR_JSON,
    DOCTOR_MD,
    EMBEDDINGS,
    EMBEDDINGS_META,
    HIDDEN,
    MANIFEST,
    METRICS,
    PREDICTIONS,
    PROBS,
    SFT_FINDINGS,
    SFT_ROWS,
    SFT_SUMMARY,
    SLICE_MEMBERS,
    SLICES,
    SPANS,
    STAGE_ARTIFACTS,
    SUGGESTIONS,
    TABLES,
    TRAINER_STATE,
)
from erroranalysis.rundir.run import SCHEMA_VERSION, Run, check_out, create_run, now_iso, package_versions

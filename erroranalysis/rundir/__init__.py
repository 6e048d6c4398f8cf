"""The run directory: the contract between stages, the CLI, the UI and users' own scripts.

See docs/run-directory.md for the format.
"""

from __future__ import annotations

from erroranalysis.rundir.artifacts import (
    ASSIGNMENTS,
    CLUSTERS,
    CORE_COLUMNS,
    EMBEDDINGS,
    EMBEDDINGS_META,
    HIDDEN,
    MANIFEST,
    METRICS,
    PREDICTIONS,
    PROBS,
    SLICE_MEMBERS,
    SLICES,
)
from erroranalysis.rundir.atomic import atomic_files, atomic_write, write_json, write_npy, write_parquet
from erroranalysis.rundir.run import SCHEMA_VERSION, Run, now_iso, package_versions

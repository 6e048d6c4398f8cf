"""What several stages share: the manifest's description of the eval set, and which columns are metadata."""

from __future__ import annotations

from erroranalysis.rundir import CORE_COLUMNS, Run
from erroranalysis.sources.table import EvalSet


def data_entry(eval_set: EvalSet) -> dict:
    return eval_set.describe()


def metadata_of(run: Run, columns) -> list[str]:
    """The run's metadata columns: the manifest's `data.metadata_columns`, else every non-core column."""
    listed = (run.manifest.get("data") or {}).get("metadata_columns")
    if listed is None:
        return [c for c in columns if c not in CORE_COLUMNS]
    return [c for c in listed if c in columns]

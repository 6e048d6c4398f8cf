"""Labels: the workspace's SQLite store of error types and assignments, the taxonomy document, importing a
taxonomy and matching a new run's failures to its error types.
"""

from __future__ import annotations

from erroranalysis.labels.store import (
    DEFAULT_DB_NAME,
    FLAG_TITLES,
    FLAGS,
    MAX_NAME,
    MAX_TEXT,
    SCHEMA_VERSION,
    SEVERITIES,
    SOURCES,
    STATUSES,
    Change,
    ErrorType,
    Event,
    LabelStore,
    default_db_path,
    default_user,
    run_key,
)

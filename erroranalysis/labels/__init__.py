"""Labels: the workspace's SQLite store of error types and assignments, the taxonomy document, importing a
taxonomy and matching a new run's failures to its error types.

Modules: store (LabelStore: its writes; types.py and history.py hold its error-type and history parts), fields
(limits and the name folding rule), roles (read-only stores, viewers, writer kinds), workspace (which database a run
uses), connection (SQLite connections, retries, error messages), schema (versions and migrations), eventlog
(the append-only log and its compact payloads), backup, archive, taxonomy (the document's schema and renderings),
document (the document made from a run's example table), importing, matching.
"""

from __future__ import annotations

from erroranalysis.labels.connection import DamagedError, WriteFailedError
from erroranalysis.labels.eventlog import Change, Event
from erroranalysis.labels.fields import (
    FLAG_TITLES,
    FLAGS,
    MAX_NAME,
    MAX_TEXT,
    SEVERITIES,
    SOURCES,
    STATUSES,
    fold_name,
)
from erroranalysis.labels.roles import WRITERS, ReadOnlyError, default_user
from erroranalysis.labels.schema import SCHEMA_VERSION, NameClashError
from erroranalysis.labels.store import LabelStore
from erroranalysis.labels.types import KEEP, ErrorType
from erroranalysis.labels.workspace import DEFAULT_DB_NAME, labels_db_for, run_key, workspace_db

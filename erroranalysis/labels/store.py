"""The labels store: error types, example assignments, flags and notes in a workspace SQLite database.

Labels are the engineers' work, so the store is built not to lose them:

- one SQLite file per workspace (by default `<runs folder>/labels.sqlite`), in WAL mode with `synchronous=FULL`,
  so readers never block writers and a committed label survives a crash;
- every change is one `BEGIN IMMEDIATE` transaction that also appends one row to `events`, the log of who changed
  what and when (`events` refuses UPDATE and DELETE: triggers abort them);
- a writer that finds the database locked by another process waits (`busy_timeout`) and retries, so two people
  labeling the same workspace at once lose nothing;
- each event stores the rows it changed before and after, so `undo` restores exactly what was there, and refuses
  (naming the later event) when someone changed the same rows since.

Assignments are keyed by `(run, example_id)`, not by cluster, so re-clustering a run keeps its labels; the cluster an
example was in when it was labeled is kept beside it, so the app can show where labeled examples went.

    store = LabelStore("runs/labels.sqlite", user="alice")
    sarcasm = store.create_error_type("Sarcasm", "Literal reading of ironic text", severity="high")
    store.assign("sample", ["12", "40"], sarcasm.id)
    store.undo()                       # alice's last change, whatever it was
"""

from __future__ import annotations

import getpass
import json
import os
import random
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from erroranalysis.errors import ParameterError, UserError, preview
from erroranalysis.validation import check_param

SCHEMA_VERSION = 1
DEFAULT_DB_NAME = "labels.sqlite"
SEVERITIES = ("low", "medium", "high", "critical")
SOURCES = ("human", "suggested")
STATUSES = ("accepted", "pending", "rejected")
FLAGS = ("label_wrong", "not_error")
FLAG_TITLES = {"label_wrong": "label is wrong", "not_error": "not an error"}
MAX_NAME = 80
MAX_TEXT = 10_000
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS error_types (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL UNIQUE COLLATE NOCASE,
    definition  TEXT NOT NULL DEFAULT '',
    severity    TEXT NOT NULL DEFAULT 'medium' CHECK (severity IN ('low', 'medium', 'high', 'critical')),
    created     TEXT NOT NULL,
    created_by  TEXT NOT NULL,
    updated     TEXT NOT NULL,
    updated_by  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS assignments (
    run            TEXT NOT NULL,
    example_id     TEXT NOT NULL,
    error_type_id  INTEGER NOT NULL REFERENCES error_types(id),
    source         TEXT NOT NULL CHECK (source IN ('human', 'suggested')),
    status         TEXT NOT NULL CHECK (status IN ('accepted', 'pending', 'rejected')),
    cluster_id     INTEGER,
    updated        TEXT NOT NULL,
    updated_by     TEXT NOT NULL,
    PRIMARY KEY (run, example_id)
);
CREATE INDEX IF NOT EXISTS assignments_type ON assignments (error_type_id);
CREATE TABLE IF NOT EXISTS flags (
    run         TEXT NOT NULL,
    example_id  TEXT NOT NULL,
    flag        TEXT NOT NULL CHECK (flag IN ('label_wrong', 'not_error')),
    created     TEXT NOT NULL,
    created_by  TEXT NOT NULL,
    PRIMARY KEY (run, example_id, flag)
);
CREATE TABLE IF NOT EXISTS notes (
    run         TEXT NOT NULL,
    example_id  TEXT NOT NULL,
    text        TEXT NOT NULL,
    updated     TEXT NOT NULL,
    updated_by  TEXT NOT NULL,
    PRIMARY KEY (run, example_id)
);
CREATE TABLE IF NOT EXISTS events (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    ts       TEXT NOT NULL,
    user     TEXT NOT NULL,
    run      TEXT,
    action   TEXT NOT NULL,
    summary  TEXT NOT NULL,
    undoes   INTEGER REFERENCES events(id),
    payload  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_user ON events (user, id);
CREATE UNIQUE INDEX IF NOT EXISTS events_undoes ON events (undoes) WHERE undoes IS NOT NULL;
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'the events log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'the events log is append-only'); END;
"""


# Each table the event log records changes of, with its key columns and all its columns, in order.
_TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "error_types": (("id",), ("id", "name", "definition", "severity", "created", "created_by", "updated",
                              "updated_by")),
    "assignments": (("run", "example_id"), ("run", "example_id", "error_type_id", "source", "status", "cluster_id",
                                            "updated", "updated_by")),
    "flags": (("run", "example_id", "flag"), ("run", "example_id", "flag", "created", "created_by")),
    "notes": (("run", "example_id"), ("run", "example_id", "text", "updated", "updated_by")),
}


# Rows are undone in this order (children before parents when deleting, parents before children when restoring).
_UNDO_ORDER = ("assignments", "flags", "notes", "error_types")


def default_user() -> str:
    """The name events are recorded under: $ERRORANALYSIS_USER, else the login name."""
    name = os.environ.get("ERRORANALYSIS_USER", "").strip()
    if name:
        return name
    try:
        return getpass.getuser() or "unknown"
    except Exception:  # no login name in some containers
        return "unknown"


def default_db_path(runs_root: str | Path) -> Path:
    """Where a workspace keeps its labels: `<runs folder>/labels.sqlite`."""
    return Path(runs_root) / DEFAULT_DB_NAME


def _now() -> str:
    import datetime as _dt

    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class ErrorType:
    id: int
    name: str
    definition: str
    severity: str
    created: str
    created_by: str
    updated: str
    updated_by: str


@dataclass(frozen=True)
class Event:
    id: int
    ts: str
    user: str
    run: str | None
    action: str
    summary: str
    undoes: int | None
    payload: dict = field(repr=False)
    undone_by: int | None = None

    @property
    def n_changes(self) -> int:
        return len(self.payload.get("changes", []))


@dataclass(frozen=True)
class Change:
    """What one call changed: the event it logged (None when nothing changed) and how many rows."""

    event_id: int | None
    changed: int
    summary: str = ""


class LabelStore:
    """The workspace labels database. Cheap to construct; every call opens its own short connection, so one store
    can be shared by threads (Streamlit sessions) and several processes can write the same file at once."""

    def __init__(self, path: str | Path, *, user: str | None = None, busy_timeout: float = 30.0,
                 retries: int = 8, create: bool = True):
        self.path = Path(path)
        self.user = (user or default_user()).strip() or "unknown"
        check_param("busy_timeout", busy_timeout, busy_timeout > 0, "a number of seconds > 0")
        check_param("retries", retries, isinstance(retries, int) and retries >= 0, "an integer >= 0")
        self.busy_timeout = float(busy_timeout)
        self.retries = retries
        if create:
            self._init()
        elif not self.path.is_file():
            raise UserError(f"{self.path}: no labels database here; label examples in the app first, "
                            "or pass --labels-db.")
        else:
            self._check_version()

    def with_user(self, user: str) -> "LabelStore":
        """The same database (already opened, so not checked again), recording changes under another name."""
        other = object.__new__(LabelStore)
        other.__dict__.update(self.__dict__)
        other.user = (user or "").strip() or "unknown"
        return other

    # -- connections and transactions -----------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            con = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None,
                                  check_same_thread=False)
        except sqlite3.Error as exc:
            raise UserError(f"{self.path}: cannot open the labels database ({exc}); check the path and "
                            "its permissions.") from None
        con.row_factory = sqlite3.Row
        try:
            con.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            con.execute("PRAGMA foreign_keys = ON")
            con.execute("PRAGMA synchronous = FULL")
        except BaseException:
            con.close()
            raise
        return con

    def _init(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)

        def create_tables(con: sqlite3.Connection) -> None:
            try:
                con.executescript("BEGIN IMMEDIATE;\n" + _SCHEMA + "\nCOMMIT;")
            except BaseException:
                if con.in_transaction:
                    con.execute("ROLLBACK")
                raise

        def setup(con: sqlite3.Connection) -> None:
            row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                con.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                con.execute("INSERT INTO meta (key, value) VALUES ('created', ?)", (_now(),))
            elif int(row["value"]) != SCHEMA_VERSION:
                raise UserError(f"{self.path}: labels database schema_version {row['value']} is not supported "
                                f"(expected {SCHEMA_VERSION}); upgrade erroranalysis.")

        # journal_mode is set outside a transaction; it is a property of the file, kept once set.
        mode = self._read("PRAGMA journal_mode = WAL")[0][0]
        if str(mode).lower() != "wal":  # pragma: no cover - filesystems without shared memory
            raise UserError(f"{self.path}: the labels database needs WAL mode, which this filesystem "
                            "does not support; put it on a local disk with --labels-db.")
        self._with_connection(create_tables)
        self._transaction(setup)

    def _check_version(self) -> None:
        try:
            rows = self._read("SELECT value FROM meta WHERE key = 'schema_version'")
        except sqlite3.OperationalError as exc:
            raise UserError(f"{self.path}: not a labels database ({exc}); pass another --labels-db.") from None
        if not rows or int(rows[0]["value"]) != SCHEMA_VERSION:
            found = rows[0]["value"] if rows else None
            raise UserError(f"{self.path}: labels database schema_version {found!r} is not supported "
                            f"(expected {SCHEMA_VERSION}).")

    def _transaction(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run fn in one BEGIN IMMEDIATE transaction; retry the whole of it when the database is busy."""

        def body(con: sqlite3.Connection) -> Any:
            con.execute("BEGIN IMMEDIATE")
            try:
                result = fn(con)
                con.execute("COMMIT")
                return result
            except BaseException:
                if con.in_transaction:
                    con.execute("ROLLBACK")
                raise

        return self._with_connection(body)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        return self._with_connection(lambda con: con.execute(sql, params).fetchall())

    def _with_connection(self, body: Callable[[sqlite3.Connection], Any]) -> Any:
        """Open a connection, run body, close it. A busy or locked database (another writer held it longer than
        busy_timeout) is retried with jittered backoff; a file that is not a database becomes one clear message."""
        attempt = 0
        while True:
            con = None
            try:
                con = self._connect()
                return body(con)
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                if attempt >= self.retries:
                    raise UserError(f"{self.path}: the labels database stayed locked by another writer for "
                                    f"over {self.busy_timeout:g} s; try again.") from None
                attempt += 1
                time.sleep(min(2.0, 0.05 * 2 ** attempt) * (0.5 + random.random()))
            except sqlite3.DatabaseError as exc:
                if type(exc) is not sqlite3.DatabaseError:  # IntegrityError and friends are the caller's
                    raise
                raise UserError(f"{self.path}: the labels database is damaged or not a database ({exc}); "
                                "restore it from a backup or pass another --labels-db.") from None
            finally:
                if con is not None:
                    con.close()

    # -- the event log --------------------------------------------------------------------------------------

    def _log(self, con: sqlite3.Connection, *, run: str | None, action: str, summary: str,
             changes: list[dict], undoes: int | None = None, extra: dict | None = None) -> int:
        payload = {"changes": changes, **(extra or {})}
        cur = con.execute(
            "INSERT INTO events (ts, user, run, action, summary, undoes, payload) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (_now(), self.user, run, action, summary, undoes, json.dumps(payload, separators=(",", ":"))),
        )
        return int(cur.lastrowid)

    @staticmethod
    def _row(con: sqlite3.Connection, table: str, key: dict) -> dict | None:
        keys, cols = _TABLES[table]
        where = " AND ".join(f"{k} = ?" for k in keys)
        row = con.execute(f"SELECT {', '.join(cols)} FROM {table} WHERE {where}",
                          [key[k] for k in keys]).fetchone()
        return dict(row) if row is not None else None

    @staticmethod
    def _put(con: sqlite3.Connection, table: str, key: dict, row: dict | None) -> None:
        """Make the row at key be `row` (None deletes it)."""
        keys, cols = _TABLES[table]
        where = " AND ".join(f"{k} = ?" for k in keys)
        key_values = [key[k] for k in keys]
        if row is None:
            con.execute(f"DELETE FROM {table} WHERE {where}", key_values)
            return
        # UPDATE or INSERT, never INSERT OR REPLACE: REPLACE would silently delete another row that clashes on a
        # unique column (an error type's name); a clash must raise instead.
        others = [c for c in cols if c not in keys]
        cur = con.execute(f"UPDATE {table} SET {', '.join(f'{c} = ?' for c in others)} WHERE {where}",
                          [row[c] for c in others] + key_values)
        if cur.rowcount == 0:
            con.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                        [row[c] for c in cols])

    # -- error types ----------------------------------------------------------------------------------------

    def create_error_type(self, name: str, definition: str = "", severity: str = "medium") -> ErrorType:
        name = _clean_name(name)
        definition = _clean_text("definition", definition)
        _check_severity(severity)

        def do(con: sqlite3.Connection) -> int:
            if con.execute("SELECT 1 FROM error_types WHERE name = ?", (name,)).fetchone():
                raise UserError(f"error type {name!r} already exists; pick another name or assign to it.")
            now = _now()
            cur = con.execute(
                "INSERT INTO error_types (name, definition, severity, created, created_by, updated, updated_by) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)", (name, definition, severity, now, self.user, now, self.user))
            type_id = int(cur.lastrowid)
            after = self._row(con, "error_types", {"id": type_id})
            self._log(con, run=None, action="create_type", summary=f"created error type {name!r}",
                      changes=[{"table": "error_types", "before": None, "after": after}])
            return type_id

        return self.error_type(self._transaction(do))

    def update_error_type(self, type_ref: int | str, *, name: str | None = None, definition: str | None = None,
                          severity: str | None = None) -> ErrorType:
        if name is not None:
            name = _clean_name(name)
        if definition is not None:
            definition = _clean_text("definition", definition)
        if severity is not None:
            _check_severity(severity)

        def do(con: sqlite3.Connection) -> int:
            before = self._resolve_type(con, type_ref)
            after = dict(before)
            if name is not None and name != before["name"]:
                clash = con.execute("SELECT id FROM error_types WHERE name = ? AND id != ?",
                                    (name, before["id"])).fetchone()
                if clash:
                    raise UserError(f"error type {name!r} already exists; merge into it instead of renaming.")
                after["name"] = name
            if definition is not None:
                after["definition"] = definition
            if severity is not None:
                after["severity"] = severity
            if after == before:
                return before["id"]
            after["updated"], after["updated_by"] = _now(), self.user
            self._put(con, "error_types", after, after)
            what = [k for k in ("name", "definition", "severity") if after[k] != before[k]]
            self._log(con, run=None, action="update_type",
                      summary=f"edited error type {before['name']!r} ({', '.join(what)})",
                      changes=[{"table": "error_types", "before": before, "after": after}])
            return before["id"]

        return self.error_type(self._transaction(do))

    def delete_error_type(self, type_ref: int | str) -> Change:
        """Delete an error type and unassign its examples (in every run); one undo restores both."""

        def do(con: sqlite3.Connection) -> Change:
            row = self._resolve_type(con, type_ref)
            changes = []
            for a in con.execute("SELECT * FROM assignments WHERE error_type_id = ?", (row["id"],)).fetchall():
                changes.append({"table": "assignments", "before": dict(a), "after": None})
            con.execute("DELETE FROM assignments WHERE error_type_id = ?", (row["id"],))
            con.execute("DELETE FROM error_types WHERE id = ?", (row["id"],))
            changes.append({"table": "error_types", "before": row, "after": None})
            summary = f"deleted error type {row['name']!r} ({len(changes) - 1} examples unassigned)"
            event = self._log(con, run=None, action="delete_type", summary=summary, changes=changes)
            return Change(event, len(changes) - 1, summary)

        return self._transaction(do)

    def merge_error_types(self, sources: Iterable[int | str], target: int | str) -> Change:
        """Move every example of `sources` to `target` and delete the sources."""

        def do(con: sqlite3.Connection) -> Change:
            into = self._resolve_type(con, target)
            rows = []
            for ref in sources:
                row = self._resolve_type(con, ref)
                if row["id"] != into["id"] and row not in rows:
                    rows.append(row)
            if not rows:
                raise UserError(f"nothing to merge into {into['name']!r}: pick at least one other error type.")
            changes, now = [], _now()
            for row in rows:
                for a in con.execute("SELECT * FROM assignments WHERE error_type_id = ?", (row["id"],)).fetchall():
                    before = dict(a)
                    after = {**before, "error_type_id": into["id"], "updated": now, "updated_by": self.user}
                    self._put(con, "assignments", after, after)
                    changes.append({"table": "assignments", "before": before, "after": after})
            moved = len(changes)
            for row in rows:
                con.execute("DELETE FROM error_types WHERE id = ?", (row["id"],))
                changes.append({"table": "error_types", "before": row, "after": None})
            names = ", ".join(repr(r["name"]) for r in rows)
            summary = f"merged {names} into {into['name']!r} ({moved} examples)"
            event = self._log(con, run=None, action="merge_types", summary=summary, changes=changes)
            return Change(event, moved, summary)

        return self._transaction(do)

    def error_types(self) -> list[ErrorType]:
        rows = self._read("SELECT * FROM error_types ORDER BY name COLLATE NOCASE")
        return [ErrorType(**dict(r)) for r in rows]

    def error_type(self, type_ref: int | str) -> ErrorType:
        con = self._connect()
        try:
            return ErrorType(**self._resolve_type(con, type_ref))
        finally:
            con.close()

    @staticmethod
    def _resolve_type(con: sqlite3.Connection, type_ref: int | str) -> dict:
        if isinstance(type_ref, ErrorType):
            type_ref = type_ref.id
        if isinstance(type_ref, bool):
            raise ParameterError("error_type", type_ref, "an error type id or name")
        if isinstance(type_ref, int):
            row = con.execute("SELECT * FROM error_types WHERE id = ?", (type_ref,)).fetchone()
        else:
            row = con.execute("SELECT * FROM error_types WHERE name = ?", (str(type_ref).strip(),)).fetchone()
        if row is None:
            known = [r[0] for r in con.execute("SELECT name FROM error_types ORDER BY name").fetchall()]
            raise UserError(f"no error type {type_ref!r}; known: {preview(known) if known else 'none yet'}.")
        return dict(row)

    # -- assignments ----------------------------------------------------------------------------------------

    def assign(self, run: str, example_ids: Iterable[Any], error_type: int | str, *, source: str = "human",
               status: str | None = None, cluster_ids: dict[str, int] | None = None,
               summary: str | None = None) -> Change:
        """Assign examples of `run` to an error type (replacing any earlier assignment of those examples).

        `cluster_ids` maps example ids to the cluster they are in now, kept so the app can show where labeled
        examples went after re-clustering. Human assignments are `accepted`; suggestions default to `pending`.
        """
        run = _clean_run(run)
        ids = _clean_ids(example_ids)
        check_param("source", source, source in SOURCES, f"one of {', '.join(SOURCES)}")
        status = status or ("accepted" if source == "human" else "pending")
        check_param("status", status, status in STATUSES, f"one of {', '.join(STATUSES)}")
        clusters = {str(k): (None if v is None else int(v)) for k, v in (cluster_ids or {}).items()}

        def do(con: sqlite3.Connection) -> Change:
            etype = self._resolve_type(con, error_type)
            now, changes = _now(), []
            for ex in ids:
                key = {"run": run, "example_id": ex}
                before = self._row(con, "assignments", key)
                cluster = clusters.get(ex, before["cluster_id"] if before else None)
                after = {"run": run, "example_id": ex, "error_type_id": etype["id"], "source": source,
                         "status": status, "cluster_id": cluster, "updated": now, "updated_by": self.user}
                if before is not None and all(before[k] == after[k] for k in
                                              ("error_type_id", "source", "status", "cluster_id")):
                    continue
                self._put(con, "assignments", key, after)
                changes.append({"table": "assignments", "before": before, "after": after})
            if not changes:
                return Change(None, 0, "nothing changed")
            text = summary or f"assigned {_n(len(changes), 'example')} to {etype['name']!r}"
            event = self._log(con, run=run, action="assign", summary=text, changes=changes)
            return Change(event, len(changes), text)

        return self._transaction(do)

    def unassign(self, run: str, example_ids: Iterable[Any], *, summary: str | None = None) -> Change:
        """Remove examples from whatever error type they are in (split them out)."""
        run = _clean_run(run)
        ids = _clean_ids(example_ids)

        def do(con: sqlite3.Connection) -> Change:
            changes = []
            for ex in ids:
                key = {"run": run, "example_id": ex}
                before = self._row(con, "assignments", key)
                if before is None:
                    continue
                self._put(con, "assignments", key, None)
                changes.append({"table": "assignments", "before": before, "after": None})
            if not changes:
                return Change(None, 0, "nothing changed")
            text = summary or f"unassigned {_n(len(changes), 'example')}"
            event = self._log(con, run=run, action="unassign", summary=text, changes=changes)
            return Change(event, len(changes), text)

        return self._transaction(do)

    def set_status(self, run: str, example_ids: Iterable[Any], status: str) -> Change:
        """Accept or reject suggested assignments (a human decision: source becomes 'human' when accepted)."""
        run = _clean_run(run)
        ids = _clean_ids(example_ids)
        check_param("status", status, status in STATUSES, f"one of {', '.join(STATUSES)}")

        def do(con: sqlite3.Connection) -> Change:
            now, changes = _now(), []
            for ex in ids:
                key = {"run": run, "example_id": ex}
                before = self._row(con, "assignments", key)
                if before is None or before["status"] == status:
                    continue
                after = {**before, "status": status, "updated": now, "updated_by": self.user}
                if status == "accepted":
                    after["source"] = "human"  # accepted by a person: from now on it is a human label
                self._put(con, "assignments", key, after)
                changes.append({"table": "assignments", "before": before, "after": after})
            if not changes:
                return Change(None, 0, "nothing changed")
            verb = {"accepted": "accepted", "rejected": "rejected", "pending": "reopened"}[status]
            text = f"{verb} {_n(len(changes), 'suggestion')}"
            event = self._log(con, run=run, action="set_status", summary=text, changes=changes)
            return Change(event, len(changes), text)

        return self._transaction(do)

    def assignments(self, run: str | None = None, *, include_rejected: bool = True):
        """A DataFrame: run, example_id, error_type_id, error_type, severity, source, status, cluster_id,
        updated, updated_by (one row per assigned example)."""
        import pandas as pd

        sql = ("SELECT a.run, a.example_id, a.error_type_id, t.name AS error_type, t.severity, a.source, a.status, "
               "a.cluster_id, a.updated, a.updated_by FROM assignments a JOIN error_types t "
               "ON t.id = a.error_type_id")
        where, params = [], []
        if run is not None:
            where.append("a.run = ?")
            params.append(_clean_run(run))
        if not include_rejected:
            where.append("a.status != 'rejected'")
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = self._read(sql + " ORDER BY a.run, a.example_id", params)
        columns = ["run", "example_id", "error_type_id", "error_type", "severity", "source", "status", "cluster_id",
                   "updated", "updated_by"]
        df = pd.DataFrame([tuple(r) for r in rows], columns=columns)
        df["cluster_id"] = df["cluster_id"].astype("Int64")
        df["error_type_id"] = df["error_type_id"].astype("int64")
        return df

    def counts(self, run: str | None = None) -> dict[str, int]:
        """Accepted examples per error type name (every type listed, zero when unused)."""
        sql = ("SELECT t.name, COUNT(a.example_id) FROM error_types t LEFT JOIN assignments a ON a.error_type_id = t.id"
               " AND a.status = 'accepted'" + (" AND a.run = ?" if run is not None else "") +
               " GROUP BY t.id ORDER BY COUNT(a.example_id) DESC, t.name COLLATE NOCASE")
        rows = self._read(sql, [_clean_run(run)] if run is not None else [])
        return {r[0]: int(r[1]) for r in rows}

    # -- flags and notes ------------------------------------------------------------------------------------

    def set_flag(self, run: str, example_ids: Iterable[Any], flag: str, value: bool = True) -> Change:
        """Mark examples 'label_wrong' (the gold label is wrong) or 'not_error' (the prediction is acceptable),
        or clear the mark with value=False."""
        run = _clean_run(run)
        ids = _clean_ids(example_ids)
        check_param("flag", flag, flag in FLAGS, f"one of {', '.join(FLAGS)}")

        def do(con: sqlite3.Connection) -> Change:
            now, changes = _now(), []
            for ex in ids:
                key = {"run": run, "example_id": ex, "flag": flag}
                before = self._row(con, "flags", key)
                if (before is not None) == bool(value):
                    continue
                after = ({"run": run, "example_id": ex, "flag": flag, "created": now, "created_by": self.user}
                         if value else None)
                self._put(con, "flags", key, after)
                changes.append({"table": "flags", "before": before, "after": after})
            if not changes:
                return Change(None, 0, "nothing changed")
            verb = "flagged" if value else "cleared the flag of"
            text = f"{verb} {_n(len(changes), 'example')} as {FLAG_TITLES[flag]!r}" if value else \
                f"cleared {FLAG_TITLES[flag]!r} on {_n(len(changes), 'example')}"
            event = self._log(con, run=run, action="flag" if value else "unflag", summary=text, changes=changes)
            return Change(event, len(changes), text)

        return self._transaction(do)

    def flags(self, run: str | None = None):
        """A DataFrame: run, example_id, flag, created, created_by."""
        import pandas as pd

        sql = "SELECT run, example_id, flag, created, created_by FROM flags"
        rows = self._read(sql + (" WHERE run = ?" if run is not None else "") + " ORDER BY run, example_id, flag",
                          [_clean_run(run)] if run is not None else [])
        return pd.DataFrame([tuple(r) for r in rows], columns=["run", "example_id", "flag", "created", "created_by"])

    def set_note(self, run: str, example_id: Any, text: str) -> Change:
        """Write the note on one example (an empty text removes it)."""
        run = _clean_run(run)
        (ex,) = _clean_ids([example_id])
        text = _clean_text("note", text)

        def do(con: sqlite3.Connection) -> Change:
            key = {"run": run, "example_id": ex}
            before = self._row(con, "notes", key)
            after = {"run": run, "example_id": ex, "text": text, "updated": _now(), "updated_by": self.user} \
                if text else None
            if (before is None and after is None) or (before and after and before["text"] == after["text"]):
                return Change(None, 0, "nothing changed")
            self._put(con, "notes", key, after)
            summary = f"{'noted' if after else 'removed the note on'} example {ex!r}"
            event = self._log(con, run=run, action="note", summary=summary,
                              changes=[{"table": "notes", "before": before, "after": after}])
            return Change(event, 1, summary)

        return self._transaction(do)

    def notes(self, run: str | None = None):
        """A DataFrame: run, example_id, text, updated, updated_by."""
        import pandas as pd

        sql = "SELECT run, example_id, text, updated, updated_by FROM notes"
        rows = self._read(sql + (" WHERE run = ?" if run is not None else "") + " ORDER BY run, example_id",
                          [_clean_run(run)] if run is not None else [])
        return pd.DataFrame([tuple(r) for r in rows], columns=["run", "example_id", "text", "updated", "updated_by"])

    # -- history and undo -----------------------------------------------------------------------------------

    def events(self, *, run: str | None = None, user: str | None = None, limit: int | None = 50,
               with_payload: bool = False) -> list[Event]:
        """The newest events first, each with `undone_by` set when a later event undid it."""
        cols = "e.id, e.ts, e.user, e.run, e.action, e.summary, e.undoes, u.id AS undone_by" + \
            (", e.payload" if with_payload else "")
        sql = f"SELECT {cols} FROM events e LEFT JOIN events u ON u.undoes = e.id"
        where, params = [], []
        if run is not None:
            where.append("(e.run = ? OR e.run IS NULL)")
            params.append(run)
        if user is not None:
            where.append("e.user = ?")
            params.append(user)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY e.id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        out = []
        for r in self._read(sql, params):
            d = dict(r)
            payload = json.loads(d.pop("payload")) if with_payload else {}
            out.append(Event(payload=payload, **d))
        return out

    def last_undoable(self, *, user: str | None = None) -> Event | None:
        """The event `undo` would revert: the newest change by `user` (default: this store's user) that is not
        itself an undo and was not undone."""
        who = self.user if user is None else user
        rows = self._read(
            "SELECT e.id, e.ts, e.user, e.run, e.action, e.summary, e.undoes FROM events e "
            "WHERE e.user = ? AND e.undoes IS NULL AND e.action != 'undo' "
            "AND NOT EXISTS (SELECT 1 FROM events u WHERE u.undoes = e.id) ORDER BY e.id DESC LIMIT 1", (who,))
        return Event(payload={}, **dict(rows[0])) if rows else None

    def undo(self, event_id: int | None = None) -> Change:
        """Revert one event (default: this user's newest change not yet undone) by restoring the rows it changed.

        Refuses with a UserError, changing nothing, when a later event changed any of the same rows; the message
        names that event so it can be undone first.
        """

        def do(con: sqlite3.Connection) -> Change:
            if event_id is None:
                row = con.execute(
                    "SELECT * FROM events e WHERE e.user = ? AND e.undoes IS NULL AND e.action != 'undo' "
                    "AND NOT EXISTS (SELECT 1 FROM events u WHERE u.undoes = e.id) ORDER BY e.id DESC LIMIT 1",
                    (self.user,)).fetchone()
                if row is None:
                    raise UserError(f"nothing to undo: {self.user!r} has no changes left to revert.")
            else:
                row = con.execute("SELECT * FROM events WHERE id = ?", (int(event_id),)).fetchone()
                if row is None:
                    raise UserError(f"no event {event_id} in {self.path}.")
                if row["action"] == "undo":
                    raise UserError(f"event {event_id} is itself an undo; make the change again instead.")
                done = con.execute("SELECT id FROM events WHERE undoes = ?", (row["id"],)).fetchone()
                if done:
                    raise UserError(f"event {event_id} was already undone by event {done['id']}.")
            payload = json.loads(row["payload"])
            changes = payload.get("changes", [])
            # Refuse when any row no longer is what this event left.
            for ch in changes:
                table = ch["table"]
                state = ch["after"] if ch["after"] is not None else ch["before"]
                key = {k: state[k] for k in _TABLES[table][0]}
                if self._row(con, table, key) != ch["after"]:
                    later = _later_event(con, row["id"], table, key)
                    by = f" by event {later['id']} ({later['user']}: {later['summary']})" if later else ""
                    raise UserError(f"cannot undo {row['summary']!r}: {table} row {_key_text(key)} was changed "
                                    f"since{by}; undo that first.")
            inverse = []
            ordered = sorted(changes, key=lambda ch: _undo_rank(ch))
            for ch in ordered:
                table = ch["table"]
                state = ch["after"] if ch["after"] is not None else ch["before"]
                key = {k: state[k] for k in _TABLES[table][0]}
                try:
                    self._put(con, table, key, ch["before"])
                except sqlite3.IntegrityError as exc:
                    if "FOREIGN KEY" in str(exc).upper():
                        why = f"examples are still assigned to error type {state.get('name')!r} by later changes"
                    elif table == "error_types":
                        why = f"an error type named {state.get('name')!r} exists now"
                    else:
                        why = str(exc)
                    raise UserError(f"cannot undo {row['summary']!r}: {why}; undo or change those first.") from None
                inverse.append({"table": table, "before": ch["after"], "after": ch["before"]})
            summary = f"undid: {row['summary']}"
            event = self._log(con, run=row["run"], action="undo", summary=summary, changes=inverse,
                              undoes=row["id"])
            return Change(event, len(changes), summary)

        return self._transaction(do)

    # -- workspace facts ------------------------------------------------------------------------------------

    def version(self) -> int:
        """The newest event id: changes whenever anything in the store changes (a cheap cache key)."""
        rows = self._read("SELECT COALESCE(MAX(id), 0) FROM events")
        return int(rows[0][0])

    def runs(self) -> list[str]:
        rows = self._read("SELECT DISTINCT run FROM assignments UNION SELECT DISTINCT run FROM flags "
                          "UNION SELECT DISTINCT run FROM notes ORDER BY 1")
        return [r[0] for r in rows]

    def integrity_check(self) -> str:
        return str(self._read("PRAGMA integrity_check")[0][0])

    def run_key(self, run_path: str | Path) -> str:
        """The name a run's labels are stored under: its path relative to the database's folder when it lies
        inside it (`sample`, `team/sample`), else the run folder's name."""
        return run_key(run_path, self.path)


def run_key(run_path: str | Path, db_path: str | Path) -> str:
    run = Path(run_path).resolve()
    base = Path(db_path).resolve().parent
    try:
        rel = run.relative_to(base)
    except ValueError:
        return run.name
    return rel.as_posix() if rel.parts else run.name


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _later_event(con: sqlite3.Connection, after_id: int, table: str, key: dict) -> dict | None:
    """The newest event after `after_id` that touched the row at key (scanning payloads; undo is rare)."""
    for row in con.execute("SELECT id, user, summary, payload FROM events WHERE id > ? ORDER BY id DESC",
                           (after_id,)).fetchall():
        for ch in json.loads(row["payload"]).get("changes", []):
            if ch["table"] != table:
                continue
            state = ch["after"] if ch["after"] is not None else ch["before"]
            if state and all(state.get(k) == v for k, v in key.items()):
                return dict(row)
    return None


def _undo_rank(change: dict) -> tuple[int, int]:
    # Rows whose undo deletes them go first (children before parents); restored parents before their children.
    table_rank = _UNDO_ORDER.index(change["table"])
    if change["before"] is None:  # undo deletes: assignments before error types
        return (0, table_rank)
    return (1, -table_rank)  # undo restores: error types before assignments


def _key_text(key: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in key.items())


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _clean_name(name: Any) -> str:
    text = " ".join(str(name or "").split())
    check_param("name", name, bool(text), "a non-empty error type name")
    check_param("name", name, len(text) <= MAX_NAME, f"at most {MAX_NAME} characters")
    return text


def _clean_text(what: str, text: Any) -> str:
    text = "" if text is None else str(text).strip()
    check_param(what, text[:40] + "...", len(text) <= MAX_TEXT, f"at most {MAX_TEXT} characters")
    return text


def _check_severity(severity: Any) -> None:
    check_param("severity", severity, severity in SEVERITIES, f"one of {', '.join(SEVERITIES)}")


def _clean_run(run: Any) -> str:
    text = str(run or "").strip()
    check_param("run", run, bool(text), "a run name")
    return text


def _clean_ids(example_ids: Iterable[Any]) -> list[str]:
    if isinstance(example_ids, (str, bytes)):
        raise ParameterError("example_ids", example_ids, "a list of example ids, not a string")
    seen: dict[str, None] = {}
    for ex in example_ids:
        text = str(ex)
        check_param("example_id", ex, text != "", "a non-empty example id")
        seen.setdefault(text, None)
    return list(seen)

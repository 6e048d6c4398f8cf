"""The labels store: error types, example assignments, flags and notes in a workspace SQLite database.

Labels are the engineers' work, so the store is built not to lose them:

- one SQLite file per workspace (which one: `erroranalysis.labels.workspace`), in WAL mode with
  `synchronous=FULL`, so readers never block writers and a committed label survives a crash; checked
  (`quick_check`) and migrated to the current schema (after a backup copy) when opened, never re-created;
- every change goes through one write path (`_write`): the rows it wants are compared with the rows there, the ones
  that differ are written, and one row is appended to `events`, the log of who changed what, when and as which kind
  of writer, in the same `BEGIN IMMEDIATE` transaction (`events` refuses UPDATE and DELETE: triggers abort them);
- `batch()` runs many changes in one transaction logged as one event: all of them are stored, or none;
- a writer that finds the database locked waits and retries (connection.py), so two people labeling the same
  workspace at once lose nothing; a full disk or a damaged file is a one-line error, with nothing half-written;
- each event stores the rows it changed before and after, so `undo` restores exactly what was there, and refuses
  (naming the later event) when someone changed the same rows since.

Assignments are keyed by `(run, example_id)`, not by cluster, so re-clustering a run keeps its labels; the cluster an
example was in when it was labeled is kept beside it, so the app can show where labeled examples went.

    store = LabelStore("runs/labels.sqlite", user="alice")
    sarcasm = store.create_error_type("Sarcasm", "Literal reading of ironic text", severity="high")
    store.assign("sample", ["12", "40"], sarcasm.id)
    with store.batch("relabel after review") as b:   # one transaction, one event
        b.unassign("sample", ["40"])
        b.set_flag("sample", ["40"], "label_wrong")
    store.undo()                       # alice's last change, whatever it was
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from erroranalysis.core.errors import UserError
from erroranalysis.core.validation import check_param
from erroranalysis.labels import eventlog, rows, schema
from erroranalysis.labels.connection import Bound, Database, translate
from erroranalysis.labels.eventlog import TABLES, Change
from erroranalysis.labels.fields import (
    FLAG_TITLES,
    FLAGS,
    SOURCES,
    STATUSES,
    clean_ids,
    clean_run,
    clean_text,
)
from erroranalysis.labels.history import HistoryOps
from erroranalysis.labels.roles import Access, ReadOnlyError, check_writer, default_user
from erroranalysis.labels.rows import Target
from erroranalysis.labels.runkeys import RunKeyOps
from erroranalysis.labels.types import TypeOps

CLASH_CHOICES = ("merge", "rename")


class LabelStore(TypeOps, HistoryOps, RunKeyOps):
    """The workspace labels database. Opening checks the file (quick_check, which reads it whole) and migrates an
    older schema; keep the store (or its `with_user` copies, which are not checked again) rather than opening it per
    call. Every call opens its own short connection, so one store can be shared by threads (Streamlit sessions) and
    processes can write at once.

    `read_only` (or a `user` among `viewers`) refuses every change with ReadOnlyError; `writer` is the kind of
    writer its events record (roles.WRITERS). `resolve_clashes` ('merge' or 'rename') lets the migration to
    schema 2 resolve error types whose names clash under Unicode case folding; without it such a file is refused
    with the command that shows the plan.
    """

    def __init__(self, path: str | Path, *, user: str | None = None, writer: str = "cli", read_only: bool = False,
                 viewers: Iterable[str] = (), busy_timeout: float = 30.0, retries: int = 8, create: bool = True,
                 resolve_clashes: str | None = None):
        self.path = Path(path)
        self.user = (user or default_user()).strip() or "unknown"
        check_param("busy_timeout", busy_timeout, busy_timeout > 0, "a number of seconds > 0")
        check_param("retries", retries, isinstance(retries, int) and retries >= 0, "an integer >= 0")
        check_param("resolve_clashes", resolve_clashes, resolve_clashes in (None, *CLASH_CHOICES),
                    "merge, rename or None")
        self.writer = check_writer(writer)
        self.access = Access.of(read_only, viewers)
        self._db: Database | Bound = Database(self.path, busy_timeout=busy_timeout, retries=retries,
                                              query_only=bool(read_only))
        self._pending: list[tuple] | None = None  # inside a batch: the changes its event will hold
        self.summary: str | None = None
        self.change: Change | None = None
        self.migrated: tuple[int, Path] | None = None  # (schema it had, backup made before) when opening migrated
        self._open(create, resolve_clashes)

    @property
    def busy_timeout(self) -> float:
        return self._db.busy_timeout if isinstance(self._db, Database) else self._db._db.busy_timeout

    def _open(self, create: bool, resolve_clashes: str | None) -> None:
        read_only = self.access.read_only
        if not self.path.exists():
            if not create or read_only:
                raise UserError(f"{self.path}: no labels database here; label examples in the app first, "
                                "or pass --labels-db.")
            schema.create(self.path)
        schema.check_file(self.path)
        schema.quick_check(self._db)
        if read_only:
            found = schema.version(self._db)
            if found != schema.SCHEMA_VERSION:
                raise UserError(f"{self.path}: labels schema {found} needs migrating to {schema.SCHEMA_VERSION}, "
                                "which a read-only store does not do; run 'erroranalysis labels migrate "
                                f"--labels-db {self.path}' first.")
            return
        mode = self._db.read("PRAGMA journal_mode = WAL")[0][0]
        if str(mode).lower() != "wal":  # pragma: no cover - filesystems without shared memory
            raise UserError(f"{self.path}: the labels database needs WAL mode, which this filesystem does not "
                            "support; put it on a local disk with --labels-db.")
        resolver = None if resolve_clashes is None else lambda con, groups: self._bound(con)._resolve_clashes(
            groups, resolve_clashes)
        self.migrated = schema.upgrade(self._db, resolver)

    def _clone(self) -> LabelStore:
        other = object.__new__(LabelStore)
        other.__dict__.update(self.__dict__)
        return other

    def with_user(self, user: str, *, writer: str | None = None) -> LabelStore:
        """The same database (already opened, so not checked again), recording changes under another name (and
        kind of writer). The viewer list applies to the new user."""
        other = self._clone()
        other.user = (user or "").strip() or "unknown"
        if writer is not None:
            other.writer = check_writer(writer)
        return other

    @property
    def can_write(self) -> bool:
        return self.access.refusal(self.user, self.path) is None

    @property
    def read_only_reason(self) -> str | None:
        """Why this store refuses changes (one line), or None when it accepts them."""
        return self.access.refusal(self.user, self.path)

    def _check_writable(self) -> None:
        why = self.read_only_reason
        if why is not None:
            raise ReadOnlyError(why)

    # -- the one write path -----------------------------------------------------------------------------------------

    def _write(self, build: Callable[[sqlite3.Connection], list[Target]], *, action: str, run: str | None,
               describe: Callable[[list[dict]], str], count: str | None = None) -> Change:
        """Run build(con) in one transaction: of the rows it wants, write those that differ from what is there and
        log them as one event. `describe` words the event from its changes; `count` names the table whose changed
        rows Change.changed counts (default: all)."""
        self._check_writable()

        def do(con: sqlite3.Connection) -> Change:
            changes = [{"table": t, "before": b, "after": a} for t, b, a in build(con) if not rows.same(b, a)]
            if not changes:
                return Change(None, 0, "nothing changed")
            rows.apply(con, changes)
            n = len(changes) if count is None else sum(ch["table"] == count for ch in changes)
            return self._record(con, run=run, action=action, summary=describe(changes), changes=changes, n=n)

        return self._db.transaction(do)

    def _record(self, con: sqlite3.Connection, *, run: str | None, action: str, summary: str, changes: list[dict],
                n: int, undoes: int | None = None) -> Change:
        if self._pending is not None:  # inside a batch: its one event is logged when it ends
            self._pending.append((run, summary, changes))
            return Change(None, n, summary)
        event = eventlog.append(con, user=self.user, writer=self.writer, run=run, action=action, summary=summary,
                                changes=changes, undoes=undoes)
        return Change(event, n, summary)

    @contextmanager
    def batch(self, summary: str | None = None, *, action: str = "batch", run: str | None = None,
              writer: str | None = None) -> Iterator[LabelStore]:
        """A store bound to one transaction: every change made through it is stored when the block ends, as ONE
        event, or none is (an exception rolls all of them back). Reads through it see its changes. Its
        `summary` may be set inside the block; afterwards its `change` says what was logged.

            with store.batch(action="apply_taxonomy", writer="suggestion") as b:
                b.unassign(key, stale)
                b.assign(key, ids, type_id, source="suggested")
            b.change.event_id
        """
        self._check_writable()
        if self._pending is not None:  # nested: part of the enclosing batch
            yield self
            return
        base = self._db
        con = base.begin()
        bound = self._bound(con)
        bound._pending, bound.summary = [], summary
        if writer is not None:
            bound.writer = check_writer(writer)
        try:
            yield bound
            bound.change = bound._log_batch(con, action, run)
            con.execute("COMMIT")
        except BaseException as exc:
            if con.in_transaction:
                con.execute("ROLLBACK")
            if isinstance(exc, sqlite3.DatabaseError):
                raise translate(exc, self.path) from None
            raise
        finally:
            con.close()

    def _bound(self, con: sqlite3.Connection) -> LabelStore:
        bound = self._clone()
        bound._db = Bound(self._db if isinstance(self._db, Database) else self._db._db, con)
        return bound

    def _log_batch(self, con: sqlite3.Connection, action: str, run: str | None) -> Change:
        parts = self._pending or []
        changes = eventlog.collapse([ch for _, _, part in parts for ch in part])
        if not changes:
            return Change(None, 0, "nothing changed")
        runs = {r for r, _, _ in parts}
        run = run if run is not None else (runs.pop() if len(runs) == 1 else None)
        texts = [s for _, s, _ in parts]
        summary = self.summary or ("; ".join(texts) if len(texts) <= 3 else
                                   "; ".join(texts[:2]) + f"; and {len(texts) - 2} more changes")
        event = eventlog.append(con, user=self.user, writer=self.writer, run=run, action=action, summary=summary,
                                changes=changes)
        return Change(event, len(changes), summary)

    # -- assignments ------------------------------------------------------------------------------------------------

    def assign(self, run: str, example_ids: Iterable[Any], error_type: int | str, *, source: str = "human",
               status: str | None = None, cluster_ids: dict[str, int] | None = None,
               summary: str | None = None) -> Change:
        """Assign examples of `run` to an error type (replacing any earlier assignment of those examples).

        `cluster_ids` maps example ids to the cluster they are in now, kept so the app can show where labeled
        examples went after re-clustering. Human assignments are `accepted`; suggestions default to `pending`.
        """
        run = clean_run(run)
        ids = clean_ids(example_ids)
        check_param("source", source, source in SOURCES, f"one of {', '.join(SOURCES)}")
        status = status or ("accepted" if source == "human" else "pending")
        check_param("status", status, status in STATUSES, f"one of {', '.join(STATUSES)}")
        clusters = {str(k): (None if v is None else int(v)) for k, v in (cluster_ids or {}).items()}
        name = []

        def build(con: sqlite3.Connection) -> list[Target]:
            etype = self._resolve_type(con, error_type)
            name.append(etype["name"])
            now, out = eventlog.now(), []
            keys = [{"run": run, "example_id": ex} for ex in ids]
            for ex, before in zip(ids, rows.fetch(con, "assignments", keys)):
                cluster = clusters.get(ex, before["cluster_id"] if before else None)
                out.append(("assignments", before, {"run": run, "example_id": ex, "error_type_id": etype["id"],
                                                    "source": source, "status": status, "cluster_id": cluster,
                                                    "updated": now, "updated_by": self.user}))
            return out

        return self._write(build, action="assign", run=run, describe=lambda ch: summary or
                           f"assigned {rows.plural(len(ch), 'example')} to {name[0]!r}")

    def unassign(self, run: str, example_ids: Iterable[Any], *, summary: str | None = None) -> Change:
        """Remove examples from whatever error type they are in (split them out)."""
        run = clean_run(run)
        ids = clean_ids(example_ids)

        def build(con: sqlite3.Connection) -> list[Target]:
            keys = [{"run": run, "example_id": ex} for ex in ids]
            return [("assignments", before, None) for before in rows.fetch(con, "assignments", keys)]

        return self._write(build, action="unassign", run=run,
                           describe=lambda ch: summary or f"unassigned {rows.plural(len(ch), 'example')}")

    def set_status(self, run: str, example_ids: Iterable[Any], status: str) -> Change:
        """Accept or reject suggested assignments (a human decision: source becomes 'human' when accepted)."""
        run = clean_run(run)
        ids = clean_ids(example_ids)
        check_param("status", status, status in STATUSES, f"one of {', '.join(STATUSES)}")

        def build(con: sqlite3.Connection) -> list[Target]:
            now, out = eventlog.now(), []
            for before in rows.fetch(con, "assignments", [{"run": run, "example_id": ex} for ex in ids]):
                if before is None or before["status"] == status:
                    continue
                after = {**before, "status": status, "updated": now, "updated_by": self.user}
                if status == "accepted":
                    after["source"] = "human"  # accepted by a person: from now on it is a human label
                out.append(("assignments", before, after))
            return out

        verb = {"accepted": "accepted", "rejected": "rejected", "pending": "reopened"}[status]
        return self._write(build, action="set_status", run=run,
                           describe=lambda ch: f"{verb} {rows.plural(len(ch), 'suggestion')}")

    # -- flags and notes --------------------------------------------------------------------------------------------

    def set_flag(self, run: str, example_ids: Iterable[Any], flag: str, value: bool = True) -> Change:
        """Mark examples 'label_wrong' (the gold label is wrong) or 'not_error' (the prediction is acceptable),
        or clear the mark with value=False."""
        run = clean_run(run)
        ids = clean_ids(example_ids)
        check_param("flag", flag, flag in FLAGS, f"one of {', '.join(FLAGS)}")

        def build(con: sqlite3.Connection) -> list[Target]:
            now = eventlog.now()
            keys = [{"run": run, "example_id": ex, "flag": flag} for ex in ids]
            return [("flags", before, {**key, "created": now, "created_by": self.user} if value else None)
                    for key, before in zip(keys, rows.fetch(con, "flags", keys))]

        def describe(ch: list[dict]) -> str:
            return f"flagged {rows.plural(len(ch), 'example')} as {FLAG_TITLES[flag]!r}" if value else \
                f"cleared {FLAG_TITLES[flag]!r} on {rows.plural(len(ch), 'example')}"

        return self._write(build, action="flag" if value else "unflag", run=run, describe=describe)

    def set_note(self, run: str, example_id: Any, text: str) -> Change:
        """Write the note on one example (an empty text removes it)."""
        run = clean_run(run)
        (ex,) = clean_ids([example_id])
        text = clean_text("note", text)

        def build(con: sqlite3.Connection) -> list[Target]:
            key = {"run": run, "example_id": ex}
            after = {**key, "text": text, "updated": eventlog.now(), "updated_by": self.user} if text else None
            return [("notes", rows.fetch(con, "notes", [key])[0], after)]

        return self._write(build, action="note", run=run, describe=lambda ch: (
            f"{'noted' if ch[0]['after'] else 'removed the note on'} example {ex!r}"))

    # -- reading ----------------------------------------------------------------------------------------------------

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
            params.append(clean_run(run))
        if not include_rejected:
            where.append("a.status != 'rejected'")
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = self._db.read(sql + " ORDER BY a.run, a.example_id", params, tuples=True)
        columns = ["run", "example_id", "error_type_id", "error_type", "severity", "source", "status", "cluster_id",
                   "updated", "updated_by"]
        df = pd.DataFrame(rows, columns=columns)
        df["cluster_id"] = df["cluster_id"].astype("Int64")
        df["error_type_id"] = df["error_type_id"].astype("int64")
        return df

    def counts(self, run: str | None = None) -> dict[str, int]:
        """Accepted examples per error type name (every type listed, zero when unused)."""
        sql = ("SELECT t.name, COUNT(a.example_id) FROM error_types t LEFT JOIN assignments a ON a.error_type_id = t.id"
               " AND a.status = 'accepted'" + (" AND a.run = ?" if run is not None else "") +
               " GROUP BY t.id ORDER BY COUNT(a.example_id) DESC, t.name_key")
        rows = self._db.read(sql, [clean_run(run)] if run is not None else [])
        return {r[0]: int(r[1]) for r in rows}

    def flags(self, run: str | None = None):
        """A DataFrame: run, example_id, flag, created, created_by."""
        return self._frame("flags", ["run", "example_id", "flag", "created", "created_by"], run)

    def notes(self, run: str | None = None):
        """A DataFrame: run, example_id, text, updated, updated_by."""
        return self._frame("notes", ["run", "example_id", "text", "updated", "updated_by"], run)

    def _frame(self, table: str, columns: list[str], run: str | None):
        import pandas as pd

        keys = ", ".join(TABLES[table][0])
        sql = f"SELECT {', '.join(columns)} FROM {table}" + (" WHERE run = ?" if run is not None else "")
        rows = self._db.read(sql + f" ORDER BY {keys}", [clean_run(run)] if run is not None else [], tuples=True)
        return pd.DataFrame(rows, columns=columns)

    # -- workspace facts --------------------------------------------------------------------------------------------

    def version(self) -> int:
        """A number that grows whenever anything in the store changes (a cheap cache key): the newest event id
        ever given, which archiving does not lower."""
        rows = self._db.read("SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)")
        return int(rows[0][0])

    def runs(self) -> list[str]:
        rows = self._db.read("SELECT DISTINCT run FROM assignments UNION SELECT DISTINCT run FROM flags "
                             "UNION SELECT DISTINCT run FROM notes ORDER BY 1")
        return [r[0] for r in rows]

    def integrity_check(self) -> str:
        return str(self._db.read("PRAGMA integrity_check")[0][0])


"""Moving old events out of the labels database into an archive file, without losing any.

The log stays append-only: an archive copies events (same ids, same payloads) into another SQLite file, checks every
one arrived, and only then removes them from the database, in one transaction that also logs an `archive` event
naming the file and the ids moved. A crash between the two steps leaves the events in both files, never in
neither; archiving again finishes the job. Archived events are read back with `read_archive`; they can no longer be
undone, so an event that a kept event undid stays in the database with it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from erroranalysis.core.errors import UserError
from erroranalysis.labels.eventlog import Event, query
from erroranalysis.labels.schema import NO_DELETE, NO_UPDATE

ARCHIVE_FORMAT = "erroranalysis.labels.archive"
_COLUMNS = "id, ts, user, writer, run, action, summary, undoes, payload"
_ARCHIVE_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY, ts TEXT NOT NULL, user TEXT NOT NULL, writer TEXT, run TEXT, action TEXT NOT NULL,
    summary TEXT NOT NULL, undoes INTEGER, payload NOT NULL
);
"""


@dataclass(frozen=True)
class ArchiveResult:
    archive: Path
    moved: int
    first_id: int | None
    last_id: int | None
    event_id: int | None  # the `archive` event logged in the database


def default_archive_path(db: Path) -> Path:
    return db.with_name(f"{db.stem}-archive.sqlite")


def candidates(con: sqlite3.Connection, *, before: str | None, keep: int | None) -> list[int]:
    """Ids of the events to move: older than `before` (an ISO date or time, UTC) or all but the newest `keep`;
    never one that a kept event undid, and never the newest event."""
    newest = con.execute("SELECT MAX(id) FROM events").fetchone()[0]
    if newest is None:
        return []
    if keep is not None:
        row = con.execute("SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET ?", (max(keep, 1) - 1,)).fetchone()
        limit_id = row[0] - 1 if row else 0
        ids = [r[0] for r in con.execute("SELECT id FROM events WHERE id <= ? ORDER BY id", (limit_id,))]
    else:
        ids = [r[0] for r in con.execute("SELECT id FROM events WHERE ts < ? AND id < ? ORDER BY id",
                                         (before, newest))]
    if not ids:
        return []
    last = ids[-1]
    linked = {r[0] for r in con.execute("SELECT undoes FROM events WHERE id > ? AND undoes IS NOT NULL", (last,))}
    return [i for i in ids if i not in linked]


def check_target(path: Path, db: Path) -> None:
    """Refuse, before anything is written, an archive target that is another workspace's labels database (its
    events would land in that workspace's log, whose undo then fails) or an archive of another database (event ids
    are per database); a new file, or this database's own archive, is fine."""
    if not path.exists():
        return
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall()) if "meta" in tables else {}
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        raise UserError(f"{path}: not a labels archive ({exc}); pass a new file with --to.") from None
    if "schema_version" in meta or "error_types" in tables:
        raise UserError(f"{path}: is a labels database (another workspace's store), not an archive; its log is not "
                        "this one's: pass a new file with --to (nothing was moved).")
    if not tables:
        return  # an empty SQLite file: made into an archive
    if meta.get("format") != ARCHIVE_FORMAT:
        raise UserError(f"{path}: not a labels archive; pass a new file with --to (nothing was moved).")
    made_for = meta.get("database")
    if made_for and Path(made_for).resolve() != Path(db).resolve():
        raise UserError(f"{path}: is the archive of {made_for}, not of {db}; pass a new file with --to (nothing was "
                        "moved).")


def _open_archive(path: Path, db: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path, timeout=30, isolation_level=None)
    con.row_factory = sqlite3.Row
    con.execute("PRAGMA synchronous = FULL")
    con.executescript(_ARCHIVE_SCHEMA + NO_UPDATE + "\n" + NO_DELETE)
    fmt = con.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
    if fmt is None:
        con.execute("INSERT INTO meta (key, value) VALUES ('format', ?), ('database', ?)",
                    (ARCHIVE_FORMAT, str(Path(db).resolve())))
    elif fmt[0] != ARCHIVE_FORMAT:
        con.close()
        raise UserError(f"{path}: not a labels archive; pass another --to.")
    return con


def copy_events(con: sqlite3.Connection, ids: list[int], path: Path, db: Path) -> None:
    """Copy the events `ids` into the archive at `path` and check that each is there, unchanged."""
    if not ids:
        return
    target = _open_archive(path, db)
    try:
        target.execute("BEGIN IMMEDIATE")
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks = ", ".join("?" * len(chunk))
            rows = con.execute(f"SELECT {_COLUMNS} FROM events WHERE id IN ({marks})", chunk).fetchall()
            target.executemany(f"INSERT OR IGNORE INTO events ({_COLUMNS}) VALUES ({', '.join('?' * 9)})",
                               [tuple(r) for r in rows])
            stored = {r["id"]: tuple(r) for r in target.execute(
                f"SELECT {_COLUMNS} FROM events WHERE id IN ({marks})", chunk)}
            for r in rows:
                if stored.get(r["id"]) != tuple(r):
                    raise UserError(f"{path}: holds another event {r['id']} than {db}; archive into a new file "
                                    "with --to.")
        target.execute("COMMIT")
    except BaseException:
        if target.in_transaction:
            target.execute("ROLLBACK")
        raise
    finally:
        target.close()


def remove_events(con: sqlite3.Connection, ids: list[int]) -> None:
    """Delete archived events from the log, inside the caller's transaction (the trigger is dropped and made again
    in it, so it is never missing for anyone else)."""
    con.execute("DROP TRIGGER IF EXISTS events_no_delete")
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        con.execute(f"DELETE FROM events WHERE id IN ({', '.join('?' * len(chunk))})", chunk)
    con.execute(NO_DELETE)


def read_archive(path: str | Path, *, run: str | None = None, user: str | None = None, limit: int | None = None,
                 with_payload: bool = False) -> list[Event]:
    """The events of an archive file, newest first."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such archive; 'erroranalysis labels archive' writes one.")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    try:
        fmt = con.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        if fmt is None or fmt[0] != ARCHIVE_FORMAT:
            raise UserError(f"{path}: not a labels archive.")
        return query(con, run=run, user=user, limit=limit, with_payload=with_payload)
    except sqlite3.DatabaseError as exc:
        raise UserError(f"{path}: not a readable labels archive ({exc}).") from None
    finally:
        con.close()

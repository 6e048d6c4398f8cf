"""The labels database's schema: how a new file is made, how an existing one is checked when it is opened, and the
migrations that bring an older file up to SCHEMA_VERSION (after a backup copy).

Versions:
1. error types, assignments, flags, notes, the append-only event log (0.1).
2. `error_types.name_key` (the Unicode-folded name, unique: "Zoë" and "ZOË" are one name), `error_types.parent_id`
   (an optional parent type), `events.writer` (app, cli, suggestion, callback), compact event payloads.
3. `name_key` folds by NFKC with format characters removed ("Zoe" and "Zoe" + a zero-width space are one name).

A new database is made as version 1 and migrated like any other, so there is one definition of each version. It is
built in a temporary file beside its final name and linked into place when complete: a `labels.sqlite` that exists
is never half-made, and one that exists is never re-created (a 0-byte or foreign file is refused, not overwritten).
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path

from erroranalysis.core.errors import UserError
from erroranalysis.labels.connection import Database, damaged, in_transaction
from erroranalysis.labels.eventlog import now
from erroranalysis.labels.fields import fold_name

SCHEMA_VERSION = 3
SQLITE_HEADER = b"SQLite format 3\x00"

_V1 = """
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
"""
# The log is append-only: triggers abort UPDATE and DELETE (archiving drops and re-creates the DELETE one inside
# its own transaction, so no other connection ever sees the log without it).
NO_UPDATE = """CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'the events log is append-only'); END;"""
NO_DELETE = """CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'the events log is append-only'); END;"""

# Called with the migration's connection and the clashing groups of error types (each a list of {id, name}); it
# merges or renames them, or raises. None: clashes are refused with the command that resolves them.
Resolver = Callable[[sqlite3.Connection, list[list[dict]]], None]


class NameClashError(UserError):
    """Error types that are one name under Unicode case folding: the migration waits for the user's choice."""


def _to_v2(con: sqlite3.Connection, path: Path, resolve: Resolver | None) -> None:
    _add_column(con, "error_types", "name_key", "TEXT")
    _add_column(con, "error_types", "parent_id", "INTEGER REFERENCES error_types(id)")
    _add_column(con, "events", "writer", "TEXT")
    _refold(con, path, resolve)
    con.execute("CREATE INDEX IF NOT EXISTS error_types_parent ON error_types (parent_id)")


def _to_v3(con: sqlite3.Connection, path: Path, resolve: Resolver | None) -> None:
    """Names are compared by NFKC with format characters (zero-width, bidi) removed: keys made again."""
    con.execute("DROP INDEX IF EXISTS error_types_name_key")
    _refold(con, path, resolve)


def _refold(con: sqlite3.Connection, path: Path, resolve: Resolver | None) -> None:
    """Every error type's name_key made by this version's fold_name; names that become one are refused with the
    command that resolves them, or resolved by `resolve`."""
    for row in con.execute("SELECT id, name FROM error_types").fetchall():
        con.execute("UPDATE error_types SET name_key = ? WHERE id = ?", (fold_name(row["name"]), row["id"]))
    groups = name_clashes(con)
    if groups:
        if resolve is None:
            first = groups[0]
            shown = " and ".join(repr(t["name"]) for t in first)
            more = f" (and {len(groups) - 1} more groups)" if len(groups) > 1 else ""
            raise NameClashError(
                f"{path}: error types {shown}{more} are one name under this version's rule (names are compared "
                "with Unicode compatibility and case folding, format characters removed); the database is left as "
                "it was: see the plan with "
                f"'erroranalysis labels migrate --labels-db {path} --dry-run', then choose --merge-clashes or "
                "--rename-clashes.")
        resolve(con, groups)
    con.execute("CREATE UNIQUE INDEX IF NOT EXISTS error_types_name_key ON error_types (name_key)")


MIGRATIONS: dict[int, Callable[[sqlite3.Connection, Path, Resolver | None], None]] = {1: _to_v2, 2: _to_v3}


def _add_column(con: sqlite3.Connection, table: str, column: str, decl: str) -> None:
    if column not in {r[1] for r in con.execute(f"PRAGMA table_info({table})")}:
        con.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")


def name_clashes(con: sqlite3.Connection) -> list[list[dict]]:
    """Groups of error types whose names fold to one key, each ordered by id (the oldest first)."""
    by_key: dict[str, list[dict]] = {}
    for row in con.execute("SELECT id, name FROM error_types ORDER BY id").fetchall():
        by_key.setdefault(fold_name(row["name"]), []).append({"id": row["id"], "name": row["name"]})
    return [group for group in by_key.values() if len(group) > 1]


# -- making and opening a database ----------------------------------------------------------------------------------


def create(path: Path) -> None:
    """Make a new labels database at `path`, built aside and linked into place whole. Another process that made
    it first wins; its file is kept."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.creating-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        db = Database(tmp)
        mode = db.read("PRAGMA journal_mode = WAL")[0][0]
        if str(mode).lower() != "wal":  # pragma: no cover - filesystems without shared memory
            raise UserError(f"{path}: the labels database needs WAL mode, which this filesystem does not "
                            "support; put it on a local disk with --labels-db.")

        def build(con: sqlite3.Connection) -> None:
            con.executescript(_V1 + NO_UPDATE + "\n" + NO_DELETE)
            con.execute("BEGIN IMMEDIATE")
            try:
                con.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '1')")
                con.execute("INSERT INTO meta (key, value) VALUES ('created', ?)", (now(),))
                migrate(con, tmp, None)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise

        db.run(build)
        try:
            os.link(tmp, path)  # fails when the name exists: never replace a database someone else made
        except FileExistsError:
            pass
        except OSError:  # pragma: no cover - filesystems without hard links
            if not path.exists():
                os.replace(tmp, path)
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            leftover.unlink(missing_ok=True)


def check_file(path: Path) -> None:
    """Refuse, before SQLite sees it, a path that cannot be a labels database (SQLite would take a 0-byte file for
    an empty database and start a new one in it)."""
    if path.is_dir():
        raise UserError(f"{path}: is a directory; pass the labels database file, e.g. {path / 'labels.sqlite'}.")
    with open(path, "rb") as f:
        head = f.read(len(SQLITE_HEADER))
    if not head:
        raise damaged(path, "the file is empty (0 bytes), so it is not re-created")
    if head != SQLITE_HEADER:
        raise damaged(path, "no SQLite header")


def quick_check(db: Database) -> None:
    result = [str(r[0]) for r in db.read("PRAGMA quick_check")]
    if result != ["ok"]:
        raise damaged(db.path, f"quick_check: {result[0]}")


def version(db: Database) -> int:
    try:
        rows = db.read("SELECT value FROM meta WHERE key = 'schema_version'")
    except sqlite3.OperationalError as exc:
        raise UserError(f"{db.path}: not a labels database ({exc}); pass another --labels-db.") from None
    if not rows or not str(rows[0][0]).isdigit():
        raise UserError(f"{db.path}: not a labels database (no schema_version); pass another --labels-db.")
    found = int(rows[0][0])
    if found > SCHEMA_VERSION or found not in MIGRATIONS and found != SCHEMA_VERSION:
        raise UserError(f"{db.path}: labels database schema_version {found} is not supported (this version "
                        f"reads {min(MIGRATIONS)} to {SCHEMA_VERSION}); upgrade erroranalysis.")
    return found


def migrate(con: sqlite3.Connection, path: Path, resolve: Resolver | None) -> int:
    """Bring the database on `con` (inside a write transaction) to SCHEMA_VERSION; the version it had."""
    found = int(con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])
    for v in range(found, SCHEMA_VERSION):
        MIGRATIONS[v](con, path, resolve)
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(v + 1),))
        con.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (f"migrated_to_{v + 1}", now()))
    return found


def upgrade(db: Database, resolve: Resolver | None = None) -> tuple[int, Path] | None:
    """Migrate an existing database to SCHEMA_VERSION after a backup copy: (the version it had, the backup's
    path), or None when it was current. Two processes opening an old file at once: the second finds it migrated
    inside its transaction and changes nothing."""
    from erroranalysis.labels import backup

    found = version(db)
    if found == SCHEMA_VERSION:
        return None
    copy = backup.backup(db.path, backup.migration_backup_path(db.path, found, SCHEMA_VERSION))
    try:
        db.run(lambda con: in_transaction(con, lambda c: migrate(c, db.path, resolve)))
    except NameClashError:
        copy.unlink(missing_ok=True)  # nothing was changed: the copy is the file itself
        raise
    return found, copy


def plan(db: Database) -> dict:
    """What opening the database for writing would migrate, read without writing: {version, target, clashes}
    (clashes: groups of {id, name, examples} whose names fold to one, oldest first)."""
    found = version(db)
    groups: list[list[dict]] = []

    def read(con: sqlite3.Connection) -> None:
        for group in name_clashes(con):
            for t in group:
                t["examples"] = con.execute("SELECT COUNT(*) FROM assignments WHERE error_type_id = ?",
                                            (t["id"],)).fetchone()[0]
            groups.append(group)

    db.run(read)
    return {"version": found, "target": SCHEMA_VERSION, "clashes": groups}

"""Backups of the labels database, and restoring one.

A backup is made with SQLite's online backup API: a consistent copy of the committed state, safe while the app
writes (WAL readers never block the writer). It is written aside and moved into place, then checked. Copies sit
beside the database as `<name>-backup-<UTC time>.sqlite` (`erroranalysis labels backup`) and
`<name>-before-schema-<N>-<UTC time>.sqlite` (made before every schema migration).

Restoring keeps the database it replaces (`<name>-replaced-<UTC time>.sqlite`), migrates a copy of the backup to this
version's schema beside it (the backup itself is left as it is), and writes that into the live file through the same
API, so connections the app has open see the restored labels at the schema they read; a file too damaged for SQLite
to open is moved aside with its -wal and -shm files instead.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import sqlite3
from pathlib import Path

from erroranalysis.core.errors import UserError


def _stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _free_name(folder: Path, stem: str) -> Path:
    path, n = folder / f"{stem}.sqlite", 2
    while path.exists():
        path, n = folder / f"{stem}-{n}.sqlite", n + 1
    return path


def default_backup_path(db: Path) -> Path:
    return _free_name(db.parent, f"{db.stem}-backup-{_stamp()}")


def migration_backup_path(db: Path, old: int, new: int) -> Path:
    return _free_name(db.parent, f"{db.stem}-before-schema-{new}-{_stamp()}")


def find_backups(db: str | Path) -> list[Path]:
    """Backups of `db` beside it, newest first (by modification time)."""
    db = Path(db)
    found = [p for pattern in (f"{db.stem}-backup-*.sqlite", f"{db.stem}-before-schema-*.sqlite")
             for p in db.parent.glob(pattern)]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def restore_hint(db: Path) -> str:
    """How to get the labels back, for error messages (one clause)."""
    backups = find_backups(db) if db.parent.is_dir() else []
    if backups:
        return f"restore the newest backup: erroranalysis labels restore {backups[0]} --labels-db {db}"
    return (f"no backup was found beside it: restore a copy with 'erroranalysis labels restore COPY --labels-db "
            f"{db}', or move it away to start an empty one")


def _copy(source: sqlite3.Connection, dest: Path) -> None:
    """The committed content of `source` into a new file at dest, written aside and moved into place."""
    tmp = dest.with_name(f".{dest.name}.partial")
    tmp.unlink(missing_ok=True)
    target = sqlite3.connect(tmp)
    try:
        source.backup(target)
    finally:
        target.close()
    os.replace(tmp, dest)


def _check_copy(path: Path) -> None:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        result = con.execute("PRAGMA quick_check").fetchone()[0]
        con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.DatabaseError as exc:
        raise UserError(f"{path}: not a usable labels database ({exc}); pick another copy.") from None
    finally:
        con.close()
    if result != "ok":
        raise UserError(f"{path}: the copy is damaged (quick_check: {result}); pick another copy.")


def backup(db: str | Path, dest: str | Path | None = None) -> Path:
    """Copy the labels database at `db` to `dest` (default: a timestamped file beside it); the copy's path.
    Refuses a damaged database (its copy would be damaged too)."""
    from erroranalysis.labels.schema import check_file

    db = Path(db)
    if not db.is_file():
        raise UserError(f"{db}: no labels database here; check --labels-db.")
    check_file(db)
    dest = Path(dest) if dest is not None else default_backup_path(db)
    if dest.is_dir():
        dest = default_backup_path(dest / db.name)
    if dest.exists():
        raise UserError(f"{dest}: exists already; pick a new file name for the backup.")
    if dest.resolve() == db.resolve():
        raise UserError(f"{dest}: is the database itself; pick another file for the backup.")
    dest.parent.mkdir(parents=True, exist_ok=True)
    source = sqlite3.connect(db, timeout=30)
    try:
        result = source.execute("PRAGMA quick_check").fetchone()[0]
        if result != "ok":
            raise UserError(f"{db}: the labels database is damaged (quick_check: {result}); its copy would be "
                            f"too: {restore_hint(db)}")
        _copy(source, dest)
    except sqlite3.DatabaseError as exc:
        raise UserError(f"{db}: cannot be read for a backup ({exc}); {restore_hint(db)}") from None
    finally:
        source.close()
    _check_copy(dest)
    return dest


def restore(copy: str | Path, db: str | Path) -> Path | None:
    """Make the database at `db` hold what the backup `copy` holds; the path the replaced database was kept at
    (None when there was none). The copy is checked first; an older schema is migrated before it replaces a live
    database (refused, changing nothing, when its names clash under this version's rule)."""
    from erroranalysis.labels.schema import SCHEMA_VERSION

    copy, db = Path(copy), Path(db)
    if not copy.is_file():
        raise UserError(f"{copy}: no such backup file; 'erroranalysis labels backup' makes one.")
    _check_copy(copy)
    found = _schema_version(copy)
    if found > SCHEMA_VERSION:
        raise UserError(f"{copy}: made by a newer erroranalysis (labels schema {found}); upgrade to restore it.")
    if copy.resolve() == db.resolve():
        raise UserError(f"{copy}: is the database itself; pass a backup copy.")
    if not db.exists():  # nobody has it open: the copy goes in as it is, migrated when first opened
        db.parent.mkdir(parents=True, exist_ok=True)
        source = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
        try:
            _copy(source, db)
        finally:
            source.close()
        _log_restore(db, copy, 0)
        return None
    staged = _migrated(copy, db)  # the app may hold the live file open: it never sees an older schema in it
    try:
        last_event = _last_event_id(db)
        kept = _keep_current(db)
        source = sqlite3.connect(f"file:{staged}?mode=ro", uri=True)
        target = sqlite3.connect(db, timeout=30)
        try:
            source.backup(target)
        finally:
            target.close()
            source.close()
    finally:
        for leftover in (staged, Path(f"{staged}-wal"), Path(f"{staged}-shm")):
            leftover.unlink(missing_ok=True)
    _log_restore(db, copy, last_event)
    return kept


def _migrated(copy: Path, db: Path) -> Path:
    """The backup's content at this version's schema, in a temporary file beside `db`: a schema-1 backup written
    into a database the app has open would leave every open store reading columns that are not there. A backup
    whose names clash under this version's rule is refused (nothing changed) with the command that resolves it."""
    from erroranalysis.labels.schema import NameClashError, migrate

    staged = db.with_name(f".{db.name}.restoring-{os.getpid()}")
    staged.unlink(missing_ok=True)
    source = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    try:
        _copy(source, staged)
    finally:
        source.close()
    con = sqlite3.connect(staged, isolation_level=None)
    con.row_factory = sqlite3.Row
    try:
        con.execute("BEGIN IMMEDIATE")
        migrate(con, copy, None)
        con.execute("COMMIT")
    except NameClashError as exc:
        con.close()
        staged.unlink(missing_ok=True)
        reason = str(exc)[len(str(copy)) + 2:]  # the message names the copy first
        raise UserError(f"{copy}: not restored, the live database is as it was: {reason}") from None
    finally:
        con.close()
    return staged


def _last_event_id(db: Path) -> int:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
        finally:
            con.close()
    except sqlite3.DatabaseError:
        return 0
    return int(row[0]) if row else 0


def _log_restore(db: Path, copy: Path, last_event: int) -> None:
    """Log the restore as an event whose id is above every id the replaced database gave: readers that cache on
    the newest event id (the app) never mistake the restored labels for a state they saw before."""
    from erroranalysis.labels import eventlog
    from erroranalysis.labels.roles import default_user

    con = sqlite3.connect(db, timeout=30, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        row = con.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
        seq = max(last_event, int(row[0]) if row else 0)
        con.execute("DELETE FROM sqlite_sequence WHERE name = 'events'")
        con.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('events', ?)", (seq,))
        summary = f"restored the labels of {copy.name}"
        if "writer" in {r[1] for r in con.execute("PRAGMA table_info(events)")}:
            eventlog.append(con, user=default_user(), writer="cli", run=None, action="restore", summary=summary,
                            changes=[])
        else:  # a schema-1 backup: its events are migrated when the database is next opened
            con.execute("INSERT INTO events (ts, user, run, action, summary, payload) VALUES (?, ?, NULL, "
                        "'restore', ?, '{\"changes\": []}')", (eventlog.now(), default_user(), summary))
        con.execute("COMMIT")
    finally:
        con.close()


def _schema_version(path: Path) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    finally:
        con.close()
    return int(row[0]) if row and str(row[0]).isdigit() else 0


def _keep_current(db: Path) -> Path:
    """Keep the database about to be replaced: a consistent copy when SQLite can read it, else the files as they
    are, moved aside so the restore starts from a clean name."""
    kept = _free_name(db.parent, f"{db.stem}-replaced-{_stamp()}")
    try:
        con = sqlite3.connect(db, timeout=30)
        try:
            if con.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise sqlite3.DatabaseError("damaged")
            _copy(con, kept)
            return kept
        finally:
            con.close()
    except sqlite3.DatabaseError:
        pass
    os.replace(db, kept)
    for suffix in ("-wal", "-shm"):
        side = Path(f"{db}{suffix}")
        if side.exists():
            shutil.move(side, Path(f"{kept}{suffix}"))
    return kept

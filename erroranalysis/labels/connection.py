"""Connections to the labels database: pragmas, transactions, retries while another writer holds the lock, and
SQLite's failures turned into one-line messages that say what happened and what to do.

Every call opens its own short connection, so one store can be shared by threads (Streamlit sessions) and several
processes can write one file at once: WAL mode lets readers run beside the writer, `BEGIN IMMEDIATE` takes the
write lock up front (so a transaction never fails half-way on a lock), and a writer that finds the lock taken waits
(`busy_timeout`), then retries the whole transaction with jittered backoff.
"""

from __future__ import annotations

import random
import resource
import shutil
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from erroranalysis.core.errors import UserError

Body = Callable[[sqlite3.Connection], Any]
# SQLite's names for a write the disk refused (a full disk, a file-size limit, a failing device).
_WRITE_FAILURES = ("SQLITE_FULL", "SQLITE_IOERR_WRITE", "SQLITE_IOERR_FSYNC", "SQLITE_IOERR_TRUNCATE",
                   "SQLITE_IOERR_SHMSIZE")


class DamagedError(UserError):
    """The file is not a labels database, or its pages are damaged."""


class WriteFailedError(UserError):
    """The disk refused a write (full, over a size limit, failing); the transaction was rolled back."""


class Database:
    """One SQLite file: how to connect to it and run work on it."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 30.0, retries: int = 8, query_only: bool = False):
        self.path = Path(path)
        self.busy_timeout = float(busy_timeout)
        self.retries = retries
        self.query_only = query_only

    def connect(self) -> sqlite3.Connection:
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
            if self.query_only:  # SQLite itself refuses writes on this connection, below the store's own check
                con.execute("PRAGMA query_only = ON")
        except BaseException:
            con.close()
            raise
        return con

    def run(self, body: Body) -> Any:
        """Open a connection, run body, close it; a database busy for longer than busy_timeout is retried."""
        attempt = 0
        while True:
            con = None
            try:
                con = self.connect()
                return body(con)
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise translate(exc, self.path) from None
                if attempt >= self.retries:
                    raise UserError(f"{self.path}: the labels database stayed locked by another writer for "
                                    f"over {self.busy_timeout:g} s; try again.") from None
                attempt += 1
                time.sleep(min(2.0, 0.05 * 2 ** attempt) * (0.5 + random.random()))
            except sqlite3.DatabaseError as exc:
                raise translate(exc, self.path) from None
            finally:
                if con is not None:
                    con.close()

    def read(self, sql: str, params: Sequence[Any] = (), *, tuples: bool = False) -> list:
        return self.run(lambda con: fetch_all(con, sql, params, tuples))

    def transaction(self, fn: Body) -> Any:
        """Run fn in one BEGIN IMMEDIATE transaction (retried whole when the database is busy)."""
        return self.run(lambda con: in_transaction(con, fn))

    def begin(self) -> sqlite3.Connection:
        """A connection holding the write lock (BEGIN IMMEDIATE), for a batch the caller commits or rolls back."""
        holder: list[sqlite3.Connection] = []

        def take(con: sqlite3.Connection) -> None:
            con.execute("BEGIN IMMEDIATE")
            holder.append(con)

        attempt = 0
        while True:
            con = self.connect()
            try:
                take(con)
                return holder[0]
            except sqlite3.OperationalError as exc:
                con.close()
                if not is_busy(exc):
                    raise translate(exc, self.path) from None
                if attempt >= self.retries:
                    raise UserError(f"{self.path}: the labels database stayed locked by another writer for "
                                    f"over {self.busy_timeout:g} s; try again.") from None
                attempt += 1
                time.sleep(min(2.0, 0.05 * 2 ** attempt) * (0.5 + random.random()))


class Bound:
    """A Database view over one connection already inside a transaction (a batch): work runs on it directly."""

    def __init__(self, db: Database, con: sqlite3.Connection):
        self.path, self.con, self._db = db.path, con, db

    def run(self, body: Body) -> Any:
        try:
            return body(self.con)
        except sqlite3.IntegrityError:
            raise
        except sqlite3.DatabaseError as exc:
            raise translate(exc, self.path) from None

    def read(self, sql: str, params: Sequence[Any] = (), *, tuples: bool = False) -> list:
        return self.run(lambda con: fetch_all(con, sql, params, tuples))

    def transaction(self, fn: Body) -> Any:
        return self.run(fn)


def fetch_all(con: sqlite3.Connection, sql: str, params: Sequence[Any], tuples: bool) -> list:
    """Every row of a query: sqlite3.Row objects, or plain tuples (a third faster for a large table read whole)."""
    cursor = con.cursor()
    if tuples:
        cursor.row_factory = None
    return cursor.execute(sql, params).fetchall()


def in_transaction(con: sqlite3.Connection, fn: Body) -> Any:
    con.execute("BEGIN IMMEDIATE")
    try:
        result = fn(con)
        con.execute("COMMIT")
        return result
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise


def is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def translate(exc: sqlite3.DatabaseError, path: Path) -> BaseException:
    """The exception to raise for a SQLite error: a one-line UserError when it is the disk's or the file's fault,
    else the original (IntegrityError and programming errors are the caller's)."""
    if isinstance(exc, sqlite3.IntegrityError):
        return exc
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc).lower()
    if name in _WRITE_FAILURES or "disk is full" in text:
        return WriteFailedError(f"{path}: could not write labels: {_what_filled(path, name)}; nothing was "
                                "changed (the transaction was rolled back); make room and do it again.")
    if type(exc) is sqlite3.DatabaseError or "malformed" in text or "not a database" in text or \
            name in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
        return damaged(path, str(exc))
    return exc


def damaged(path: Path, detail: str) -> DamagedError:
    from erroranalysis.labels.backup import restore_hint

    detail = " ".join(str(detail).split())[:120]
    return DamagedError(f"{path}: the labels database is damaged or not a database ({detail}); "
                        f"{restore_hint(path)}")


def _what_filled(path: Path, name: str) -> str:
    """Which limit the write ran into: the process's file-size limit, the disk, or neither (a failing device)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY:
        return f"the file-size limit of this process was reached (ulimit -f: {soft:,} bytes)"
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        free = None
    if name == "SQLITE_FULL" or (free is not None and free < 16 * 1024 * 1024):
        shown = f", {free / 1e6:.1f} MB free" if free is not None else ""
        return f"the disk holding {path.parent} is full{shown}"
    return f"the disk refused the write ({name or 'I/O error'})"

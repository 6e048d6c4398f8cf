"""Reading and writing the rows the event log records, by key: the primitives of the store's one write path."""

from __future__ import annotations

import functools
import itertools
import operator
import sqlite3
from typing import Any, Callable

from erroranalysis.labels.eventlog import TABLES, key_of
from erroranalysis.labels.fields import fold_name

STAMPS = ("updated", "updated_by", "created", "created_by")  # not what a change is about: ignored when comparing
Target = tuple[str, "dict | None", "dict | None"]  # (table, row there now or None, row wanted or None)


def same(before: dict | None, after: dict | None) -> bool:
    """Whether writing `after` over `before` would change anything but who and when."""
    if before is None or after is None:
        return before is after
    compared = _compared(tuple(after))
    try:
        return compared(before) == compared(after)
    except KeyError:  # `before` lacks a column: compared as None
        return all(before.get(k) == v for k, v in after.items() if k not in STAMPS)


@functools.lru_cache(maxsize=64)
def _compared(columns: tuple[str, ...]) -> Callable[[dict], Any]:
    """The values of `columns` but the stamps, as one comparable value (itemgetter: the loop runs in C)."""
    kept = [c for c in columns if c not in STAMPS]
    return operator.itemgetter(*kept) if kept else (lambda row: ())


KEYS_PER_QUERY = 200  # x (up to 3 key columns + a position): under the 999 bound variables of SQLite < 3.32


def fetch(con: sqlite3.Connection, table: str, keys: list[dict]) -> list[dict | None]:
    """The rows at `keys` as they are now (None where there is none), in the order of `keys`. A few queries for any
    number of keys: each joins a VALUES list of (position, key) to the table's primary key, a CROSS JOIN so that
    SQLite walks the keys and looks each one up rather than scanning the table. Rows come back by position, so a
    key SQLite matched after converting a value (an id given as text) is found as the one-row query found it."""
    key_cols, cols = TABLES[table]
    out: list[dict | None] = [None] * len(keys)
    cursor = con.cursor()
    cursor.row_factory = None  # plain tuples: the dicts are made here
    for start in range(0, len(keys), KEYS_PER_QUERY):
        part = keys[start:start + KEYS_PER_QUERY]
        params = [v for i, key in enumerate(part, start) for v in (i, *(key[k] for k in key_cols))]
        for position, *values in cursor.execute(_select(table, len(part)), params):
            out[position] = dict(zip(cols, values))
    return out


def current(con: sqlite3.Connection, changes: list[dict]) -> list[dict | None]:
    """The rows at the keys of `changes` as they are now, in the order of `changes` (one batched read per table)."""
    now: list[dict | None] = [None] * len(changes)
    for table in {ch["table"] for ch in changes}:
        at = [i for i, ch in enumerate(changes) if ch["table"] == table]
        for i, row in zip(at, fetch(con, table, [key_of(changes[i]) for i in at])):
            now[i] = row
    return now


@functools.lru_cache(maxsize=16)
def _select(table: str, n: int) -> str:
    key_cols, cols = TABLES[table]
    one = "(" + ", ".join("?" * (1 + len(key_cols))) + ")"
    on = " AND ".join(f"t.{k} = k.column{i + 2}" for i, k in enumerate(key_cols))
    return (f"SELECT k.column1, {', '.join('t.' + c for c in cols)} FROM (VALUES {', '.join([one] * n)}) AS k "
            f"CROSS JOIN {table} AS t ON {on}")


def apply(con: sqlite3.Connection, changes: list[dict]) -> None:
    """Make each changed row be its `after` (None deletes it). `before` is the row there now (the callers read it,
    or checked it, in this transaction), so a new row is INSERTed and an existing one UPDATEd: never INSERT OR
    REPLACE, which would silently delete another row that clashes on a unique column (an error type's name); a clash
    raises. An error type's name_key is derived from its name here, so no caller can store one that disagrees.
    Consecutive changes of one kind go to SQLite as one executemany, in order: the same writes, one call."""
    for (table, verb), group in itertools.groupby(changes, key=_kind):
        con.executemany(_sql(table, verb), [_params(ch, verb) for ch in group])


def _kind(ch: dict) -> tuple[str, str]:
    return ch["table"], "delete" if ch["after"] is None else "insert" if ch["before"] is None else "update"


def _params(ch: dict, verb: str) -> tuple:
    row = key_of(ch) if verb == "delete" else ch["after"]
    if ch["table"] == "error_types" and verb != "delete":
        row = {**row, "name_key": fold_name(row["name"])}
    return _getter(ch["table"], verb)(row)


@functools.cache
def _getter(table: str, verb: str):
    """A row's parameters of `_sql(table, verb)` as a tuple (one C call per row: bulk writes pass 100,000s)."""
    columns = _param_columns(table, verb)
    get = operator.itemgetter(*columns)
    return get if len(columns) > 1 else lambda row: (get(row),)


@functools.cache
def _param_columns(table: str, verb: str) -> tuple[str, ...]:
    """The columns of `_sql(table, verb)`'s parameters, in order."""
    key_cols = TABLES[table][0]
    if verb == "delete":
        return key_cols
    cols = _columns(table)
    return cols if verb == "insert" else tuple(c for c in cols if c not in key_cols) + key_cols


def _columns(table: str) -> tuple[str, ...]:
    return TABLES[table][1] + (("name_key",) if table == "error_types" else ())


@functools.cache
def _sql(table: str, verb: str) -> str:
    key_cols = TABLES[table][0]
    cols = _columns(table)
    where = " AND ".join(f"{k} = ?" for k in key_cols)
    if verb == "delete":
        return f"DELETE FROM {table} WHERE {where}"
    if verb == "insert":
        return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    return f"UPDATE {table} SET {', '.join(f'{c} = ?' for c in cols if c not in key_cols)} WHERE {where}"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"

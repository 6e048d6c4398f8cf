"""Reading and writing the rows the event log records, by key: the primitives of the store's one write path."""

from __future__ import annotations

import functools
import sqlite3

from erroranalysis.labels.eventlog import TABLES, key_of
from erroranalysis.labels.fields import fold_name

STAMPS = ("updated", "updated_by", "created", "created_by")  # not what a change is about: ignored when comparing
Target = tuple[str, "dict | None", "dict | None"]  # (table, row there now or None, row wanted or None)


def same(before: dict | None, after: dict | None) -> bool:
    """Whether writing `after` over `before` would change anything but who and when."""
    if before is None or after is None:
        return before is after
    return all(before.get(k) == v for k, v in after.items() if k not in STAMPS)


def fetch(con: sqlite3.Connection, table: str, keys: list[dict]) -> list[dict | None]:
    """The rows at `keys` as they are now (None where there is none)."""
    key_cols, cols = TABLES[table]
    where = " AND ".join(f"{k} = ?" for k in key_cols)
    sql = f"SELECT {', '.join(cols)} FROM {table} WHERE {where}"
    out = []
    for key in keys:
        row = con.execute(sql, [key[k] for k in key_cols]).fetchone()
        out.append(dict(row) if row is not None else None)
    return out


def apply(con: sqlite3.Connection, changes: list[dict]) -> None:
    """Make each changed row be its `after` (None deletes it). `before` is the row there now (the callers read it,
    or checked it, in this transaction), so a new row is INSERTed and an existing one UPDATEd: never INSERT OR
    REPLACE, which would silently delete another row that clashes on a unique column (an error type's name); a clash
    raises. An error type's name_key is derived from its name here, so no caller can store one that disagrees."""
    for ch in changes:
        table, row = ch["table"], ch["after"]
        key_cols, cols = TABLES[table]
        if row is None:
            key = key_of(ch)
            con.execute(_sql(table, "delete"), [key[k] for k in key_cols])
            continue
        values = [row[c] for c in cols]
        if table == "error_types":
            values.append(fold_name(row["name"]))
        if ch["before"] is None:
            con.execute(_sql(table, "insert"), values)
        else:
            named = dict(zip(_columns(table), values))
            con.execute(_sql(table, "update"), [named[c] for c in _columns(table) if c not in key_cols]
                        + [named[k] for k in key_cols])


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

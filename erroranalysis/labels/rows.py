"""Reading and writing the rows the event log records, by key: the primitives of the store's one write path."""

from __future__ import annotations

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
    """Make each changed row be its `after` (None deletes it). UPDATE or INSERT, never INSERT OR REPLACE: REPLACE
    would silently delete another row that clashes on a unique column (an error type's name); a clash raises.
    An error type's name_key is derived from its name here, so no caller can store one that disagrees."""
    for ch in changes:
        table, row = ch["table"], ch["after"]
        key_cols = TABLES[table][0]
        key = key_of(ch)
        where = " AND ".join(f"{k} = ?" for k in key_cols)
        key_values = [key[k] for k in key_cols]
        if row is None:
            con.execute(f"DELETE FROM {table} WHERE {where}", key_values)
            continue
        values = dict(row)
        if table == "error_types":
            values["name_key"] = fold_name(row["name"])
        names = list(values)
        others = [c for c in names if c not in key_cols]
        cur = con.execute(f"UPDATE {table} SET {', '.join(f'{c} = ?' for c in others)} WHERE {where}",
                          [values[c] for c in others] + key_values)
        if cur.rowcount == 0:
            con.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                        [values[c] for c in names])


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"

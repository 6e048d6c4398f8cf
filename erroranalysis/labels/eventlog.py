"""The event log: one append-only row per change, holding every row the change touched before and after, so undo
can restore exactly what was there.

A change is stored compactly: its rows are grouped by table and written column by column, a column whose value is
the same in every row (the run, the error type, the time, the user of a bulk assignment) once, the whole
zlib-compressed. A bulk assignment of 100,000 examples costs a few bytes per example instead of the ~230 bytes of
JSON per row that schema 1 wrote (benchmarks/labels_store.py measures it). Events written by schema 1 (plain JSON
text) are read as they are.
"""

from __future__ import annotations

import datetime as _dt
import json
import sqlite3
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# Each table the log records changes of: its key columns and all its columns, in order. error_types.name_key is
# not among them: it is derived from the name whenever a row is written.
TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "error_types": (("id",), ("id", "name", "definition", "severity", "parent_id", "created", "created_by",
                              "updated", "updated_by")),
    "assignments": (("run", "example_id"), ("run", "example_id", "error_type_id", "source", "status", "cluster_id",
                                            "updated", "updated_by")),
    "flags": (("run", "example_id", "flag"), ("run", "example_id", "flag", "created", "created_by")),
    "notes": (("run", "example_id"), ("run", "example_id", "text", "updated", "updated_by")),
}
# Actions whose events hold no rows to restore: undo skips them.
NOT_UNDOABLE = ("undo", "archive", "restore")
EVENT_COLUMNS = ("id", "ts", "user", "writer", "run", "action", "summary", "undoes")


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
    writer: str | None = None  # app, cli, suggestion or callback; None for events of schema 1

    @property
    def scope(self) -> str:
        """What the event changed, in words: `run <key>`, or the error types every run shares."""
        return scope_of(self.run)

    @property
    def n_changes(self) -> int:
        if "groups" in self.payload:
            return sum(g["n"] for g in self.payload["groups"])
        return len(self.payload.get("changes", []))


@dataclass(frozen=True)
class Change:
    """What one call changed: the event it logged (None when nothing changed, or inside a batch) and how many
    rows."""

    event_id: int | None
    changed: int
    summary: str = ""


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


# -- payloads -------------------------------------------------------------------------------------------------------


def encode(changes: list[dict]) -> bytes:
    """The stored form of a change list [{table, before, after}, ...] (order kept)."""
    doc = {"v": 2, "groups": groups_of(changes)}
    return zlib.compress(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8"), 6)


def groups_of(changes: list[dict]) -> list[dict]:
    """Consecutive changes of one table as one group, column by column: {table, n, before, after}, each side
    {"cols": {column: [values] or {"all": value}}} and, when some rows are absent (None), "present" ("1"/"0" each)."""
    groups: list[dict] = []
    for ch in changes:
        if not groups or groups[-1]["table"] != ch["table"]:
            groups.append({"table": ch["table"], "before": [], "after": []})
        groups[-1]["before"].append(ch["before"])
        groups[-1]["after"].append(ch["after"])
    return [{"table": g["table"], "n": len(g["before"]), "before": _columns(g["before"], TABLES[g["table"]][1]),
             "after": _columns(g["after"], TABLES[g["table"]][1])} for g in groups]


def decode(stored: Any, columns: bool = False) -> dict:
    """{"changes": [{table, before, after}, ...]} from either stored form; with `columns`, {"groups": [...]} as
    `groups_of` makes them, for readers of many rows (no dict per row)."""
    if isinstance(stored, (bytes, memoryview)):
        doc = json.loads(zlib.decompress(bytes(stored)).decode("utf-8"))
        if columns:
            return {"groups": doc["groups"]}
        changes = []
        for g in doc["groups"]:
            cols = TABLES[g["table"]][1]
            before, after = _rows(g["before"], cols, g["n"]), _rows(g["after"], cols, g["n"])
            changes += [{"table": g["table"], "before": b, "after": a} for b, a in zip(before, after)]
        return {"changes": changes}
    doc = json.loads(stored)
    for ch in doc.get("changes", []):  # schema 1 rows of error types had no parent
        if ch["table"] == "error_types":
            for state in (ch["before"], ch["after"]):
                if state is not None:
                    state.setdefault("parent_id", None)
    return {"groups": groups_of(doc.get("changes", []))} if columns else doc


def _columns(rows: list[dict | None], cols: tuple[str, ...]) -> dict:
    """Rows (None for absent) column by column: a value shared by every present row is written once."""
    out: dict[str, Any] = {}
    present = [r is not None for r in rows]
    if not all(present):
        out["present"] = "".join("1" if p else "0" for p in present)
    kept = [r for r in rows if r is not None]
    if not kept:
        return out
    out["cols"] = {}
    for c in cols:
        values = [r[c] for r in kept]
        first = values[0]
        shared = values.count(first) == len(values) and len(set(map(type, values))) == 1  # 1 == True: not shared
        out["cols"][c] = {"all": first} if shared else values
    return out


def _rows(enc: dict, cols: tuple[str, ...], n: int) -> list[dict | None]:
    present = [p == "1" for p in enc["present"]] if "present" in enc else [True] * n
    kept = sum(present)
    columns = {c: (v["all"],) * kept if isinstance(v, dict) else v for c, v in enc.get("cols", {}).items()}
    out: list[dict | None] = []
    i = 0
    for p in present:
        if p:
            out.append({c: columns[c][i] for c in cols})
            i += 1
        else:
            out.append(None)
    return out


# -- writing and reading events ---------------------------------------------------------------------------------------


def append(con: sqlite3.Connection, *, user: str, writer: str, run: str | None, action: str, summary: str,
           changes: list[dict], undoes: int | None = None) -> int:
    cur = con.execute(
        "INSERT INTO events (ts, user, writer, run, action, summary, undoes, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (now(), user, writer, run, action, summary, undoes, encode(changes)))
    return int(cur.lastrowid)


def to_event(row: sqlite3.Row | dict, with_payload: bool, columns: bool = False) -> Event:
    d = dict(row)
    payload = decode(d.pop("payload"), columns) if with_payload and "payload" in d else {}
    d.pop("payload", None)
    return Event(payload=payload, **{k: d.get(k) for k in ("id", "ts", "user", "run", "action", "summary", "undoes",
                                                            "undone_by", "writer")})


def query(con: sqlite3.Connection, *, run: str | None = None, user: str | None = None, limit: int | None = 50,
          with_payload: bool = False, table: str = "events", after: int | None = None,
          columns: bool = False) -> list[Event]:
    """Events of `table` (the log, or an archive's), newest first, each with `undone_by` when a later one undid
    it; with `after`, only those with a larger id; with `columns`, payloads column by column (`decode`)."""
    cols = ", ".join(f"e.{c}" for c in EVENT_COLUMNS) + ", u.id AS undone_by" + (", e.payload" if with_payload
                                                                                 else "")
    sql = f"SELECT {cols} FROM {table} e LEFT JOIN {table} u ON u.undoes = e.id"
    where, params = [], []
    if run is not None:
        where.append("(e.run = ? OR e.run IS NULL)")
        params.append(run)
    if user is not None:
        where.append("e.user = ?")
        params.append(user)
    if after is not None:
        where.append("e.id > ?")
        params.append(int(after))
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY e.id DESC"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return [to_event(r, with_payload, columns) for r in con.execute(sql, params).fetchall()]


def last_undoable(con: sqlite3.Connection, user: str, run: str | None = None) -> sqlite3.Row | None:
    """The newest event of `user` that holds rows to restore and was not undone; with `run`, only that run's events
    and the workspace's (error types: run NULL), as `query(run=...)` lists them."""
    marks = ", ".join("?" * len(NOT_UNDOABLE))
    scope, params = ("AND (e.run = ? OR e.run IS NULL) ", (run,)) if run is not None else ("", ())
    return con.execute(
        f"SELECT * FROM events e WHERE e.user = ? AND e.undoes IS NULL AND e.action NOT IN ({marks}) {scope}"
        "AND NOT EXISTS (SELECT 1 FROM events u WHERE u.undoes = e.id) ORDER BY e.id DESC LIMIT 1",
        (user, *NOT_UNDOABLE, *params)).fetchone()


def scope_of(run: str | None) -> str:
    """What an event of `run` changes, in words: one run's labels, or the error types every run shares."""
    return f"run {run}" if run is not None else "the error types (every run)"


def later_event(con: sqlite3.Connection, after_id: int, table: str, key: dict) -> dict | None:
    """The newest event after `after_id` that touched the row at key (scanning payloads; undo is rare)."""
    for row in con.execute("SELECT id, user, summary, payload FROM events WHERE id > ? ORDER BY id DESC",
                           (after_id,)).fetchall():
        for ch in decode(row["payload"]).get("changes", []):
            if ch["table"] != table:
                continue
            state = ch["after"] if ch["after"] is not None else ch["before"]
            if state and all(state.get(k) == v for k, v in key.items()):
                return {"id": row["id"], "user": row["user"], "summary": row["summary"]}
    return None


def key_of(change: dict) -> dict:
    state = change["after"] if change["after"] is not None else change["before"]
    return {k: state[k] for k in TABLES[change["table"]][0]}


def collapse(changes: list[dict]) -> list[dict]:
    """One change per row: a row changed several times (inside a batch) keeps its first `before` and last `after`,
    so undo restores what was there before the whole batch; a row that ends as it began is dropped."""
    merged: dict[tuple, dict] = {}
    for ch in changes:
        key = (ch["table"], tuple(sorted(key_of(ch).items())))
        if key in merged:
            merged[key]["after"] = ch["after"]
        else:
            merged[key] = dict(ch)
    return [ch for ch in merged.values() if ch["before"] != ch["after"]]


def inverse(changes: Iterable[dict]) -> list[dict]:
    return [{"table": ch["table"], "before": ch["after"], "after": ch["before"]} for ch in changes]


def changed_rows(groups: list[dict], run: str) -> dict:
    """The last state of every row of `run` that `groups` (oldest first, as `decode(..., columns=True)` gives them)
    changed: per table, a DataFrame of its columns, None where the row is gone, and `present` (False: deleted)."""
    import numpy as np
    import pandas as pd

    frames: dict[str, list] = {}
    for g in groups:
        cols = TABLES[g["table"]][1]
        _, before = _side(g["before"], g["n"], cols)
        has, after = _side(g["after"], g["n"], cols)
        frame = pd.DataFrame(after)
        for k in TABLES[g["table"]][0]:  # as key_of: the after state's key, a deleted row's from its before state
            frame[k] = np.where(has, after[k], before[k])
        frame["present"] = has
        frames.setdefault(g["table"], []).append(frame[frame["run"] == run])
    out = {}
    for table, parts in frames.items():
        rows = pd.concat(parts, ignore_index=True)
        rows = rows.drop_duplicates(list(TABLES[table][0]), keep="last")
        if len(rows):
            out[table] = rows.reset_index(drop=True)
    return out


def _side(enc: dict, n: int, cols: tuple[str, ...]):
    """One side of a stored group as (present mask, {column: object array, None where absent})."""
    import numpy as np

    present = (np.frombuffer(enc["present"].encode("ascii"), dtype=np.uint8) == ord("1") if "present" in enc
               else np.ones(n, dtype=bool))
    stored = enc.get("cols", {})
    values = {}
    for c in cols:
        column = np.full(n, None, dtype=object)
        if c in stored:
            v = stored[c]
            column[present] = v["all"] if isinstance(v, dict) else _objects(v)
        values[c] = column
    return present, values


def _objects(values: list):
    """A list as a 1-d object array, whatever its items (np.asarray would nest lists)."""
    import numpy as np

    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out

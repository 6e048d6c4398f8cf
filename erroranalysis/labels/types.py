"""Error types in the store: create, edit, delete, merge, and the optional parent that makes a two-level taxonomy
("Vocabulary overlap" under "Topic confusion").

A mixin of LabelStore (store.py), which provides the one write path `_write`. Names are unique under the folding
rule of fields.py; a parent must exist and may not be the type itself or one of its descendants.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from erroranalysis.core.errors import ParameterError, UserError, preview
from erroranalysis.labels import eventlog
from erroranalysis.labels.eventlog import Change
from erroranalysis.labels.fields import MAX_NAME, check_severity, clean_name, clean_text, fold_name
from erroranalysis.labels.rows import Target

_TYPE_COLUMNS = "id, name, definition, severity, parent_id, created, created_by, updated, updated_by"
KEEP: Any = type("Keep", (), {"__repr__": lambda self: "KEEP"})()  # update_error_type: leave the parent as it is


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
    parent_id: int | None = None


class TypeOps:
    """Error types: the part of LabelStore that creates, edits, nests and reads them."""

    def create_error_type(self, name: str, definition: str = "", severity: str = "medium", *,
                          parent: int | str | None = None) -> ErrorType:
        name = clean_name(name)
        definition = clean_text("definition", definition)
        check_severity(severity)
        made: list[int] = []

        def build(con: sqlite3.Connection) -> list[Target]:
            _refuse_taken(con, name, None, "pick another name or assign to it")
            parent_id = None if parent is None else _resolve(con, parent)["id"]
            type_id = _next_id(con)
            made.append(type_id)
            now = eventlog.now()
            return [("error_types", None, {"id": type_id, "name": name, "definition": definition,
                                           "severity": severity, "parent_id": parent_id, "created": now,
                                           "created_by": self.user, "updated": now, "updated_by": self.user})]

        self._write(build, action="create_type", run=None, describe=lambda ch: f"created error type {name!r}")
        return self.error_type(made[0])

    def update_error_type(self, type_ref: int | str, *, name: str | None = None, definition: str | None = None,
                          severity: str | None = None, parent: int | str | None = KEEP) -> ErrorType:
        """Edit a type; `parent=None` makes it top-level, a type id or name puts it under that type."""
        name = clean_name(name) if name is not None else None
        definition = clean_text("definition", definition) if definition is not None else None
        if severity is not None:
            check_severity(severity)
        found: list[dict] = []

        def build(con: sqlite3.Connection) -> list[Target]:
            before = _resolve(con, type_ref)
            found.append(before)
            after = dict(before)
            if name is not None and name != before["name"]:
                _refuse_taken(con, name, before["id"], "merge into it instead of renaming")
                after["name"] = name
            if definition is not None:
                after["definition"] = definition
            if severity is not None:
                after["severity"] = severity
            if parent is not KEEP:
                after["parent_id"] = None if parent is None else _parent_for(con, before, parent)["id"]
            after["updated"], after["updated_by"] = eventlog.now(), self.user
            return [("error_types", before, after)]

        def describe(changes: list[dict]) -> str:
            b, a = changes[0]["before"], changes[0]["after"]
            what = [k if k != "parent_id" else "parent" for k in ("name", "definition", "severity", "parent_id")
                    if a[k] != b[k]]
            return f"edited error type {b['name']!r} ({', '.join(what)})"

        self._write(build, action="update_type", run=None, describe=describe)
        return self.error_type(found[0]["id"])

    def delete_error_type(self, type_ref: int | str) -> Change:
        """Delete an error type and unassign its examples (in every run); its sub-types move up to its parent.
        One undo restores all of it."""
        found: list[dict] = []

        def build(con: sqlite3.Connection) -> list[Target]:
            row = _resolve(con, type_ref)
            found.append(row)
            out: list[Target] = [("assignments", dict(a), None) for a in con.execute(
                "SELECT * FROM assignments WHERE error_type_id = ?", (row["id"],)).fetchall()]
            out += _reparent(con, [row["id"]], lambda child: row["parent_id"], self.user)
            return out + [("error_types", row, None)]

        return self._write(build, action="delete_type", run=None, count="assignments", describe=lambda ch: (
            f"deleted error type {found[0]['name']!r} "
            f"({sum(c['table'] == 'assignments' for c in ch)} examples unassigned)"))

    def merge_error_types(self, sources: Iterable[int | str], target: int | str) -> Change:
        """Move every example of `sources` to `target` and delete the sources; their sub-types move under
        `target` (or, for a type above `target`, up to the nearest type that stays)."""
        sources = list(sources)
        merged: list[dict] = []

        def build(con: sqlite3.Connection) -> list[Target]:
            into = _resolve(con, target)
            gone: list[dict] = []
            for ref in sources:
                row = _resolve(con, ref)
                if row["id"] != into["id"] and row not in gone:
                    gone.append(row)
            if not gone:
                raise UserError(f"nothing to merge into {into['name']!r}: pick at least one other error type.")
            merged[:] = [into, *gone]
            now, out = eventlog.now(), []
            for row in gone:
                for a in con.execute("SELECT * FROM assignments WHERE error_type_id = ?", (row["id"],)).fetchall():
                    out.append(("assignments", dict(a), {**dict(a), "error_type_id": into["id"], "updated": now,
                                                         "updated_by": self.user}))
            parents = _parents(con)
            gone_ids = {r["id"] for r in gone}
            above = _ancestors(parents, into["id"])

            def new_parent(child: dict) -> int | None:
                if child["id"] not in above and child["id"] != into["id"]:
                    return into["id"]
                up = parents.get(child["parent_id"])  # the nearest ancestor that stays
                while up in gone_ids:
                    up = parents.get(up)
                return up

            out += _reparent(con, gone_ids, new_parent, self.user)
            return out + [("error_types", row, None) for row in gone]

        def describe(ch: list[dict]) -> str:
            names = ", ".join(repr(r["name"]) for r in merged[1:])
            moved = sum(c["table"] == "assignments" for c in ch)
            return f"merged {names} into {merged[0]['name']!r} ({moved} examples)"

        return self._write(build, action="merge_types", run=None, count="assignments", describe=describe)

    # -- reading ----------------------------------------------------------------------------------------------------

    def error_types(self) -> list[ErrorType]:
        rows_ = self._db.read(f"SELECT {_TYPE_COLUMNS} FROM error_types ORDER BY name_key")
        return [ErrorType(**dict(r)) for r in rows_]

    def error_type(self, type_ref: int | str) -> ErrorType:
        return ErrorType(**self._db.run(lambda con: _resolve(con, type_ref)))

    def find_error_type(self, name: str) -> ErrorType | None:
        """The type of that name under the folding rule ("zoë" finds "ZOË"), or None."""
        row = self._db.read(f"SELECT {_TYPE_COLUMNS} FROM error_types WHERE name_key = ?", (fold_name(name),))
        return ErrorType(**dict(row[0])) if row else None

    def children(self, type_ref: int | str) -> list[ErrorType]:
        """The types directly under `type_ref`, by name."""
        def read(con: sqlite3.Connection) -> list[dict]:
            parent = _resolve(con, type_ref)
            return [dict(r) for r in con.execute(f"SELECT {_TYPE_COLUMNS} FROM error_types WHERE parent_id = ? "
                                                 "ORDER BY name_key", (parent["id"],))]

        return [ErrorType(**r) for r in self._db.run(read)]

    @staticmethod
    def _resolve_type(con: sqlite3.Connection, type_ref: Any) -> dict:
        return _resolve(con, type_ref)

    def _resolve_clashes(self, groups: list[list[dict]], how: str) -> None:
        """The migration's resolution of names that fold to one (oldest type first in each group): merge the
        others into the oldest, or rename them `<name> (2)`, `<name> (3)`, ... Each is a logged, undoable event."""
        for group in groups:
            keep, *others = group
            if how == "merge":
                self.merge_error_types([t["id"] for t in others], keep["id"])
                continue
            for t in others:
                self.update_error_type(t["id"], name=self._free_name(t["name"]))

    def _free_name(self, name: str) -> str:
        n = 2
        while True:
            suffix = f" ({n})"
            candidate = name[: MAX_NAME - len(suffix)].rstrip() + suffix
            if self.find_error_type(candidate) is None:
                return candidate
            n += 1


def _resolve(con: sqlite3.Connection, type_ref: Any) -> dict:
    if isinstance(type_ref, ErrorType):
        type_ref = type_ref.id
    if isinstance(type_ref, bool):
        raise ParameterError("error_type", type_ref, "an error type id or name")
    if isinstance(type_ref, int):
        row = con.execute(f"SELECT {_TYPE_COLUMNS} FROM error_types WHERE id = ?", (type_ref,)).fetchone()
    else:
        row = con.execute(f"SELECT {_TYPE_COLUMNS} FROM error_types WHERE name_key = ?",
                          (fold_name(type_ref),)).fetchone()
    if row is None:
        known = [r[0] for r in con.execute("SELECT name FROM error_types ORDER BY name_key").fetchall()]
        raise UserError(f"no error type {type_ref!r}; known: {preview(known) if known else 'none yet'}.")
    return dict(row)


def _refuse_taken(con: sqlite3.Connection, name: str, own_id: int | None, advice: str) -> None:
    row = con.execute("SELECT name FROM error_types WHERE name_key = ? AND id IS NOT ?",
                      (fold_name(name), own_id)).fetchone()
    if row is not None:
        same = "" if row["name"] == name else f" (as {row['name']!r}: names are compared ignoring case)"
        raise UserError(f"error type {name!r} already exists{same}; {advice}.")


def _next_id(con: sqlite3.Connection) -> int:
    """A new type id, never one a deleted type had (as AUTOINCREMENT would give)."""
    row = con.execute("SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'error_types'), 0), "
                      "COALESCE((SELECT MAX(id) FROM error_types), 0))").fetchone()
    return int(row[0]) + 1


def _parents(con: sqlite3.Connection) -> dict[int, int | None]:
    return {r[0]: r[1] for r in con.execute("SELECT id, parent_id FROM error_types")}


def _ancestors(parents: dict[int, int | None], type_id: int) -> set[int]:
    out, up = set(), parents.get(type_id)
    while up is not None and up not in out:
        out.add(up)
        up = parents.get(up)
    return out


def _parent_for(con: sqlite3.Connection, child: dict, parent_ref: Any) -> dict:
    """The parent type `parent_ref` for `child`, refused when it would make a cycle."""
    parent = _resolve(con, parent_ref)
    if parent["id"] == child["id"] or child["id"] in _ancestors(_parents(con), parent["id"]):
        raise UserError(f"cannot put error type {child['name']!r} under {parent['name']!r}: "
                        f"{parent['name']!r} is {child['name']!r} itself or one of its sub-types; pick another "
                        "parent.")
    return parent


def _reparent(con: sqlite3.Connection, parent_ids: Iterable[int], new_parent, user: str) -> list[Target]:
    """Targets that move the sub-types of `parent_ids` to new_parent(child)."""
    ids = list(parent_ids)
    if not ids:
        return []
    now, out = eventlog.now(), []
    marks = ", ".join("?" * len(ids))
    for child in con.execute(f"SELECT {_TYPE_COLUMNS} FROM error_types WHERE parent_id IN ({marks}) "
                             f"AND id NOT IN ({marks})", ids + ids).fetchall():
        child = dict(child)
        out.append(("error_types", child, {**child, "parent_id": new_parent(child), "updated": now,
                                           "updated_by": user}))
    return out


"""The store's history: reading the event log, undoing a change, archiving old events, backups.

A mixin of LabelStore (store.py), which provides `_db`, `_record` and the access checks.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from erroranalysis.core.errors import UserError
from erroranalysis.core.validation import check_param
from erroranalysis.labels import eventlog, rows
from erroranalysis.labels.eventlog import Change, Event


class HistoryOps:
    """Reading the log, undo, archive and backup: the part of LabelStore that works on its history."""

    def events(self, *, run: str | None = None, user: str | None = None, limit: int | None = 50,
               with_payload: bool = False, after: int | None = None, columns: bool = False) -> list[Event]:
        """The newest events first (with `after`, those whose id is larger), each with `undone_by` set when a later
        event undid it; with `columns`, payloads column by column (eventlog.decode)."""
        return self._db.run(lambda con: eventlog.query(con, run=run, user=user, limit=limit,
                                                       with_payload=with_payload, after=after, columns=columns))

    def last_undoable(self, *, user: str | None = None) -> Event | None:
        """The event `undo` would revert: the newest change by `user` (default: this store's user) that is not
        itself an undo and was not undone."""
        who = self.user if user is None else user
        row = self._db.run(lambda con: eventlog.last_undoable(con, who))
        return eventlog.to_event(row, with_payload=False) if row is not None else None

    def undo(self, event_id: int | None = None) -> Change:
        """Revert one event (default: this user's newest change not yet undone) by restoring the rows it changed.

        Refuses with a UserError, changing nothing, when a later event changed any of the same rows; the message
        names that event so it can be undone first.
        """
        self._check_writable()
        self._refuse_in_batch("undo")

        def do(con: sqlite3.Connection) -> Change:
            row = self._event_to_undo(con, event_id)
            changes = eventlog.decode(row["payload"]).get("changes", [])
            for ch, now in zip(changes, rows.current(con, changes)):  # refuse when a row is not what this event left
                if now != ch["after"]:
                    key = eventlog.key_of(ch)
                    later = eventlog.later_event(con, row["id"], ch["table"], key)
                    by = f" by event {later['id']} ({later['user']}: {later['summary']})" if later else ""
                    raise UserError(f"cannot undo {row['summary']!r}: {ch['table']} row {_key_text(key)} was "
                                    f"changed since{by}; undo that first.")
            restore = eventlog.inverse(changes)
            con.execute("PRAGMA defer_foreign_keys = ON")  # rows come back in any order; references checked below
            try:
                rows.apply(con, restore)
            except sqlite3.IntegrityError as exc:
                name = next((ch["after"]["name"] for ch in restore if ch["table"] == "error_types" and ch["after"]),
                            "")
                raise UserError(f"cannot undo {row['summary']!r}: an error type named {name!r} exists now "
                                f"({exc}); rename or merge it first.") from None
            _check_references(con, row["summary"], changes)
            return self._record(con, run=row["run"], action="undo", summary=f"undid: {row['summary']}",
                                changes=restore, n=len(changes), undoes=row["id"])

        return self._db.transaction(do)

    def _refuse_in_batch(self, what: str) -> None:
        if self._pending is not None:
            raise UserError(f"{what} cannot be part of a batch: it is its own change; do it after the batch.")

    def _event_to_undo(self, con: sqlite3.Connection, event_id: int | None) -> sqlite3.Row:
        if event_id is None:
            row = eventlog.last_undoable(con, self.user)
            if row is None:
                raise UserError(f"nothing to undo: {self.user!r} has no changes left to revert.")
            return row
        row = con.execute("SELECT * FROM events WHERE id = ?", (int(event_id),)).fetchone()
        if row is None:
            raise UserError(f"no event {event_id} in {self.path} (archived events cannot be undone).")
        if row["action"] in eventlog.NOT_UNDOABLE:
            raise UserError(f"event {event_id} is an {row['action']}, which cannot be undone; make the change "
                            "again instead.")
        done = con.execute("SELECT id FROM events WHERE undoes = ?", (row["id"],)).fetchone()
        if done:
            raise UserError(f"event {event_id} was already undone by event {done['id']}.")
        return row

    def backup(self, dest: str | Path | None = None) -> Path:
        """A consistent copy of the database (see backup.py), safe while others write; the copy's path."""
        from erroranalysis.labels import backup

        return backup.backup(self.path, dest)

    def archive(self, *, before: str | None = None, keep: int | None = None, to: str | Path | None = None):
        """Move old events (older than `before`, an ISO date/time in UTC, or all but the newest `keep`) to an
        archive file (default `<name>-archive.sqlite` beside the database); see archive.py."""
        from erroranalysis.labels import archive

        check_param("before/keep", (before, keep), (before is None) != (keep is None), "exactly one of the two")
        if keep is not None:
            check_param("keep", keep, isinstance(keep, int) and keep >= 1, "an integer >= 1")
        self._check_writable()
        self._refuse_in_batch("archive")
        target = Path(to) if to is not None else archive.default_archive_path(self.path)
        if target.resolve() == self.path.resolve():
            raise UserError(f"{target}: is the labels database itself; archive to another file.")
        archive.check_target(target, self.path)
        ids = self._db.run(lambda con: archive.candidates(con, before=before, keep=keep))
        if not ids:
            return archive.ArchiveResult(target, 0, None, None, None)
        self._db.run(lambda con: archive.copy_events(con, ids, target, self.path))

        def move(con: sqlite3.Connection) -> Change:
            present = {r[0] for r in con.execute(f"SELECT id FROM events WHERE id IN ({','.join(map(str, ids))})")}
            todo = [i for i in ids if i in present]
            archive.remove_events(con, todo)
            text = f"archived {rows.plural(len(todo), 'event')} (ids {ids[0]} to {ids[-1]}) to {target}"
            return self._record(con, run=None, action="archive", summary=text, changes=[], n=len(todo))

        change = self._db.transaction(move)
        return archive.ArchiveResult(target, change.changed, ids[0], ids[-1], change.event_id)


def _check_references(con: sqlite3.Connection, summary: str, changes: list[dict]) -> None:
    """After an undo with deferred foreign keys: refuse it when a row left behind points at a type it removes."""
    broken = con.execute("PRAGMA foreign_key_check").fetchall()
    if not broken:
        return
    removed = {ch["after"]["id"]: ch["after"]["name"] for ch in changes
               if ch["table"] == "error_types" and ch["after"] is not None}
    name = next(iter(removed.values()), "?")
    what = ("examples are still assigned to" if any(r[0] == "assignments" for r in broken) else
            "other error types are now under")
    raise UserError(f"cannot undo {summary!r}: {what} error type {name!r} by later changes; undo or change those "
                    "first.")


def _key_text(key: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in key.items())


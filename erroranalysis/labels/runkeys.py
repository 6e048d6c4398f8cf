"""Which key a run's labels are stored under (`workspace.run_key`), and bringing the labels of an older key over.

Up to 0.2 a run outside the database's folder was keyed by its folder name alone, so `expA/sample` and `expB/sample`
shared one key and each showed the other's labels. Such a run is now keyed by its id (or, made before ids, its
absolute path). The first writer that asks for the key of such a run moves the rows still stored under its old
key (assignments, flags, notes) to the new one, in one logged change (`undo` takes it back), and records that the old
key was claimed, so a second run of the same name does not take them too. Nothing is lost: the rows move, they are
never dropped. A read-only store moves nothing; its pages show the labels once a writer has opened the run.

A mixin of LabelStore (store.py), which provides `path`, `_db`, `_write` and the access checks.
"""

from __future__ import annotations

import sqlite3

from erroranalysis.labels import rows
from erroranalysis.labels.rows import Target
from erroranalysis.labels.workspace import legacy_key, run_key

TABLES = ("assignments", "flags", "notes")
CLAIMED = "legacy_run_key:"  # meta key prefix: an old key whose rows went to a run, with that run's key


class RunKeyOps:
    """`run_key(run)`: the run's key in this database, once any rows under its pre-0.3 key are brought over."""

    def run_key(self, run) -> str:
        """The name the run's labels are stored under (erroranalysis.labels.workspace.run_key: pass the Run for a
        run outside the database's folder). The first time a writer asks, rows left under the run's 0.2 key
        move to it (see the module docstring)."""
        key = run_key(run, self.path)
        old = legacy_key(run, self.path)
        seen = self.__dict__.setdefault("_keys_seen", set())
        if old is not None and old != key and key not in seen and self.can_write and self._pending is None:
            seen.add(key)
            self._adopt(old, key)
        return key

    def _adopt(self, old: str, key: str) -> None:
        if (self.path.parent / old).is_dir():  # a run inside the folder is keyed `old` by right: its labels stay
            return
        claimed = self._db.read("SELECT value FROM meta WHERE key = ?", [CLAIMED + old])
        if claimed or not any(self._db.read(f"SELECT 1 FROM {t} WHERE run = ? LIMIT 1", [old]) for t in TABLES):
            return

        def build(con: sqlite3.Connection) -> list[Target]:
            con.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (CLAIMED + old, key))
            out: list[Target] = []
            for table in TABLES:
                for row in con.execute(f"SELECT * FROM {table} WHERE run = ?", (old,)).fetchall():
                    before = dict(row)
                    out += [(table, before, None), (table, None, {**before, "run": key})]
            return out

        self._write(build, action="rekey_run", run=key, describe=lambda changes: (
            f"moved {rows.plural(len(changes) // 2, 'label row')} stored under {old!r} (how 0.2 keyed every run "
            f"named so outside this database's folder) to {key!r}, the key of the run that asked first"))

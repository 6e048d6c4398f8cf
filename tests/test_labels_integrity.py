"""A labels database is never lost or silently replaced: damaged, empty and foreign files are refused with how to
restore, a full disk loses nothing, backups are consistent while another process writes, restore keeps what it
replaces, and a schema-1 database made by the 0.1 store is migrated after a backup, clashing names only on request.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner
from ui_fixtures import make_run

from erroranalysis.cli.app import app
from erroranalysis.core.errors import UserError
from erroranalysis.labels import DamagedError, LabelStore, NameClashError, WriteFailedError, backup
from erroranalysis.labels.schema import SCHEMA_VERSION

V1 = Path(__file__).parent / "data" / "labels-v1.sqlite"  # made by the 0.1 store: tests/data/make_labels_v1.py


def _labeled(path: Path, n_types: int = 13, n_assigned: int = 35) -> LabelStore:
    store = LabelStore(path, user="alice")
    for i in range(n_types):
        store.create_error_type(f"type {i}", "a definition " * 20)
    for i in range(n_assigned):
        store.assign("run", [f"ex{i:06d}"], f"type {i % n_types}", cluster_ids={f"ex{i:06d}": 1})
    return store


def _checkpoint(path: Path) -> None:
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()


def _zero_page_of(path: Path, table: str) -> None:
    """Overwrite the root page of `table` with zeros, as a disk or a stray write would (one 4 KB page)."""
    _checkpoint(path)
    con = sqlite3.connect(path)
    page = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    size = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    with open(path, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\0" * size)


def test_a_zero_byte_file_is_refused_and_never_recreated(tmp_path):
    path = tmp_path / "labels.sqlite"
    path.write_bytes(b"")
    with pytest.raises(DamagedError, match=r"labels.sqlite: .*empty \(0 bytes\).*no backup was found"):
        LabelStore(path)
    assert path.stat().st_size == 0


def test_a_sqlite_file_of_another_tool_is_refused_untouched(tmp_path):
    path = tmp_path / "labels.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE other (x)")
    con.commit()
    con.close()
    with pytest.raises(UserError, match="not a labels database"):
        LabelStore(path)
    tables = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master")}
    assert tables == {"other"}


def test_a_damaged_page_is_refused_on_open_with_the_command_that_restores_it(tmp_path):
    path = tmp_path / "labels.sqlite"
    store = _labeled(path)
    copy = store.backup()
    store.set_note("run", "ex000001", "made after the backup")
    _zero_page_of(path, "events")
    with pytest.raises(DamagedError) as info:
        LabelStore(path, user="alice")
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert f"erroranalysis labels restore {copy} --labels-db {path}" in message
    result = CliRunner().invoke(app, ["labels", "restore", str(copy), "--labels-db", str(path), "--yes"])
    assert result.exit_code == 0, result.output
    restored = LabelStore(path)
    assert len(restored.assignments("run")) == 35 and restored.integrity_check() == "ok"
    kept = [p for p in tmp_path.iterdir() if "-replaced-" in p.name and p.suffix == ".sqlite"]
    assert len(kept) == 1  # the damaged file is kept aside, not deleted


def test_export_of_a_damaged_database_exits_2_with_nothing_written(tmp_path):
    run = make_run(tmp_path / "runs" / "news", n=60, n_failures=20)
    db = tmp_path / "runs" / "labels.sqlite"
    store = LabelStore(db, user="alice")
    for i in range(13):
        store.create_error_type(f"type {i}", "definition " * 30)
    failures = [e for e, ok in zip(run.predictions()["example_id"], run.predictions()["correct"]) if not ok]
    for i, ex in enumerate(failures):
        store.assign("news", [ex], f"type {i % 13}")
    _zero_page_of(db, "events")  # reads of types and assignments still work: only a check notices
    out = tmp_path / "taxonomy.json"
    result = CliRunner().invoke(app, ["export", str(run.path), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "damaged" in result.output and "Traceback" not in result.output
    assert not out.exists()
    result = CliRunner().invoke(app, ["import-taxonomy", str(out), "--labels-db", str(db)])
    assert result.exit_code == 2


_FULL_DISK = textwrap.dedent("""
    import resource, sys
    from erroranalysis.labels import LabelStore
    store = LabelStore(sys.argv[1], user="alice")
    store.create_error_type("T")
    store.assign("run", [f"first-{i}" for i in range(50)], "T")
    import os
    limit = os.path.getsize(sys.argv[1]) + 65536  # room for small writes, not for 20,000 rows
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    try:
        store.assign("run", [f"big-{i}" for i in range(20000)], "T")
    except Exception as exc:
        print(type(exc).__name__ + ": " + str(exc))
""")


def test_a_write_at_the_file_size_limit_is_one_line_and_loses_nothing(tmp_path):
    path = tmp_path / "labels.sqlite"
    done = subprocess.run([sys.executable, "-c", _FULL_DISK, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip()
    assert line.startswith(WriteFailedError.__name__ + ": ") and "\n" not in line
    assert "file-size limit" in line and "nothing was changed" in line and str(path) in line
    store = LabelStore(path)
    ids = set(store.assignments("run")["example_id"])
    assert ids == {f"first-{i}" for i in range(50)}  # the earlier labels are there, none of the failed write
    assert store.integrity_check() == "ok" and [e.action for e in store.events()] == ["assign", "create_type"]


_WRITER = textwrap.dedent("""
    import sys
    from erroranalysis.labels import LabelStore
    store = LabelStore(sys.argv[1], user="writer")
    for i in range(400):
        store.assign("run", [f"w{i}-{j}" for j in range(20)], "T")
""")


def test_backups_taken_while_another_process_writes_are_consistent(tmp_path):
    path = tmp_path / "labels.sqlite"
    LabelStore(path, user="setup").create_error_type("T")
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)])
    copies = []
    try:
        while writer.poll() is None and len(copies) < 6:
            copies.append(backup.backup(path, tmp_path / f"copy{len(copies)}.sqlite"))
    finally:
        writer.wait(timeout=120)
    assert writer.returncode == 0 and copies
    for copy in copies:
        store = LabelStore(copy, create=False, read_only=True)
        logged = {ch["after"]["example_id"] for e in store.events(limit=None, with_payload=True)
                  for ch in e.payload["changes"] if ch["table"] == "assignments"}
        assert set(store.assignments("run")["example_id"]) == logged  # a snapshot: every row with its event
        assert store.integrity_check() == "ok"


def test_restore_replaces_the_content_keeps_the_old_file_and_refuses_bad_copies(tmp_path):
    path = tmp_path / "labels.sqlite"
    store = _labeled(path, n_types=2, n_assigned=4)
    copy = store.backup(tmp_path / "saved.sqlite")
    store.delete_error_type("type 0")
    kept = backup.restore(copy, path)
    assert kept is not None and len(LabelStore(kept).assignments()) == 2  # the state it replaced
    assert len(LabelStore(path).assignments()) == 4
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 50)
    with pytest.raises(UserError, match="junk.sqlite: not a usable labels database"):
        backup.restore(tmp_path / "junk.sqlite", path)
    with pytest.raises(UserError, match="exists already"):
        backup.backup(path, copy)


def test_cli_backup_and_restore_without_yes_asks(tmp_path):
    path = tmp_path / "labels.sqlite"
    _labeled(path, n_types=1, n_assigned=2)
    result = CliRunner().invoke(app, ["labels", "backup", "--labels-db", str(path)])
    assert result.exit_code == 0 and "(checked: ok)" in result.output
    made = backup.find_backups(path)
    assert len(made) == 1 and made[0].name.startswith("labels-backup-")
    result = CliRunner().invoke(app, ["labels", "restore", str(made[0]), "--labels-db", str(path)], input="n\n")
    assert result.exit_code == 1 and not [p for p in tmp_path.iterdir() if "-replaced-" in p.name]
    result = CliRunner().invoke(app, ["labels", "check", "--labels-db", str(path)])
    assert result.exit_code == 0 and result.output.strip().endswith(": ok")


# -- the schema-1 database of a 0.1 user -------------------------------------------------------------------------


@pytest.fixture()
def v1(tmp_path):
    path = tmp_path / "labels.sqlite"
    shutil.copy(V1, path)
    return path


def test_a_v1_database_with_clashing_names_is_left_as_it_was_until_the_user_chooses(v1):
    before = v1.read_bytes()
    with pytest.raises(NameClashError, match=r"'Zoë' and 'ZOË' are one name.*--dry-run.*--merge-clashes"):
        LabelStore(v1)
    assert v1.read_bytes() == before and not backup.find_backups(v1)
    result = CliRunner().invoke(app, ["labels", "migrate", "--labels-db", str(v1), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert f"schema 1 -> {SCHEMA_VERSION}" in result.output
    assert "'Zoë' (id 1, 3 examples) and 'ZOË' (id 2, 2 examples) are one name now" in result.output
    result = CliRunner().invoke(app, ["labels", "migrate", "--labels-db", str(v1)])
    assert result.exit_code == 2 and "nothing was changed" in result.output
    assert v1.read_bytes() == before


def test_migrating_v1_merges_on_request_after_a_backup_and_keeps_every_label(v1):
    result = CliRunner().invoke(app, ["labels", "migrate", "--labels-db", str(v1), "--merge-clashes"])
    assert result.exit_code == 0, result.output
    (copy,) = backup.find_backups(v1)
    assert copy.name.startswith(f"labels-before-schema-{SCHEMA_VERSION}-") and f"the copy made before is {copy}" in result.output
    old = sqlite3.connect(copy)
    assert old.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "1"
    assert old.execute("SELECT COUNT(*) FROM error_types").fetchone()[0] == 3
    store = LabelStore(v1, user="alice")
    assert store.migrated is None  # already current: opening again changes nothing
    con = sqlite3.connect(v1)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    assert store.counts("sample") == {"Zoë": 5, "Sarcasm": 3}
    assert len(store.assignments("team/other")) == 1 and len(store.flags("sample")) == 1
    merge = store.events(limit=1)[0]
    assert merge.action == "merge_types" and merge.writer == "cli" and "'ZOË' into 'Zoë'" in merge.summary
    assert store.error_type("ZOË").name == "Zoë"  # one folding rule from now on
    with pytest.raises(UserError, match="already exists"):
        store.create_error_type("zoË")


def test_after_migration_schema_1_events_still_read_and_undo(v1):
    store = LabelStore(v1, user="alice", resolve_clashes="rename")
    assert {t.name for t in store.error_types()} == {"Zoë", "ZOË (2)", "Sarcasm"}
    events = store.events(limit=None, with_payload=True)
    assert [e.writer for e in events if e.action != "update_type"] == [None] * (len(events) - 1)
    note = next(e for e in events if e.action == "note")
    store.undo(note.id)
    assert store.notes("sample").empty
    deleted = next(e for e in events if e.action == "delete_type")
    store.undo(deleted.id)  # a schema-1 row of error_types (no parent) comes back as it was
    scratch = store.error_type("Scratch")
    assert scratch.parent_id is None and scratch.created_by == "alice"
    assert json.loads(json.dumps([e.payload for e in events]))  # payloads are plain data


def test_a_read_only_store_does_not_migrate(v1):
    with pytest.raises(UserError, match="needs migrating.*erroranalysis labels migrate"):
        LabelStore(v1, read_only=True)


def test_opening_a_damaged_file_never_writes_to_it(tmp_path):
    path = tmp_path / "labels.sqlite"
    _labeled(path, n_types=2, n_assigned=3)
    _zero_page_of(path, "assignments")
    before = path.read_bytes()
    for kwargs in ({}, {"read_only": True}, {"create": False}):
        with pytest.raises(DamagedError):
            LabelStore(path, **kwargs)
    assert path.read_bytes() == before and not os.path.exists(f"{path}-journal")


def test_a_restore_is_logged_above_every_event_the_replaced_database_gave(tmp_path):
    path = tmp_path / "labels.sqlite"
    store = _labeled(path, n_types=1, n_assigned=2)
    copy = store.backup()
    for i in range(5):
        store.set_note("run", "ex000000", f"note {i}")
    seen = store.version()
    backup.restore(copy, path)
    restored = LabelStore(path, user="alice")
    assert restored.version() == seen + 1  # a cache keyed on the version cannot serve the replaced state
    assert restored.events(limit=1)[0].action == "restore" and restored.notes().empty
    assert restored.undo().summary.startswith("undid: assigned")  # the restore itself is not undone


_CREATOR = textwrap.dedent("""
    import sys, time
    from erroranalysis.labels import LabelStore
    while time.time() < float(sys.argv[2]):
        pass
    store = LabelStore(sys.argv[1], user=sys.argv[3])
    store.create_error_type("type of " + sys.argv[3])
""")


def test_processes_creating_one_new_database_at_once_share_it(tmp_path):
    import time

    path = tmp_path / "new" / "labels.sqlite"
    start = time.time() + 1.5  # every process past its imports before any creates the file
    procs = [subprocess.Popen([sys.executable, "-c", _CREATOR, str(path), str(start), f"user{i}"])
             for i in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    store = LabelStore(path)
    assert sorted(t.name for t in store.error_types()) == [f"type of user{i}" for i in range(4)]
    assert sorted(p.name for p in path.parent.iterdir()) == ["labels.sqlite"]  # no half-made file left behind


def test_restoring_a_schema_1_backup_under_open_stores_migrates_it_first(v1, tmp_path):
    """The app keeps its stores open: after a restore of a 0.1 backup every page still reads (no 'no such column')."""
    clean = tmp_path / "backup-v1.sqlite"
    shutil.copy(v1, clean)
    con = sqlite3.connect(clean)  # the same 0.1 file without its clashing pair, so it can be restored as it is
    con.execute("DELETE FROM assignments WHERE error_type_id = 2")
    con.execute("DELETE FROM error_types WHERE id = 2")
    con.commit()
    con.close()
    live_db = tmp_path / "live" / "labels.sqlite"
    live = LabelStore(live_db, user="alice", writer="app")
    live.create_error_type("Today's type")
    before = live_db.read_bytes()
    with pytest.raises(UserError, match=r"not restored, the live database is as it was: .*'Zoë' and 'ZOË' are one "
                                        r"name.*--merge-clashes"):
        backup.restore(v1, live_db)
    assert live_db.read_bytes() == before and [t.name for t in live.error_types()] == ["Today's type"]
    assert backup.restore(clean, live_db) is not None
    assert {t.name for t in live.error_types()} == {"Zoë", "Sarcasm"}  # the open store reads the new schema
    assert all(t.parent_id is None for t in live.error_types())
    assert live.counts("sample") == {"Zoë": 3, "Sarcasm": 3}
    assert live.events(limit=1)[0].action == "restore" and live.events(limit=1)[0].writer == "cli"
    live.create_error_type("Sub", parent="Zoë")  # and writes it
    con = sqlite3.connect(live_db)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    assert sqlite3.connect(clean).execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "1"

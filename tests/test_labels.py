"""The labels store: error types, assignments, flags, notes, the append-only event log, undo, concurrent writers."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3

import pytest

from erroranalysis.core.errors import ParameterError, UserError
from erroranalysis.labels import SCHEMA_VERSION, LabelStore, run_key, workspace_db


@pytest.fixture()
def store(tmp_path):
    return LabelStore(tmp_path / "labels.sqlite", user="alice")


def test_new_database_is_wal_with_schema(tmp_path):
    path = tmp_path / "ws" / "labels.sqlite"
    LabelStore(path, user="alice")
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"error_types", "assignments", "flags", "notes", "events", "meta"} <= tables
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)


def test_default_paths(tmp_path):
    assert workspace_db(tmp_path) == tmp_path.resolve() / "labels.sqlite"
    db = tmp_path / "labels.sqlite"
    assert run_key(tmp_path / "sample", db) == "sample"
    assert run_key(tmp_path / "team" / "sample", db) == "team/sample"
    with pytest.raises(ValueError, match="outside the labels database's folder.*pass the Run"):
        run_key(tmp_path.parent / "elsewhere" / "sample", db)  # a run elsewhere is keyed by its manifest's id


def test_create_update_and_list_error_types(store):
    t = store.create_error_type("  Sarcasm   read literally ", "Irony taken at face value", severity="high")
    assert (t.name, t.definition, t.severity, t.created_by) == ("Sarcasm read literally", "Irony taken at face value",
                                                                "high", "alice")
    assert store.error_type("sarcasm read literally").id == t.id  # names are case-insensitive
    u = store.update_error_type(t.id, name="Sarcasm", severity="critical")
    assert (u.name, u.severity, u.definition) == ("Sarcasm", "critical", "Irony taken at face value")
    assert [x.name for x in store.error_types()] == ["Sarcasm"]


def test_duplicate_names_are_refused(store):
    store.create_error_type("Sarcasm")
    with pytest.raises(UserError, match="already exists"):
        store.create_error_type("SARCASM")
    other = store.create_error_type("Negation")
    with pytest.raises(UserError, match="already exists"):
        store.update_error_type(other.id, name="sarcasm")


@pytest.mark.parametrize("kwargs, match", [
    ({"name": ""}, "name"),
    ({"name": "x" * 81}, "at most 80"),
    ({"name": "ok", "severity": "huge"}, "severity"),
    ({"name": "ok", "definition": "d" * 10_001}, "at most 10000"),
])
def test_invalid_error_type_parameters(store, kwargs, match):
    with pytest.raises(ParameterError, match=match):
        store.create_error_type(**kwargs)


@pytest.mark.parametrize("call, match", [
    (lambda s: s.assign("run", "abc", "T"), "not a string"),
    (lambda s: s.assign("", ["1"], "T"), "run"),
    (lambda s: s.assign("run", ["1"], "T", source="robot"), "source"),
    (lambda s: s.assign("run", ["1"], "T", status="maybe"), "status"),
    (lambda s: s.set_flag("run", ["1"], "boring"), "flag"),
    (lambda s: s.assign("run", [""], "T"), "example id"),
])
def test_invalid_assignment_parameters(store, call, match):
    store.create_error_type("T")
    with pytest.raises(ParameterError, match=match):
        call(store)


def test_unknown_error_type_names_the_known_ones(store):
    store.create_error_type("Sarcasm")
    with pytest.raises(UserError, match="no error type 'Irony'; known: 'Sarcasm'"):
        store.assign("run", ["1"], "Irony")


def test_assign_reassign_unassign(store):
    a = store.create_error_type("A")
    b = store.create_error_type("B")
    change = store.assign("run", ["1", "2", "2", "3"], a.id, cluster_ids={"1": 4, "2": 4})
    assert change.changed == 3 and change.event_id is not None
    assert store.assign("run", ["1", "2"], a.id).changed == 0  # nothing new: no event
    assert store.assign("run", ["2", "3"], "B").changed == 2
    df = store.assignments("run").set_index("example_id")
    assert df.loc["1", "error_type"] == "A" and df.loc["2", "error_type"] == "B"
    assert df.loc["1", "cluster_id"] == 4 and df.loc["2", "cluster_id"] == 4  # kept when reassigned
    assert set(df["source"]) == {"human"} and set(df["status"]) == {"accepted"}
    assert store.counts("run") == {"B": 2, "A": 1}
    assert store.unassign("run", ["1", "9"]).changed == 1
    assert sorted(store.assignments("run")["example_id"]) == ["2", "3"]
    assert store.assignments("other-run").empty
    assert b.id != a.id


def test_suggestions_are_pending_until_accepted(store):
    store.create_error_type("A")
    store.assign("run", ["1", "2"], "A", source="suggested")
    assert set(store.assignments("run")["status"]) == {"pending"}
    assert store.counts("run") == {"A": 0}
    assert store.set_status("run", ["1"], "accepted").changed == 1
    assert store.counts("run") == {"A": 1}
    store.set_status("run", ["2"], "rejected")
    assert len(store.assignments("run", include_rejected=False)) == 1


def test_flags_and_notes(store):
    assert store.set_flag("run", ["1", "2"], "label_wrong").changed == 2
    assert store.set_flag("run", ["1"], "label_wrong").changed == 0
    store.set_flag("run", ["2"], "not_error")
    store.set_flag("run", ["2"], "label_wrong", value=False)
    flags = store.flags("run")
    assert sorted(zip(flags["example_id"], flags["flag"])) == [("1", "label_wrong"), ("2", "not_error")]
    store.set_note("run", "1", "gold says sport, text is about music")
    store.set_note("run", "1", "edited")
    assert store.notes("run").set_index("example_id").loc["1", "text"] == "edited"
    store.set_note("run", "1", "")
    assert store.notes("run").empty


def test_every_change_is_logged_and_the_log_is_append_only(store, tmp_path):
    store.create_error_type("A")
    store.assign("run", ["1"], "A")
    bob = store.with_user("bob")
    bob.set_flag("run", ["1"], "not_error")
    events = store.events()
    assert [(e.user, e.action) for e in events] == [("bob", "flag"), ("alice", "assign"), ("alice", "create_type")]
    assert store.version() == events[0].id
    con = sqlite3.connect(tmp_path / "labels.sqlite")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        con.execute("UPDATE events SET user = 'mallory'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        con.execute("DELETE FROM events")


def test_undo_reverts_the_users_last_change_each_time(store):
    store.create_error_type("A")
    store.assign("run", ["1", "2"], "A")
    store.set_note("run", "1", "hmm")
    store.with_user("bob").set_flag("run", ["2"], "label_wrong")  # bob's change is not alice's to undo
    assert "noted" in store.undo().summary
    assert store.notes("run").empty
    assert store.undo().changed == 2
    assert store.assignments("run").empty
    store.undo()
    assert store.error_types() == []
    with pytest.raises(UserError, match="nothing to undo"):
        store.undo()
    assert len(store.flags("run")) == 1  # bob's flag stays
    assert store.with_user("bob").undo().changed == 1
    undone = [e for e in store.events(limit=None) if e.action != "undo"]
    assert all(e.undone_by for e in undone)


def test_undo_delete_and_merge_restore_types_and_assignments(store):
    a = store.create_error_type("A", "first", "low")
    b = store.create_error_type("B")
    store.assign("run", ["1", "2"], "A")
    store.assign("run", ["3"], "B")
    store.merge_error_types(["A"], "B")
    assert store.counts("run") == {"B": 3}
    store.undo()
    assert store.counts("run") == {"A": 2, "B": 1}
    assert store.error_type(a.id).definition == "first"
    change = store.delete_error_type("B")
    assert change.changed == 1 and store.counts("run") == {"A": 2}
    store.undo()
    assert store.counts("run") == {"A": 2, "B": 1}
    assert store.error_type("B").id == b.id


def test_undo_refuses_when_someone_changed_the_rows_since(store):
    store.create_error_type("A")
    store.create_error_type("B")
    store.assign("run", ["1", "2"], "A")
    bob = store.with_user("bob")
    bob.assign("run", ["2"], "B")
    with pytest.raises(UserError, match=r"was changed since by event \d+ \(bob: assigned 1 example to 'B'\)"):
        store.undo()
    assert store.counts("run") == {"A": 1, "B": 1}  # nothing changed by the refused undo
    bob.undo()
    store.undo()
    assert store.assignments("run").empty


def test_undo_of_create_refuses_while_examples_use_the_type(store):
    store.create_error_type("A")
    bob = store.with_user("bob")
    bob.assign("run", ["1"], "A")
    with pytest.raises(UserError, match="still assigned"):
        store.undo()
    assert [t.name for t in store.error_types()] == ["A"]


def test_deleted_ids_are_never_reused(store):
    a = store.create_error_type("A")
    store.delete_error_type(a.id)
    b = store.create_error_type("B")
    assert b.id != a.id


def test_not_a_database_and_missing_database(tmp_path):
    bad = tmp_path / "labels.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(UserError, match="damaged or not a database"):
        LabelStore(bad)
    with pytest.raises(UserError, match="no labels database"):
        LabelStore(tmp_path / "missing.sqlite", create=False)


def test_other_schema_version_is_refused(tmp_path):
    path = tmp_path / "labels.sqlite"
    LabelStore(path)
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    with pytest.raises(UserError, match="schema_version 99 is not supported"):
        LabelStore(path)


def test_a_locked_database_is_waited_for(tmp_path):
    path = tmp_path / "labels.sqlite"
    store = LabelStore(path, user="alice", busy_timeout=5)
    store.create_error_type("A")
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock ...
    import threading

    timer = threading.Timer(0.5, lambda: holder.execute("COMMIT"))  # ... and lets go
    timer.start()
    assert store.assign("run", ["1"], "A").changed == 1
    timer.join()
    holder.close()


def test_a_lock_held_too_long_is_one_clear_error(tmp_path):
    path = tmp_path / "labels.sqlite"
    store = LabelStore(path, user="alice", busy_timeout=0.2, retries=1)
    store.create_error_type("A")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(UserError, match="stayed locked by another writer"):
            store.assign("run", ["1"], "A")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert store.assignments("run").empty


# -- two processes labeling the same workspace at once -------------------------------------------------------------

N_ACTIONS = 120


def _writer(path: str, user: str, barrier, results) -> None:
    store = LabelStore(path, user=user, busy_timeout=30)
    barrier.wait()
    mine = store.create_error_type(f"type of {user}")
    for i in range(N_ACTIONS):
        store.assign("run", [f"{user}-{i}"], mine.id)
        store.assign("run", [f"shared-{i}"], "shared")  # both write the same rows: last writer wins, both logged
        if i % 10 == 0:
            store.set_flag("run", [f"{user}-{i}"], "label_wrong")
            store.set_note("run", f"{user}-{i}", f"note by {user}")
    results.put(user)


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path = tmp_path / "labels.sqlite"
    LabelStore(path, user="setup").create_error_type("shared")
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(path), user, barrier, results)) for user in ("alice", "bob")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
        assert p.exitcode == 0
    assert sorted(results.get(timeout=5) for _ in procs) == ["alice", "bob"]

    store = LabelStore(path, user="checker")
    df = store.assignments("run").set_index("example_id")
    for user in ("alice", "bob"):
        mine = [f"{user}-{i}" for i in range(N_ACTIONS)]
        assert set(mine) <= set(df.index)
        assert set(df.loc[mine, "error_type"]) == {f"type of {user}"}
    assert {f"shared-{i}" for i in range(N_ACTIONS)} <= set(df.index)
    assert len(store.flags("run")) == 2 * (N_ACTIONS // 10)
    assert len(store.notes("run")) == 2 * (N_ACTIONS // 10)
    events = store.events(limit=None)
    per_user = {u: sum(1 for e in events if e.user == u) for u in ("alice", "bob")}
    # each writer: 1 type + N own assignments + flags + notes, and its shared assignments that changed something
    for user, n in per_user.items():
        assert n >= 1 + N_ACTIONS + 2 * (N_ACTIONS // 10)
    ids = [e.id for e in events]
    assert len(ids) == len(set(ids)) and store.integrity_check() == "ok"


def test_batched_reads_find_what_one_query_per_key_finds(store):
    """rows.fetch reads keys a few hundred at a time through a VALUES join; the independent computation is one
    SELECT per key, with SQLite's own type conversion (an id given as text finds the integer key)."""
    from erroranalysis.labels import rows

    store.create_error_type("A")
    store.create_error_type("B")
    ids = [f"ex{i}" for i in range(700)]
    store.assign("r", ids[::2], "A")
    store.set_flag("r", ids[:50], "label_wrong")
    keys = [{"run": "r", "example_id": ex} for ex in ids[::-1]] + [{"run": "r", "example_id": "ex4"}] * 3 + \
        [{"run": "other", "example_id": "ex0"}]  # > KEYS_PER_QUERY, reversed, a key thrice, a miss
    con = sqlite3.connect(store.path)
    con.row_factory = sqlite3.Row

    def one_by_one(table, keys):
        key_cols, cols = rows.TABLES[table]
        sql = f"SELECT {', '.join(cols)} FROM {table} WHERE " + " AND ".join(f"{k} = ?" for k in key_cols)
        return [dict(r) if (r := con.execute(sql, [k[c] for c in key_cols]).fetchone()) else None for k in keys]

    assert len(keys) > 3 * rows.KEYS_PER_QUERY
    assert rows.fetch(con, "assignments", keys) == one_by_one("assignments", keys)
    flag_keys = [{"run": "r", "example_id": ex, "flag": "label_wrong"} for ex in ids[40:60]]
    assert rows.fetch(con, "flags", flag_keys) == one_by_one("flags", flag_keys)
    type_keys = [{"id": 1}, {"id": "2"}, {"id": 2.0}, {"id": 99}]
    got = rows.fetch(con, "error_types", type_keys)
    assert got == one_by_one("error_types", type_keys) and [t and t["name"] for t in got] == ["A", "B", "B", None]
    first = rows.fetch(con, "assignments", keys[-4:-2])
    assert first[0] == first[1] and first[0] is not first[1]  # a key asked twice: two rows, not one shared

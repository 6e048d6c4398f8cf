"""Many changes in one transaction and one event: the batch API, apply-taxonomy's suggestions (all stored or none),
the compact event payloads of bulk changes, and archiving old events without losing any."""

from __future__ import annotations

import json
import random
import sqlite3

import pytest
from test_taxonomy_apply import world  # noqa: F401  (fixture: two runs of one eval set and a labeled taxonomy)
from typer.testing import CliRunner

from erroranalysis import stages
from erroranalysis.cli.app import app
from erroranalysis.core.errors import UserError
from erroranalysis.labels import LabelStore, eventlog
from erroranalysis.labels.archive import read_archive
from erroranalysis.labels.eventlog import TABLES


@pytest.fixture()
def store(tmp_path):
    s = LabelStore(tmp_path / "labels.sqlite", user="alice")
    s.create_error_type("A")
    s.create_error_type("B")
    return s


def test_a_batch_is_one_event_and_one_undo(store):
    before = store.version()
    with store.batch("relabel after review", run="run") as b:
        b.assign("run", ["1", "2", "3"], "A")
        b.assign("run", ["3"], "B")
        b.set_flag("run", ["4"], "label_wrong")
        b.create_error_type("C", parent="A")
        assert len(b.assignments("run")) == 3  # reads inside the batch see its changes ...
        assert store.assignments("run").empty   # ... others see them once it ends
    events = store.events(limit=None)
    assert store.version() == before + 1 and events[0].summary == "relabel after review"
    assert b.change.event_id == events[0].id and b.change.changed == 5  # rows changed, each counted once
    assert store.counts("run") == {"A": 2, "B": 1, "C": 0}
    store.undo()
    assert store.assignments("run").empty and store.flags("run").empty
    assert [t.name for t in store.error_types()] == ["A", "B"]


def test_a_failing_batch_stores_nothing(store):
    before = store.version()
    with pytest.raises(UserError, match="no error type 'Nope'"):
        with store.batch() as b:
            b.assign("run", ["1", "2"], "A")
            b.set_note("run", "1", "half way")
            b.assign("run", ["3"], "Nope")
    assert store.version() == before and store.assignments().empty and store.notes().empty


def test_an_empty_batch_logs_nothing_and_batches_nest(store):
    with store.batch() as b:
        b.assign("run", [], "A")
    assert b.change.event_id is None and store.events(limit=1)[0].action == "create_type"
    with store.batch(action="outer") as b:
        b.assign("run", ["1"], "A")
        with b.batch(action="inner") as inner:
            inner.assign("run", ["2"], "B")
    (event,) = store.events(limit=1)
    assert event.action == "outer" and "assigned 1 example to 'A'; assigned 1 example to 'B'" == event.summary


# -- apply-taxonomy ---------------------------------------------------------------------------------------------


def test_apply_taxonomy_stores_its_suggestions_as_one_event_of_the_suggestion_writer(world):  # noqa: F811
    db = world["tmp"] / "other" / "labels.sqlite"
    result = stages.apply_taxonomy(world["taxonomy"], world["b"], labels_db=db, user="bob")
    store = LabelStore(db)
    (event,) = store.events(limit=None, with_payload=True)
    assert (event.action, event.user, event.writer) == ("apply_taxonomy", "bob", "suggestion")
    assert f"{result.n_suggested} suggestions stored" in event.summary and "4 error types created" in event.summary
    tables = [ch["table"] for ch in event.payload["changes"]]
    assert tables.count("assignments") == result.n_suggested and tables.count("error_types") == 4
    store.undo(event.id)  # one undo takes the whole application back
    assert store.assignments().empty and store.error_types() == []


def test_apply_taxonomy_failing_midway_stores_no_suggestion(world, monkeypatch):  # noqa: F811
    db = world["tmp"] / "other" / "labels.sqlite"
    calls = []
    real = LabelStore.assign

    def assign_then_fail(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("the machine went away")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(LabelStore, "assign", assign_then_fail)
    with pytest.raises(OSError):
        stages.apply_taxonomy(world["taxonomy"], world["b"], labels_db=db)
    monkeypatch.undo()
    store = LabelStore(db)
    assert len(calls) == 2  # the first type's suggestions were written in the transaction, then rolled back
    assert store.assignments().empty and store.error_types() == [] and store.events() == []


# -- compact payloads -------------------------------------------------------------------------------------------


def _legacy_bytes(changes: list[dict]) -> int:
    """What schema 1 stored for these changes: one JSON document with every row spelled out."""
    return len(json.dumps({"changes": changes}, separators=(",", ":")))


def test_a_bulk_assignment_is_stored_compactly_and_undoes_exactly(store, tmp_path):
    ids = [f"ex{i:06d}" for i in range(20_000)]
    store.assign("experiments/run-a", ids, "A", cluster_ids={e: i % 40 for i, e in enumerate(ids)})
    con = sqlite3.connect(store.path)
    stored = con.execute("SELECT LENGTH(payload) FROM events WHERE action = 'assign'").fetchone()[0]
    (event,) = [e for e in store.events(with_payload=True) if e.action == "assign"]
    legacy = _legacy_bytes(event.payload["changes"])
    print(f"event payload per assigned row: {stored / len(ids):.1f} B (schema 1: {legacy / len(ids):.1f} B)")
    assert legacy / len(ids) > 200 and stored / len(ids) < 10
    assert event.n_changes == len(ids) and event.payload["changes"][7]["after"]["cluster_id"] == 7
    store.assign("experiments/run-a", ids[:5], "B")
    store.undo()
    store.undo()
    assert store.assignments().empty


def test_payloads_round_trip_whatever_the_rows():
    rng = random.Random(3)
    values = [None, 0, 1, -5, 2**40, "", "x", "Zoë", "a\u0308", True, False, 1.5]
    for _ in range(200):
        changes = []
        for _ in range(rng.randint(0, 30)):
            table = rng.choice(list(TABLES))
            cols = TABLES[table][1]
            rows = [None if rng.random() < 0.3 else {c: rng.choice(values) for c in cols} for _ in range(2)]
            changes.append({"table": table, "before": rows[0], "after": rows[1]})
        decoded = eventlog.decode(eventlog.encode(changes))["changes"]
        assert decoded == changes and [type(v) for ch in decoded for r in (ch["before"], ch["after"]) if r
                                       for v in r.values()] == [type(v) for ch in changes
                                                                for r in (ch["before"], ch["after"]) if r
                                                                for v in r.values()]


# -- archive ----------------------------------------------------------------------------------------------------


def test_archive_moves_old_events_to_a_file_and_undo_still_works_for_those_kept(store, tmp_path):
    for i in range(20):
        store.assign("run", [f"ex{i}"], "A" if i % 2 else "B")
    store.with_user("bob").set_note("run", "ex3", "old note")
    store.with_user("bob").undo()  # bob's note and its undo: an undone pair
    for i in range(5):
        store.set_flag("run", [f"ex{i}"], "label_wrong")
    originals = {e.id: e for e in store.events(limit=None, with_payload=True)}
    version = store.version()
    result = store.archive(keep=5)
    assert result.moved == len(originals) - 5 and result.archive == tmp_path / "labels-archive.sqlite"
    kept = store.events(limit=None)
    assert [e.action for e in kept] == ["archive"] + ["flag"] * 5 and store.version() == version + 1
    archived = {e.id: e for e in read_archive(result.archive, with_payload=True)}
    assert set(archived) | {e.id for e in kept} == set(originals) | {result.event_id}
    for event_id, event in archived.items():
        assert event.payload == originals[event_id].payload and event.summary == originals[event_id].summary
    assert store.undo().summary == "undid: flagged 1 example as 'label is wrong'"
    with pytest.raises(UserError, match="archived events cannot be undone"):
        store.undo(min(archived))
    con = sqlite3.connect(store.path)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        con.execute("DELETE FROM events")
    assert store.counts("run") == {"A": 10, "B": 10}  # archiving moves history, never labels


def test_an_event_undone_by_a_kept_event_stays_with_it(store):
    store.assign("run", ["1"], "A")
    store.assign("run", ["2"], "A")
    target = store.events(limit=1)[0].id
    store.assign("run", ["3"], "B")
    store.undo(target)
    result = store.archive(keep=1)
    remaining = {e.id for e in store.events(limit=None)}
    assert remaining == {target, target + 2, result.event_id} and result.moved == 4  # all but the undone pair


def test_cli_archive_before_a_date_and_log_reads_it_back(store, tmp_path):
    db = str(store.path)
    result = CliRunner().invoke(app, ["labels", "archive", "--labels-db", db, "--before", "2999-01-01"])
    assert result.exit_code == 0 and "moved 1 events" in result.output  # the newest event always stays
    result = CliRunner().invoke(app, ["labels", "log", "--archive", str(tmp_path / "labels-archive.sqlite")])
    assert result.exit_code == 0 and "created error type 'A'" in result.output
    result = CliRunner().invoke(app, ["labels", "archive", "--labels-db", db, "--before", "yesterday"])
    assert result.exit_code == 2 and "--before 'yesterday' is invalid" in result.output
    result = CliRunner().invoke(app, ["labels", "archive", "--labels-db", db])
    assert result.exit_code == 2 and "exactly one of --before" in result.output


def test_undo_and_archive_are_not_part_of_a_batch(store):
    store.assign("run", ["1"], "A")
    with pytest.raises(UserError, match="undo cannot be part of a batch"):
        with store.batch() as b:
            b.set_flag("run", ["1"], "not_error")
            b.undo()
    with pytest.raises(UserError, match="archive cannot be part of a batch"):
        with store.batch() as b:
            b.archive(keep=1)
    assert store.flags().empty and store.events(limit=1)[0].action == "assign"


def test_archive_refuses_another_workspaces_store_and_another_databases_archive(store, tmp_path):
    other = LabelStore(tmp_path / "other" / "labels.sqlite", user="bob")
    other.create_error_type("Theirs")
    store.assign("run", ["1"], "A")
    mine_before, theirs_before = len(store.events(limit=None)), other.events(limit=None)
    result = CliRunner().invoke(app, ["labels", "archive", "--labels-db", str(store.path), "--keep", "1", "--to",
                                      str(other.path)])
    assert result.exit_code == 2, result.output
    assert "is a labels database (another workspace's store), not an archive" in result.output
    assert len(store.events(limit=None)) == mine_before and other.events(limit=None) == theirs_before
    other.undo()  # their log still works
    foreign = tmp_path / "their-archive.sqlite"
    other.create_error_type("More")
    other.archive(keep=1, to=foreign)
    with pytest.raises(UserError, match="is the archive of .*other.*labels.sqlite, not of"):
        store.archive(keep=1, to=foreign)
    assert store.archive(keep=1).moved == mine_before - 1  # its own archive beside it is fine

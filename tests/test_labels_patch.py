"""The app's example table after a labeling change: patched from the events since (stages.patch_labels) it must be
the table a full rebuild (stages.example_table) gives, for every kind of change, and refuse when it cannot be."""

from __future__ import annotations

import pandas as pd
import pytest
from ui_fixtures import make_run

from erroranalysis import stages
from erroranalysis.labels import LabelStore
from erroranalysis.rundir import Run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("ws")
    make_run(root / "news", n=400, n_failures=120)
    return Run.open(root / "news")


@pytest.fixture()
def store(run, tmp_path):
    s = LabelStore(tmp_path / "labels.sqlite", user="alice")
    s.create_error_type("Vocabulary overlap", "", "high")
    s.create_error_type("Sarcasm", "", "low")
    return s


def failures(run) -> list[str]:
    table = stages.base_table(run)
    return table.loc[~table["correct"], "example_id"].tolist()


def patched_equals_rebuilt(run, store, change) -> pd.DataFrame:
    """Apply `change(store, key)`; the table patched from before it must equal the table rebuilt after it."""
    key = store.run_key(run.path)
    before, since = stages.example_table(run, store), store.version()
    change(store, key)
    patched = stages.patch_labels(before, store, key, since, store.version())
    assert patched is not None
    rebuilt = stages.example_table(run, store)
    pd.testing.assert_frame_equal(patched, rebuilt)
    return patched


def test_assign_reassign_unassign_flags_notes_and_undo_patch_to_the_rebuilt_table(run, store):
    ids = failures(run)
    a, b = ids[:40], ids[30:70]

    def many_changes(s: LabelStore, key: str) -> None:
        s.assign(key, a, "Vocabulary overlap", cluster_ids={i: 3 for i in a})
        s.assign(key, b, "Sarcasm")  # 10 of them reassigned, cluster ids kept
        s.set_status(key, b[:5], "rejected")
        s.unassign(key, a[:7])
        s.set_flag(key, ids[80:90], "label_wrong")
        s.set_flag(key, ids[85:95], "not_error")
        s.set_flag(key, ids[80:83], "label_wrong", False)
        s.set_note(key, ids[100], "reads as sports")
        s.set_note(key, ids[101], "two labels fit")
        s.set_note(key, ids[101], "")
        s.undo()  # the last note change comes back
        s.assign("other/run", ids[:50], "Sarcasm")  # another run's labels: not this table's

    table = patched_equals_rebuilt(run, store, many_changes)
    assert (table["error_type_id"] >= 0).sum() == 63  # 40 + 40 - 10 shared - 7 unassigned
    assert table.set_index("example_id").at[ids[101], "note"] == "two labels fit"


def test_a_patch_on_a_patch_stays_the_rebuilt_table(run, store):
    ids = failures(run)
    key = store.run_key(run.path)
    table, version = stages.example_table(run, store), store.version()
    for i in range(4):  # the app's rhythm: one change, one patch
        store.assign(key, ids[i * 10:(i + 2) * 10], ["Sarcasm", "Vocabulary overlap"][i % 2])
        table = stages.patch_labels(table, store, key, version, store.version())
        version = store.version()
    pd.testing.assert_frame_equal(table, stages.example_table(run, store))


def test_no_change_to_this_run_returns_the_same_table(run, store):
    key = store.run_key(run.path)
    table, since = stages.example_table(run, store), store.version()
    store.assign("other/run", ["x1", "x2"], "Sarcasm")
    assert stages.patch_labels(table, store, key, since, store.version()) is table


def test_an_error_type_change_or_an_archive_asks_for_a_rebuild(run, store, tmp_path):
    ids = failures(run)
    key = store.run_key(run.path)
    store.assign(key, ids[:20], "Sarcasm")
    table, since = stages.example_table(run, store), store.version()
    store.update_error_type("Sarcasm", name="Irony")  # the name of 20 rows changes
    assert stages.patch_labels(table, store, key, since, store.version()) is None

    table, since = stages.example_table(run, store), store.version()
    store.assign(key, ids[20:30], "Irony")
    store.assign(key, ids[30:40], "Irony")
    store.archive(keep=1, to=tmp_path / "archive.sqlite")  # all but the newest: the first assignment moves out
    assert stages.patch_labels(table, store, key, since, store.version()) is None


def test_too_many_changed_rows_ask_for_a_rebuild(run, store):
    ids = failures(run)
    key = store.run_key(run.path)
    table, since = stages.example_table(run, store), store.version()
    store.assign(key, ids[:50], "Sarcasm")
    assert stages.patch_labels(table, store, key, since, store.version(), max_rows=49) is None


def test_top_rows_is_the_filtered_sorted_head_of_the_table(run):
    """The Label page's rows taken by position (tables.top_rows) are what filtering the table, searching it and
    sorting it by confidence (missing last) would show."""
    import numpy as np

    from erroranalysis_ui.eaui import tables

    table = stages.base_table(run)
    table.loc[table.index[::17], "confidence"] = np.nan  # missing confidences go last
    pick = ~table["correct"].to_numpy(bool)
    for query in ("", "the", "EX0001"):
        shown, matching = tables.top_rows(table, pick, query, limit=25)
        expected = tables.search(table[pick], query).sort_values("confidence", ascending=False, kind="stable",
                                                                 na_position="last")
        assert sorted(table["example_id"].iloc[matching]) == sorted(expected["example_id"])
        pd.testing.assert_frame_equal(shown, expected.head(25))


def test_a_restored_backup_or_a_type_changed_after_the_window_asks_for_a_rebuild(run, store, tmp_path):
    from erroranalysis.labels import backup

    ids = failures(run)
    key = store.run_key(run.path)
    copy = store.backup(tmp_path / "copy.sqlite")  # no assignments yet
    store.assign(key, ids[:10], "Sarcasm")
    table, since = stages.example_table(run, store), store.version()
    backup.restore(copy, store.path)  # every row replaced, one event that records none
    restored = LabelStore(store.path, user="alice")
    assert stages.patch_labels(table, restored, key, since, restored.version()) is None

    table, since = stages.example_table(run, restored), restored.version()
    restored.assign(key, ids[:5], "Sarcasm")
    until = restored.version()
    restored.update_error_type("Sarcasm", name="Irony")  # after `until`: the names read now would be newer
    assert stages.patch_labels(table, restored, key, since, until) is None


def test_a_copy_restored_after_the_window_asks_for_a_rebuild(run, store, tmp_path):
    """A teammate's copy with more events, restored between the app's version read and its patch: the ids up to
    `until` are contiguous again but are the copy's events."""
    from erroranalysis.labels import backup

    ids = failures(run)
    key = store.run_key(run.path)
    mate = LabelStore(store.backup(tmp_path / "teammate.sqlite"), user="bob")
    for ex in ids[20:25]:
        mate.assign(key, [ex], "Vocabulary overlap")
    table, since = stages.example_table(run, store), store.version()
    store.assign(key, ids[:1], "Sarcasm")
    until = store.version()
    backup.restore(mate.path, store.path)
    assert LabelStore(store.path, user="alice").version() > until
    assert stages.patch_labels(table, LabelStore(store.path, user="alice"), key, since, until) is None


def test_a_run_key_is_compared_as_the_store_keeps_it(tmp_path):
    root = tmp_path / "ws"
    make_run(root / "news ", n=120, n_failures=40)  # a folder name with a trailing space
    run = Run.open(root / "news ")
    store = LabelStore(tmp_path / "labels.sqlite", user="alice")
    store.create_error_type("Sarcasm")
    key = store.run_key(run.path)
    table, since = stages.example_table(run, store), store.version()
    store.assign(key, failures(run)[:5], "Sarcasm")
    patched = stages.patch_labels(table, store, key, since, store.version())
    pd.testing.assert_frame_equal(patched, stages.example_table(run, store))


def test_the_shared_newest_table_never_goes_back_a_version():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ui"))
    from erroranalysis_ui.eaui.labeled import _Newest

    newest = _Newest()
    newest.offer(5, "table at 5")
    newest.offer(3, "table at 3")  # a slower session, done later
    assert newest.latest == (5, "table at 5")
    newest.offer(7, "table at 7")
    assert newest.latest == (7, "table at 7")


def test_columnar_payloads_give_the_last_state_of_each_row_of_the_run():
    """eventlog.changed_rows over stored groups (the compact form and schema 1's JSON rows) against the last state of
    each key taken from the change dicts one by one."""
    import json

    from erroranalysis.labels import eventlog

    def assignment(ex, t, run="r", cluster=None):
        return {"run": run, "example_id": ex, "error_type_id": t, "source": "human", "status": "accepted",
                "cluster_id": cluster, "updated": "2026-12-01T00:00:00", "updated_by": "alice"}

    def flag(ex, name):
        return {"run": "r", "example_id": ex, "flag": name, "created": "now", "created_by": "bob"}

    changes = [{"table": "assignments", "before": None, "after": assignment(f"e{i}", 1, cluster=i % 3 or None)}
               for i in range(6)]
    changes += [{"table": "assignments", "before": assignment("e1", 1), "after": assignment("e1", 2)},
                {"table": "assignments", "before": assignment("e2", 1), "after": None},
                {"table": "assignments", "before": None, "after": assignment("e1", 9, run="other")},
                {"table": "flags", "before": None, "after": flag("e3", "label_wrong")},
                {"table": "flags", "before": None, "after": flag("e3", "not_error")},
                {"table": "flags", "before": flag("e3", "label_wrong"), "after": None},
                {"table": "notes", "before": None, "after": {"run": "r", "example_id": "e4", "text": "two, labels",
                                                             "updated": "now", "updated_by": "bob"}}]
    expected: dict = {}
    for ch in changes:
        row = ch["after"] if ch["after"] is not None else ch["before"]
        if row["run"] == "r":
            key = tuple(row[k] for k in eventlog.TABLES[ch["table"]][0])
            expected.setdefault(ch["table"], {}).pop(key, None)
            expected[ch["table"]][key] = ch["after"]  # re-inserted: the last change's place, as drop_duplicates
    for stored in (eventlog.encode(changes), json.dumps({"changes": changes})):
        got = eventlog.changed_rows(eventlog.decode(stored, columns=True)["groups"], "r")
        assert set(got) == set(expected)
        for table, rows in got.items():
            keys = eventlog.TABLES[table][0]
            want = expected[table]
            assert [tuple(r) for r in rows[list(keys)].itertuples(index=False)] == list(want)
            for r, after in zip(rows.to_dict("records"), want.values()):
                assert r["present"] == (after is not None)
                if after is not None:
                    assert {c: r[c] for c in after} == after

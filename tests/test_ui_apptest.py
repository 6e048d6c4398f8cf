"""The app without a browser (streamlit.testing.v1.AppTest): every page, every labeling flow, bad runs, safety."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from app_session import app_env, go, open_app, texts
from streamlit.testing.v1 import AppTest
from ui_fixtures import label_key, make_workspace

from erroranalysis import stages
from erroranalysis.labels import LabelStore, taxonomy
from erroranalysis.rundir import Run, readers
from erroranalysis_ui.eaui import charts, data, labeled, state

UI = Path(__file__).resolve().parent.parent / "ui"


TITLES = {"runs": "Runs", "overview": "Overview", "confusion": "Confusion matrix", "clusters": "Clusters",
          "slices": "Slices", "compare": "Compare", "label": "Label", "taxonomy": "Taxonomy",
          "review": "Review suggestions", "training": "Training", "data_checks": "Data checks",
          "training_data": "Training data"}
PAGES = list(TITLES)
READS_PREDICTIONS = ["overview", "confusion", "clusters", "slices", "label", "taxonomy", "review", "data_checks"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return make_workspace(tmp_path_factory.mktemp("ws"))


@pytest.fixture()
def db(tmp_path):
    return tmp_path / "labels.sqlite"


@pytest.fixture()
def start(workspace, db, monkeypatch):
    """start(run=..., user=...) -> an AppTest that has rendered the Runs page."""
    def _start(run: str | None = "news-a", user: str = "tester") -> AppTest:
        app_env(monkeypatch, workspace, db, user=user)
        return open_app(run=run)

    return _start


def button(at: AppTest, prefix: str):
    found = [b for b in list(at.button) + list(at.get("form_submit_button")) if b.label.startswith(prefix)]
    assert found, f"no button starting with {prefix!r}: {[b.label for b in at.button]}"
    return found[0]


# -- every page ---------------------------------------------------------------------------------------------------


def test_runs_page_lists_every_run_and_the_manifest(start, workspace):
    at = start()
    assert at.title[0].value == "Runs"
    table = at.dataframe[0].value
    assert list(table["run"]) == ["broken", "news-a", "news-b"]
    assert table.set_index("run").loc["broken", "status"].startswith("⚠")
    assert table.set_index("run").loc["news-a", "status"] == "✓ ok"
    assert at.subheader[0].value == "news-a"
    assert [m.label for m in at.metric] == ["Examples", "Accuracy", "Failures", "Labeled"]
    assert at.metric[0].value == "400"
    assert "Predictions loaded with `analyze` (no checkpoint)." in texts(at)
    assert str(Run.open(workspace / "news-a").manifest["data"]["path"]) in texts(at)


def test_picking_a_run_in_the_table_opens_it(start):
    at = start()
    at.session_state[state.RUNS_TABLE] = {"selection": {"rows": [2], "columns": [], "cells": []}}
    at.run()
    assert at.session_state[state.RUN] == "news-b"
    assert at.subheader[0].value == "news-b"


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_a_good_run(start, page):
    at = go(start(), page)
    assert at.title[0].value == TITLES[page]
    assert not at.error, [e.value for e in at.error]


@pytest.mark.parametrize("page", READS_PREDICTIONS)
def test_a_broken_run_shows_a_message_not_a_traceback(start, page):
    at = go(start(run="broken"), page)
    assert not at.exception
    assert at.error, f"{page}: no message for a broken run"
    assert "damaged or replaced since" in at.error[0].value and "broken" in at.error[0].value


def test_other_runs_still_work_after_a_broken_one(start):
    at = go(start(run="broken"), "overview")
    assert at.error
    at.session_state[state.RUN] = "news-a"
    at.run()
    assert not at.error and at.metric[0].label == "Accuracy"


def test_a_run_without_clusters(start):
    at = go(start(run="news-b"), "clusters")
    assert "has no clusters yet" in at.info[0].value
    at = go(at, "label")
    assert at.session_state[state.LABEL_SOURCE] == "Unlabeled failures"
    assert not at.error


def test_no_runs_folder_and_no_runs(tmp_path, monkeypatch):
    app_env(monkeypatch, tmp_path / "empty", tmp_path / "labels.sqlite")
    (tmp_path / "empty").mkdir()
    at = open_app()
    assert "No runs here yet" in at.info[0].value
    at = go(at, "overview")
    assert "Pick a run" in at.info[0].value


# -- overview -------------------------------------------------------------------------------------------------------


def test_overview_metrics_tables_and_slices(start, workspace):
    at = go(start(), "overview")
    labels = [m.label for m in at.metric]
    assert labels == ["Accuracy", "Macro F1", "Failures", "ECE", "Brier"]
    assert at.metric[0].value == "80.0%"
    per_class = at.dataframe[0].value
    assert list(per_class["f1"]) == sorted(per_class["f1"])  # worst first
    assert "95% CI" in texts(at)
    slices = at.dataframe[2].value
    assert list(slices["error_rate"]) == sorted(slices["error_rate"], reverse=True)
    by_metadata = Run.open(workspace / "news-a").metrics()["by_metadata"]
    assert list(by_metadata) == ["source", "text_length"]
    worst = max(by_metadata["source"], key=lambda r: r["error_rate"])
    assert worst["value"] == "forum" and slices["slice"].iloc[0] == "forum"  # planted: forum posts fail more
    at.segmented_control(key=state.SLICE_COLUMN).set_value("text_length").run()
    shown = at.dataframe[2].value
    assert sorted(shown["slice"]) == sorted(r["value"] for r in by_metadata["text_length"])
    assert list(shown["error_rate"]) == sorted(shown["error_rate"], reverse=True)


# -- confusion matrix ---------------------------------------------------------------------------------------------


def test_confusion_cell_lists_its_examples(start, workspace):
    at = go(start(), "confusion")
    metrics = Run.open(workspace / "news-a").metrics()
    labels, matrix = metrics["confusion"]["labels"], metrics["confusion"]["matrix"]
    pick = (labels[2], labels[1])
    at.selectbox(key=state.CM_PAIR).set_value(state.pair_key(*pick)).run()
    assert at.subheader[0].value == f"{pick[0]} → {pick[1]}"
    rows = at.dataframe[0].value
    assert len(rows) == matrix[2][1]
    at.segmented_control(key=state.CM_MODE).set_value("Normalized").run()
    assert not at.exception


def test_confusion_click_selects_the_pair():
    fig = charts.confusion_figure(["a", "b"], [[3, 1], [2, 4]], selected=("b", "a"))
    cells = fig.data[2]
    assert list(cells.selectedpoints) == [2]
    event = {"selection": {"points": [{"customdata": list(cells.customdata[1])}]}}
    assert charts.pair_from_selection(event) == ("a", "b")
    assert charts.pair_from_selection({"selection": {"points": []}}) is None


def test_label_these_examples_goes_to_the_label_page(start):
    at = go(start(), "confusion")
    pair = at.session_state[state.CM_PAIR]
    button(at, "Label these").click().run()
    assert at.session_state[state.LABEL_SOURCE] == "Confusion"
    assert at.session_state[state.LABEL_PAIR] == pair
    assert at.title[0].value == "Label"


# -- clusters -----------------------------------------------------------------------------------------------------


def test_clusters_page_map_list_and_detail(start, workspace):
    at = go(start(), "clusters")
    summary = at.dataframe[0].value
    assert list(summary["size"]) == sorted(summary["size"], reverse=True)
    first = int(summary["cluster_id"].iloc[0])
    assert at.session_state[state.CLUSTER] == first
    other = int(summary["cluster_id"].iloc[-1])
    at.selectbox(key=state.CLUSTER).set_value(other).run()
    clusters = readers.read_clusters(Run.open(workspace / "news-a")).set_index("cluster_id")
    assert at.subheader[1].value == clusters.loc[other, "name"]
    examples = at.dataframe[-1].value
    assert len(examples) == clusters.loc[other, "size"]
    at.text_input(key=state.CLUSTER_SEARCH).set_value(examples["example_id"].iloc[0]).run()
    assert len(at.dataframe[-1].value) == 1


def test_a_slice_cluster_says_which_slice_defines_it(start, workspace):
    """Forum posts fail more often across every confusion pair (planted), so the embedding scatters their failures
    and the cluster stage makes the error slice a cluster of its own."""
    clusters = readers.read_clusters(Run.open(workspace / "news-a"))
    made = clusters[clusters["slice"].notna()]
    assert list(made["slice"]) == ['source == "forum"']
    at = go(start(), "clusters")
    at.selectbox(key=state.CLUSTER).set_value(int(made["cluster_id"].iloc[0])).run()
    said = [c.value for c in at.caption if c.value.startswith("Defined by the error slice")]
    assert len(said) == 1 and "forum" in said[0]
    other = clusters[clusters["slice"].isna()]
    at.selectbox(key=state.CLUSTER).set_value(int(other["cluster_id"].iloc[0])).run()
    assert not [c.value for c in at.caption if c.value.startswith("Defined by the error slice")]


def test_cluster_list_selection_opens_the_cluster(start):
    at = go(start(), "clusters")
    summary = at.dataframe[0].value
    at.session_state[state.CLUSTER_LIST] = {"selection": {"rows": [2], "columns": [], "cells": []}}
    at.run()
    assert at.session_state[state.CLUSTER] == int(summary["cluster_id"].iloc[2])


def test_map_figure_is_webgl_and_selection_gives_ids(workspace):
    table = stages.base_table(Run.open(workspace / "news-a"))
    failing = table[~table["correct"]]
    fig = charts.cluster_map(failing, {0: "zero <b>"}, highlight=0)
    assert {t.type for t in fig.data} == {"scattergl"}
    assert sum(len(t.x) for t in fig.data) == len(failing)
    names = [t.name for t in fig.data]
    assert any("&lt;b&gt;" in n for n in names)  # user text is inert in hover and legend
    hovers = [h for t in fig.data for h in t.text]
    assert all("zero <b>" not in h for h in hovers) and any("zero &lt;b&gt;" in h for h in hovers)
    event = {"selection": {"points": [{"customdata": fig.data[0].customdata[0]},
                                      {"customdata": fig.data[0].customdata[1]}]}}
    assert charts.ids_from_selection(event) == [str(fig.data[0].customdata[0]), str(fig.data[0].customdata[1])]


# -- labeling flows -----------------------------------------------------------------------------------------------


def create_type(at: AppTest, name: str, definition: str = "", severity: str = "medium") -> AppTest:
    at.text_input(key=state.NEW_TYPE_NAME).set_value(name)
    at.text_area(key=state.NEW_TYPE_DEFINITION).set_value(definition)
    at.segmented_control(key=state.NEW_TYPE_SEVERITY).set_value(severity)
    button(at, "Create error type").click().run()
    assert not at.exception
    return at


def select_rows(at: AppTest, rows: list[int]) -> AppTest:
    nonce = at.session_state[state.LABEL_NONCE] if state.LABEL_NONCE in at.session_state else 0
    at.session_state[f"{state.LABEL_TABLE}_{nonce}"] = {"selection": {"rows": rows, "columns": [], "cells": []}}
    return at.run()


def test_create_type_and_assign_a_whole_cluster(start, db, workspace):
    at = go(start(), "label")
    create_type(at, "Vocabulary overlap", "Another class's words dominate", "high")
    assert "Created error type “Vocabulary overlap”" in texts(at)
    store = LabelStore(db, create=False)
    assert [t.name for t in store.error_types()] == ["Vocabulary overlap"]
    assert store.error_types()[0].severity == "high"
    cid = at.session_state[state.LABEL_CLUSTER]
    shown = at.dataframe[0].value
    button(at, "Assign whole cluster").click().run()
    assigned = store.assignments(label_key(workspace / "news-a"))
    assert len(assigned) == len(shown) and set(assigned["error_type"]) == {"Vocabulary overlap"}
    assert set(assigned["cluster_id"]) == {cid}
    assert set(assigned["updated_by"]) == {"tester"}
    assert f"Assigned cluster #{cid}" in texts(at)


def test_assign_all_matching_takes_every_row_not_only_those_shown(start, db, workspace, monkeypatch):
    """A table cut to its first rows says so, and "Assign all N matching" assigns all N (with their clusters)."""
    from erroranalysis_ui.eaui import tables

    base = stages.base_table(Run.open(workspace / "news-a"))
    failed = base.loc[~base["correct"], ["example_id", "cluster_id"]]
    monkeypatch.setattr(tables, "MAX_ROWS", 10)
    at = go(start(), "label")
    create_type(at, "A")
    at.segmented_control(key=state.LABEL_SOURCE).set_value("All failures").run()
    assert len(at.dataframe[0].value) == 10
    assert f"Showing the first 10 of {len(failed):,} rows" in texts(at)
    button(at, f"Assign all {len(failed):,} matching").click().run()
    assigned = LabelStore(db, create=False).assignments(label_key(workspace / "news-a")).set_index("example_id")
    assert sorted(assigned.index) == sorted(failed["example_id"]) and set(assigned["error_type"]) == {"A"}
    got = assigned.loc[failed["example_id"], "cluster_id"]
    assert [None if pd.isna(c) else int(c) for c in got] == [c if c >= 0 else None for c in failed["cluster_id"]]


def test_assign_selected_flags_notes_split_and_undo(start, db, workspace):
    at = go(start(), "label")
    create_type(at, "A")
    create_type(at, "B")
    store = LabelStore(db, create=False)
    at.segmented_control(key=state.LABEL_SOURCE).set_value("All failures").run()
    ids = list(at.dataframe[0].value["example_id"])
    select_rows(at, [0, 1, 2])
    at.selectbox(key=state.LABEL_TARGET).set_value(store.error_type("A").id)
    button(at, "Assign 3 selected").click().run()
    assert sorted(store.assignments(label_key(workspace / "news-a"))["example_id"]) == sorted(ids[:3])

    select_rows(at, [3])
    button(at, "Label is wrong").click().run()
    select_rows(at, [4])
    button(at, "Not an error").click().run()
    flags = store.flags(label_key(workspace / "news-a")).set_index("example_id")["flag"].to_dict()
    assert flags == {ids[3]: "label_wrong", ids[4]: "not_error"}

    select_rows(at, [5])
    at.text_area(key=state.LABEL_NOTE).set_value("the gold label looks right; the text is ambiguous")
    button(at, "Save note").click().run()
    notes = store.notes(label_key(workspace / "news-a")).set_index("example_id")
    assert notes.loc[ids[5], "text"].startswith("the gold label")

    # Split: from error type A, move one example out.
    at.segmented_control(key=state.LABEL_SOURCE).set_value("Error type").run()
    at.selectbox(key=state.LABEL_FROM_TYPE).set_value(store.error_type("A").id).run()
    in_a = list(at.dataframe[0].value["example_id"])
    select_rows(at, [0])
    button(at, "Move out of error type").click().run()
    key = label_key(workspace / "news-a")
    assert sorted(store.assignments(key)["example_id"]) == sorted(set(ids[:3]) - {in_a[0]})

    # Undo walks back: the split, then the note.
    button(at, "Undo").click().run()
    assert sorted(store.assignments(label_key(workspace / "news-a"))["example_id"]) == sorted(ids[:3])
    button(at, "Undo").click().run()
    assert store.notes(label_key(workspace / "news-a")).empty
    history = [e.summary for e in store.events(limit=None)]
    assert any(s.startswith("undid: moved 1 examples") for s in history)


def test_merge_clusters_into_one_error_type(start, db, workspace):
    at = go(start(), "label")
    create_type(at, "Merged")
    store = LabelStore(db, create=False)
    summary = labeled.cluster_summary(Path(at.session_state[state.CONFIG].runs_root) / "news-a",
                                   store)
    picked = [int(c) for c in summary["cluster_id"].iloc[:2]]
    at.multiselect(key=state.MERGE_CLUSTERS).set_value(picked).run()
    button(at, "Merge clusters").click().run()
    table = stages.example_table(Run.open(Path(at.session_state[state.CONFIG].runs_root) / "news-a"), store)
    members = table[table["cluster_id"].isin(picked)]
    assigned = store.assignments(label_key(workspace / "news-a"))
    assert sorted(assigned["example_id"]) == sorted(members["example_id"])
    assert "merged clusters" in store.events()[0].summary


def test_edit_merge_and_delete_error_types(start, db, workspace):
    at = go(start(), "label")
    create_type(at, "First")
    create_type(at, "Second")
    store = LabelStore(db, create=False)
    store.assign(label_key(workspace / "news-a"), ["ex000001"], "Second")
    at.run()
    at.selectbox(key=state.EDIT_TYPE).set_value(store.error_type("First").id).run()
    at.text_input(key=state.EDIT_NAME).set_value("Renamed")
    at.text_area(key=state.EDIT_DEFINITION).set_value("now defined")
    button(at, "Save").click().run()
    assert store.error_type("Renamed").definition == "now defined"
    at.multiselect(key=state.MERGE_TYPES).set_value([store.error_type("Second").id]).run()
    button(at, "Merge into it").click().run()
    assert [t.name for t in store.error_types()] == ["Renamed"]
    assert store.assignments(label_key(workspace / "news-a"))["error_type"].tolist() == ["Renamed"]
    button(at, "Delete this error type").click().run()
    assert store.error_types() == [] and store.assignments(label_key(workspace / "news-a")).empty
    button(at, "Undo").click().run()
    assert [t.name for t in store.error_types()] == ["Renamed"]


def test_refused_actions_are_messages(start):
    at = go(start(), "label")
    create_type(at, "Dup")
    create_type(at, "dup")
    assert any("already exists" in e.value for e in at.error)
    assert not at.exception


def test_map_selection_is_labeled_on_the_label_page(start, workspace):
    at = go(start(), "clusters")
    table = stages.base_table(Run.open(workspace / "news-a"))
    picked = list(table[~table["correct"]]["example_id"].iloc[:4])
    at.session_state[state.MAP_SELECTION] = picked
    at.run()
    button(at, "Label the 4 examples").click().run()
    assert at.title[0].value == "Label"
    assert sorted(at.dataframe[0].value["example_id"]) == sorted(picked)


def test_user_text_is_escaped(start, db):
    at = go(start(), "label")
    evil = "**bold** <img src=x onerror=alert(1)> [link](http://evil.example) $x$"
    create_type(at, evil[:80], "<script>alert(1)</script>")
    rendered = texts(at)
    assert "\\*\\*bold\\*\\*" in rendered and "\\<img" in rendered and "\\[link\\]" in rendered
    assert "<script>" not in rendered.replace("\\<script\\>", "")
    assert not at.get("html")  # nothing rendered as raw HTML


def test_two_sessions_label_the_same_workspace(start, db, workspace):
    alice = go(start(user="alice"), "label")
    bob = go(start(user="bob"), "label")
    create_type(alice, "From alice")
    bob.run()
    store = LabelStore(db, create=False)
    cids = list(labeled.cluster_summary(Path(alice.session_state[state.CONFIG].runs_root) / "news-a", store)
                ["cluster_id"])
    alice.selectbox(key=state.LABEL_CLUSTER).set_value(cids[0]).run()
    bob.selectbox(key=state.LABEL_CLUSTER).set_value(cids[1]).run()
    button(alice, "Assign whole cluster").click().run()
    button(bob, "Assign whole cluster").click().run()
    assigned = store.assignments(label_key(workspace / "news-a"))
    assert set(assigned["updated_by"]) == {"alice", "bob"}
    assert set(assigned["cluster_id"]) == {cids[0], cids[1]}
    button(bob, "Undo").click().run()  # bob's undo leaves alice's work alone
    assert set(store.assignments(label_key(workspace / "news-a"))["updated_by"]) == {"alice"}


# -- taxonomy -----------------------------------------------------------------------------------------------------


def test_taxonomy_page_counts_and_downloads(start, db, workspace):
    at = go(start(), "taxonomy")
    assert "No error types yet" in at.info[0].value
    assert [b.label for b in at.get("download_button")] == ["JSON", "CSV", "Markdown report"]
    store = LabelStore(db, user="tester")
    store.create_error_type("Sarcasm", "Irony read literally", "high")
    table = stages.example_table(Run.open(Path(at.session_state[state.CONFIG].runs_root) / "news-a"), store)
    ids = list(table[table["cluster_id"] == 0]["example_id"])
    store.assign(label_key(workspace / "news-a"), ids, "Sarcasm")
    at.run()
    assert at.metric[0].value == "1"
    types = at.dataframe[0].value
    assert types["name"].tolist() == ["Sarcasm"] and types["count"].tolist() == [len(ids)]
    assert len(at.dataframe[1].value) == len(ids)
    text = labeled.export_text("json", Path(at.session_state[state.CONFIG].runs_root) / "news-a", store)
    doc = json.loads(text)
    taxonomy.validate(doc)
    assert doc["error_types"][0]["count"] == len(ids)


# -- safety -------------------------------------------------------------------------------------------------------


def test_runs_outside_the_folder_are_refused(workspace, tmp_path):
    from erroranalysis.core.errors import RunError

    with pytest.raises(RunError, match="not a run"):
        data.run_dir(workspace, "../elsewhere")
    with pytest.raises(RunError, match="not a run"):
        data.run_dir(workspace, str(workspace / "news-a"))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "manifest.json").write_text("{}")
    (workspace / "sneaky").symlink_to(outside)
    try:
        with pytest.raises(RunError, match="leads outside the folders this app may read"):
            data.run_dir(workspace, "sneaky")
        assert "sneaky" not in data.discover(workspace)
    finally:
        (workspace / "sneaky").unlink()


def test_a_run_in_the_query_string_must_be_one_of_the_runs(start, workspace, db, monkeypatch):
    app_env(monkeypatch, workspace, db)
    at = open_app(setup=lambda at: at.query_params.__setitem__("run", "../../etc"))
    assert at.session_state[state.RUN] in data.discover(workspace)


def test_open_option_picks_the_first_run(workspace, db, monkeypatch):
    app_env(monkeypatch, workspace, db, open="news-b")
    at = open_app()
    assert at.session_state[state.RUN] == "news-b"


def test_a_damaged_labels_database_is_one_message_on_every_page(start, db):
    """One 4 KB page of the database overwritten (quick_check fails on open): the pages that need labels say so in
    one line naming the file, with no traceback; the Runs page still lists the runs."""
    import sqlite3

    store = LabelStore(db, user="tester")
    for i in range(13):
        store.create_error_type(f"type {i}", "a definition " * 20)
    for i in range(35):
        store.assign("news-a", [f"ex{i:06d}"], f"type {i % 13}")
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'events'").fetchone()[0]
    size = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    with open(db, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\0" * size)

    at = start()
    assert len(at.dataframe[0].value) == 3 and any(str(db) in e.value for e in at.error)
    for page in ("label", "taxonomy", "review", "slices", "clusters", "compare"):
        at = go(at, page)
        assert len(at.error) == 1, (page, [e.value for e in at.error])
        message = at.error[0].value
        assert str(db) in message and "damaged" in message and "\n" not in message, page
        assert not at.exception and "Traceback" not in texts(at)


def test_the_server_freezes_its_objects_only_after_runs_that_imported_modules():
    """A fresh process: the first call freezes what exists; a run that imported nothing freezes nothing more (no
    cost per click); one that imported a module (a page's first visit) freezes again."""
    import subprocess
    import sys

    script = """
import gc, json, sys
sys.path.insert(0, "ui")
from erroranalysis_ui.eaui import memory
memory.freeze_after_imports()
first = gc.get_freeze_count()
junk = [[i] for i in range(1000)]
memory.freeze_after_imports()
idle = gc.get_freeze_count()
import colorsys, wave  # modules nothing here imports
memory.freeze_after_imports()
print(json.dumps([first, idle, gc.get_freeze_count()]))
"""
    root = Path(__file__).resolve().parent.parent
    first, idle, after_import = json.loads(subprocess.run([sys.executable, "-c", script], cwd=root, check=True,
                                                          capture_output=True, text=True).stdout)
    assert first > 1000
    assert idle == first
    assert after_import >= first + 1000  # the new lists were frozen with the new modules

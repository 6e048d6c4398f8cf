"""How runs are keyed in a shared labels database: the documented team layout (the database kept apart from the
runs with --labels-db) gives `expA/sample` and `expB/sample` keys of their own, and labels stored under 0.2's key
(the folder name) move to the run that asks first, so nobody loses them and no other run shows them."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from fake_runs import inferred_run
from typer.testing import CliRunner

from erroranalysis import rundir
from erroranalysis.cli.app import app
from erroranalysis.labels import LabelStore, run_key
from erroranalysis.rundir import Run

LABELS = ["a", "b"]


def frame(n: int = 12) -> pd.DataFrame:
    return pd.DataFrame({"example_id": [f"e{i}" for i in range(n)], "text": [f"text {i}" for i in range(n)],
                         "label": ["a", "b"] * (n // 2), "pred": ["a"] * n})


def exported(run: Path, db: Path, tmp_path: Path) -> dict:
    out = tmp_path / f"{run.parent.name}-{run.name}.json"
    result = CliRunner().invoke(app, ["export", str(run), "--labels-db", str(db), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


@pytest.fixture()
def team(tmp_path):
    """The team layout of docs/labels.md: runs on a share, the labels database on the app host's disk."""
    share = tmp_path / "mnt" / "team" / "runs"
    runs = {exp: inferred_run(share / exp / "sample", frame(), labels=LABELS) for exp in ("expA", "expB")}
    return runs, tmp_path / "home" / "labels" / "team.sqlite"


def test_two_runs_of_one_name_in_a_shared_database_keep_their_own_labels(team, tmp_path):
    runs, db = team
    store = LabelStore(db, user="alice")
    key_a, key_b = store.run_key(runs["expA"]), store.run_key(runs["expB"])
    assert key_a != key_b and key_a.startswith("sample@") and key_a == f"sample@{runs['expA'].id[:12]}"
    store.create_error_type("Sarcasm")
    store.assign(key_a, ["e1", "e3"], "Sarcasm")
    assert [a["example_id"] for a in exported(runs["expA"].path, db, tmp_path)["assignments"]] == ["e1", "e3"]
    other = exported(runs["expB"].path, db, tmp_path)
    assert other["assignments"] == [] and other["run"]["key"] == key_b


def test_the_key_follows_the_run_when_it_moves_and_survives_an_overwrite(team, tmp_path):
    runs, db = team
    store = LabelStore(db, user="alice")
    key, made = store.run_key(runs["expA"]), runs["expA"].id
    moved = runs["expA"].path.parent.rename(tmp_path / "archive-expA") / "sample"
    assert store.run_key(Run.open(moved)) == key
    again = inferred_run(moved, frame(), labels=LABELS)  # --overwrite: the same run, rebuilt
    assert again.id == made and store.run_key(again) == key
    fresh = inferred_run(tmp_path / "new" / "sample", frame(), labels=LABELS)
    assert store.run_key(fresh) != key


def test_labels_under_the_old_key_move_to_the_first_run_that_asks(team, tmp_path):
    runs, db = team
    for run in runs.values():  # runs made by 0.2: no id in the manifest
        manifest = json.loads(run.file(rundir.MANIFEST).read_text())
        manifest.pop("run_id")
        run.file(rundir.MANIFEST).write_text(json.dumps(manifest))
    old = LabelStore(db, user="alice")
    old.create_error_type("Sarcasm")
    old.assign("sample", ["e1", "e3"], "Sarcasm")  # what 0.2 stored for either run
    old.set_note("sample", "e1", "ironic")
    doc = exported(runs["expA"].path, db, tmp_path)
    assert [a["example_id"] for a in doc["assignments"]] == ["e1", "e3"]
    assert doc["run"]["key"] == str(runs["expA"].path.resolve())  # made before ids: its absolute path
    assert exported(runs["expB"].path, db, tmp_path)["assignments"] == []  # claimed once, by expA
    store = LabelStore(db, user="alice")
    assert store.assignments("sample").empty and store.notes(doc["run"]["key"])["text"].tolist() == ["ironic"]
    moved = store.events(limit=1)[0]
    assert moved.action == "rekey_run" and "'sample'" in moved.summary
    store.undo(moved.id)  # the wrong run took them: undo puts them back under the old key
    assert len(store.assignments("sample")) == 2 and store.assignments(doc["run"]["key"]).empty


def test_a_run_inside_the_databases_folder_keeps_its_path_key_and_its_old_rows(tmp_path):
    run = inferred_run(tmp_path / "runs" / "exp" / "sample", frame(), labels=LABELS)
    db = tmp_path / "runs" / "labels.sqlite"
    store = LabelStore(db, user="alice")
    store.create_error_type("Sarcasm")
    store.assign("exp/sample", ["e1"], "Sarcasm")
    assert store.run_key(run) == run_key(run.path, db) == "exp/sample"
    assert len(store.assignments(store.run_key(run))) == 1
    result = CliRunner().invoke(app, ["labels", "where", str(run.path), "--root", str(tmp_path / "runs")])
    assert result.exit_code == 0 and "stored under 'exp/sample'" in result.output


def test_an_overwrite_of_a_run_made_before_ids_keeps_its_path_key(team):
    runs, db = team
    run = runs["expA"]
    manifest = json.loads(run.file(rundir.MANIFEST).read_text())
    manifest.pop("run_id")
    run.file(rundir.MANIFEST).write_text(json.dumps(manifest))
    store = LabelStore(db, user="alice")
    key = store.run_key(run)
    assert key == str(run.path.resolve())
    again = inferred_run(run.path, frame(), labels=LABELS)  # --overwrite
    assert again.id is None and store.run_key(again) == key

"""The app reads nothing outside its runs folder (and the folders named with --allow-path), trick by trick.

Each trick is what someone who can write inside the runs folder would do: replace an artifact by a symlink to a
file elsewhere (and drop its size and checksum from the manifest, so the commit check does not catch it first),
point the manifest's model path at another folder, at `/` or out through `..`, type a path, replace a run folder
by a symlink while the app runs. Each test first shows the trick works on an unconfined reader (the file outside
really is read), then that the app refuses it, and says nothing about whether the target exists.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
from app_session import app_env, open_app, texts
from fake_runs import commit
from streamlit.testing.v1 import AppTest
from ui_fixtures import make_run

from erroranalysis import rundir, stages
from erroranalysis.core import files
from erroranalysis.labels import LabelStore
from erroranalysis.rundir import Run, readers
from erroranalysis.rundir.readers import OutsideError
from erroranalysis_ui.eaui import data, state
from erroranalysis_ui.eaui.workspace import Workspace

SECRET = "TOP-SECRET-7f3a"
OUTSIDE_TEXT = "OUTSIDE-TEXT-91c2"


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A runs folder with one run made by the real stages (clustered, checked, sliced) and a doctor's report."""
    root = tmp_path_factory.mktemp("template") / "runs"
    run = make_run(root / "news", n=120, n_failures=30, seed=3)
    commit(run, "doctor", doctor_md="# Doctor's report\n\nAll checks ran.\n", doctor_json={"findings": []})
    return root


@pytest.fixture()
def ws(template, tmp_path):
    """(runs folder, outside folder): a fresh copy of the template, and a folder beside it the app must not read,
    holding a secret, a predictions table of other texts and a training log."""
    root = tmp_path / "runs"
    shutil.copytree(template, root, symlinks=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    frame = readers.read_predictions(Run.open(root / "news"))
    frame["text"] = OUTSIDE_TEXT + " " + frame["text"]
    frame.to_parquet(outside / "predictions.parquet", index=False)
    log = [{"step": s, "loss": float("nan") if s == 300 else 2 * math.exp(-s / 200)} for s in range(10, 501, 10)]
    (outside / "trainer_state.json").write_text(json.dumps({"global_step": 500, "log_history": log}))
    return root, outside


def tamper(run_dir: Path, name: str, target: Path) -> None:
    """Replace artifact `name` by a symlink to `target`, and drop its recorded size and checksum."""
    (run_dir / name).unlink()
    (run_dir / name).symlink_to(target)
    manifest = json.loads((run_dir / rundir.MANIFEST).read_text())
    for key in ("bytes", "sha256"):
        manifest["artifacts"][name].pop(key, None)
    files.write_json(run_dir / rundir.MANIFEST, manifest)


def set_model_path(run_dir: Path, value: str) -> None:
    manifest = json.loads((run_dir / rundir.MANIFEST).read_text())
    manifest.setdefault("model", {})["path"] = value
    files.write_json(run_dir / rundir.MANIFEST, manifest)


@pytest.fixture()
def start(ws, tmp_path, monkeypatch):
    root, _ = ws
    app_env(monkeypatch, root, tmp_path / "labels.sqlite", user=None)

    def _start(page: str, run: str = "news") -> AppTest:
        return open_app(page, run)

    return _start


# -- file symlinks inside a run -------------------------------------------------------------------------------


def test_doctor_md_linked_to_a_secret(ws, start):
    root, outside = ws
    tamper(root / "news", rundir.DOCTOR_MD, outside / "secret.txt")
    assert SECRET in readers.read_doctor(Run.open(root / "news"))[0]  # the trick works on an unconfined reader
    with readers.confined([root]), pytest.raises(OutsideError):
        readers.read_doctor(Run.open(root / "news"))

    at = start("data_checks")
    assert SECRET not in texts(at)
    assert any("outside the folders" in e.value for e in at.error), [e.value for e in at.error]


def test_predictions_linked_to_a_file_outside(ws, start):
    root, outside = ws
    tamper(root / "news", rundir.PREDICTIONS, outside / "predictions.parquet")
    assert readers.read_predictions(Run.open(root / "news"))["text"].str.startswith(OUTSIDE_TEXT).all()
    for page in ("confusion", "clusters", "label", "slices", "overview", "data_checks", "taxonomy"):
        at = start(page)
        assert OUTSIDE_TEXT not in texts(at), page
        if page not in ("overview",):  # the overview reads metrics.json, not the texts
            assert any("outside the folders" in e.value for e in at.error), (page, [e.value for e in at.error])


def test_a_refused_link_says_nothing_about_its_target(ws, start):
    root, outside = ws
    tamper(root / "news", rundir.DOCTOR_MD, outside / "secret.txt")
    exists = [e.value for e in start("data_checks").error]
    (root / "news" / rundir.DOCTOR_MD).unlink()
    (root / "news" / rundir.DOCTOR_MD).symlink_to(outside / "no-such-file.txt")
    assert [e.value for e in start("data_checks").error] == exists


def test_a_shard_of_a_sharded_artifact_linked_outside(ws):
    """A folder artifact (part-*.parquet shards) passes only when every shard lies inside."""
    root, outside = ws
    table = readers.read_predictions(Run.open(root / "news"))
    labels = Run.open(root / "news").labels
    with rundir.create_run(root / "sharded", task="classification", labels=labels) as run:
        with run.stage("load_predictions") as staging:
            folder = staging.file(rundir.PREDICTIONS)
            folder.mkdir()
            table.iloc[:60].to_parquet(folder / "part-00000.parquet", index=False)
            table.iloc[60:].to_parquet(folder / "part-00001.parquet", index=False)
    run = Run.open(root / "sharded")
    assert len(readers.read_predictions(run)) == len(table)
    part = root / "sharded" / rundir.PREDICTIONS / "part-00001.parquet"
    part.unlink()
    pd.read_parquet(outside / "predictions.parquet").iloc[60:].to_parquet(outside / "part.parquet", index=False)
    part.symlink_to(outside / "part.parquet")
    manifest = json.loads((run.path / rundir.MANIFEST).read_text())
    for key in ("bytes", "sha256"):
        manifest["artifacts"][rundir.PREDICTIONS].pop(key, None)
    files.write_json(run.path / rundir.MANIFEST, manifest)
    assert readers.read_predictions(run)["text"].str.startswith(OUTSIDE_TEXT).any()
    with readers.confined([root]), pytest.raises(OutsideError, match="part-00001"):
        readers.read_predictions(run)


def test_a_manifest_linked_outside_hides_the_run(ws, start):
    root, outside = ws
    fake = outside / "fake-run"
    shutil.copytree(root / "news", fake)
    (root / "other").mkdir()
    (root / "other" / rundir.MANIFEST).symlink_to(fake / rundir.MANIFEST)
    (root / "gone").mkdir()
    (root / "gone" / rundir.MANIFEST).symlink_to(outside / "nothing-here.json")
    assert data.discover(root) == ["news"]  # neither is listed, whether its target exists or not
    with pytest.raises(OutsideError):
        data.run_dir(root, "other")
    with readers.confined([root]), pytest.raises(OutsideError):
        readers.read_predictions(Run(root / "other"))


def test_the_labels_database_linked_outside(ws, start, monkeypatch, tmp_path):
    root, outside = ws
    LabelStore(outside / "labels.sqlite", user="elsewhere").create_error_type("Their secret type")
    (root / "labels.sqlite").symlink_to(outside / "labels.sqlite")
    monkeypatch.delenv("ERRORANALYSIS_LABELS_DB")
    at = start("label")
    assert "Their secret type" not in texts(at)
    assert any("outside the folders" in e.value for e in at.error)


# -- the manifest never widens what is read ------------------------------------------------------------------


@pytest.mark.parametrize("model_path", ["OUTSIDE", "/", "../../outside", "../../outside/trainer_state.json"])
def test_the_manifest_model_path_is_not_followed(ws, start, model_path):
    root, outside = ws
    set_model_path(root / "news", str(outside) if model_path == "OUTSIDE" else model_path)
    at = start("training")
    assert not at.metric and not at.error  # nothing read, nothing refused: there is no log the app may read
    assert "No training log" in at.info[0].value and "--allow-path" in at.info[0].value
    assert str(outside) not in at.info[0].value


def test_a_model_path_inside_an_allowed_folder_is_read(ws, start, monkeypatch):
    root, outside = ws
    set_model_path(root / "news", str(outside))
    monkeypatch.setenv("ERRORANALYSIS_ALLOW_PATHS", str(outside))
    at = start("training")
    assert not at.error and at.metric[0].value == "1"  # the NaN at step 300


def test_a_typed_path_outside_is_refused_the_same_whether_it_exists(ws, start):
    root, outside = ws
    set_model_path(root / "news", "/")
    at = start("training")
    answers = {}
    for typed in (str(outside / "trainer_state.json"), str(outside / "no-such-log.json"), "/etc/passwd",
                  "/etc/no-such-file", "../outside/trainer_state.json", "../outside/nothing.json"):
        at.text_input(key=state.TRAINING_LOG).set_value(typed).run()
        assert not at.exception and not at.metric, typed
        assert len(at.error) == 1, typed
        answers[typed] = at.error[0].value.replace(typed, "PATH")
    assert len(set(answers.values())) == 1, answers
    assert "outside the folders this app may read" in next(iter(answers.values()))


def test_a_symlink_in_the_runs_folder_to_a_log_outside(ws, start):
    root, outside = ws
    (root / "logs").mkdir()
    (root / "logs" / "trainer_state.json").symlink_to(outside / "trainer_state.json")
    at = start("training")
    for typed in ("logs", "logs/trainer_state.json"):
        at.text_input(key=state.TRAINING_LOG).set_value(typed).run()
        assert at.error and "outside the folders this app may read" in at.error[0].value, typed
        assert not at.metric


def test_an_embeddings_source_outside_is_not_read(ws, tmp_path):
    """A run's embeddings.json names the .npy its clustering read; pointed outside (with `..`), apply-taxonomy
    under the app's rule refuses it before writing anything."""
    root, outside = ws
    run_dir = root / "news"
    meta = json.loads((run_dir / rundir.EMBEDDINGS_META).read_text())
    source = Path(meta["embedder"]["source"])
    shutil.copy(source, outside / "vectors.npy")
    shutil.copy(source.with_suffix(".json"), outside / "vectors.json")
    meta["embedder"]["source"] = str(run_dir / ".." / ".." / "outside" / "vectors.npy")
    (run_dir / rundir.EMBEDDINGS_META).write_text(json.dumps(meta))
    manifest = json.loads((run_dir / rundir.MANIFEST).read_text())
    for key in ("bytes", "sha256"):
        manifest["artifacts"][rundir.EMBEDDINGS_META].pop(key, None)
    files.write_json(run_dir / rundir.MANIFEST, manifest)

    store = LabelStore(tmp_path / "labels.sqlite", user="ann")
    etype = store.create_error_type("Sport read as business")
    table = stages.example_table(Run.open(run_dir), store)
    failing = table[~table["correct"]]["example_id"].head(6).tolist()
    store.assign(store.run_key(run_dir), failing, etype.id)
    doc = stages.build_taxonomy(Run.open(run_dir), store)
    before = (run_dir / rundir.MANIFEST).read_bytes()
    with readers.confined([root]), pytest.raises(OutsideError):
        stages.apply_taxonomy(doc, run_dir, store=store)
    assert (run_dir / rundir.MANIFEST).read_bytes() == before
    assert not (run_dir / rundir.SUGGESTIONS).exists()


# -- a run folder replaced after start-up ---------------------------------------------------------------------


def test_a_run_folder_replaced_by_a_symlink_while_the_app_runs(ws, start):
    root, outside = ws
    at = start("label")
    assert not at.error and OUTSIDE_TEXT not in texts(at)
    elsewhere = outside / "news"
    shutil.copytree(root / "news", elsewhere)
    frame = pd.read_parquet(outside / "predictions.parquet")
    frame.to_parquet(elsewhere / rundir.PREDICTIONS, index=False)
    manifest = json.loads((elsewhere / rundir.MANIFEST).read_text())
    manifest["artifacts"][rundir.PREDICTIONS] = {k: v for k, v in manifest["artifacts"][rundir.PREDICTIONS].items()
                                                 if k not in ("bytes", "sha256")}
    files.write_json(elsewhere / rundir.MANIFEST, manifest)
    assert readers.read_predictions(Run.open(elsewhere))["text"].str.startswith(OUTSIDE_TEXT).all()
    shutil.rmtree(root / "news")
    (root / "news").symlink_to(elsewhere)
    assert data.discover(root) == []  # no longer offered in the sidebar
    with pytest.raises(OutsideError, match="leads outside the folders this app may read"):
        data.run_dir(root, "news")  # nor opened when asked for by name (an address, a session that had it open)
    with readers.confined([root]), pytest.raises(OutsideError):
        readers.read_predictions(Run(root / "news"))  # nor read, should a page already hold its path
    for page in ("label", "confusion", "data_checks", "training"):
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception
        assert OUTSIDE_TEXT not in texts(at), page
        assert at.session_state[state.RUN] is None and "Pick a run" in at.info[0].value, page


def test_the_workspace_rule(ws, tmp_path):
    root, outside = ws
    w = Workspace.of(root, allow_paths=[outside / "allowed"], files=[tmp_path / "labels.sqlite"])
    assert w.allows(root / "news" / "manifest.json") and w.allows(root / "not-there-yet")
    assert w.allows(outside / "allowed" / "x") and w.allows(tmp_path / "labels.sqlite")
    assert not w.allows(outside / "secret.txt") and not w.allows(root / ".." / "outside")
    assert not w.allows(tmp_path / "labels.sqlite-other") and not w.allows(str(root) + "-sibling")
    assert not w.allows("/")

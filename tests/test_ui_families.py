"""Two levels of error types in the app: clusters grouped under parents on the Clusters page, labeling a parent
labels every cluster under it, and error types nested under broader ones on the Label page."""

from __future__ import annotations

from pathlib import Path

import pytest
from app_session import app_env, go, open_app
from ui_fixtures import embeddings_file, make_run

from erroranalysis.labels import LabelStore
from erroranalysis.rundir import Run, readers
from erroranalysis.stages import cluster_run
from erroranalysis_ui.eaui import state


@pytest.fixture(scope="module")
def families(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("families")
    run = make_run(root / "news", n=300, n_failures=90)
    # every cluster direction alike enough: the clusters fall into parents for sure
    cluster_run(run.path, embedder=str(embeddings_file(run.path)), reducer="pca", layout="pca",
                parent_similarity=-1.0)
    return root


@pytest.fixture()
def app(families, tmp_path, monkeypatch):
    db = tmp_path / "labels.sqlite"
    app_env(monkeypatch, families, db)
    return open_app(run="news"), db


def test_a_cluster_says_which_family_it_belongs_to(app, families):
    at, _ = app
    clusters = readers.read_clusters(Run.open(families / "news"))
    at = go(at, "clusters")
    listed = at.dataframe[0].value
    assert "parent" in listed.columns and (listed["parent"] != "").all()
    captions = " ".join(c.value for c in at.caption).replace("\\", "")  # the page escapes Markdown
    first = clusters.iloc[0]
    assert f"Part of **{first['parent_name']}**" in captions and first["summary"] in captions


def test_labeling_a_family_labels_every_cluster_in_it(app, families):
    at, db = app
    store = LabelStore(db, user="tester")
    store.create_error_type("Topic words of another class")
    clusters = readers.read_clusters(Run.open(families / "news"))
    family = clusters[clusters["parent_id"] == clusters["parent_id"].iloc[0]]
    assert len(family) >= 2
    at = go(at, "label")
    at.session_state[state.LABEL_SOURCE] = "Cluster family"
    at.session_state[state.LABEL_FAMILY] = int(family["parent_id"].iloc[0])
    at.run()
    button = next(b for b in at.button if b.label.startswith("Assign whole family"))
    button.click().run()
    assert not at.exception
    assigned = store.assignments(store.run_key(families / "news"))
    members = readers.read_assignments(Run.open(families / "news"))
    wanted = set(members.loc[members["cluster_id"].isin(family["cluster_id"]), "example_id"])
    assert set(assigned["example_id"]) == wanted and len(wanted) == int(family["size"].sum()) + \
        int(((members["cluster_id"].isin(family["cluster_id"])) & ~members["failure"]).sum())


def test_error_types_nest_under_broader_ones(app):
    at, db = app
    store = LabelStore(db, user="tester")
    weather = store.create_error_type("Weather")
    at = go(at, "label")
    at.session_state[state.NEW_TYPE_NAME] = "Snow"
    at.session_state[state.NEW_TYPE_PARENT] = weather.id
    next(b for b in at.get("form_submit_button") if b.label == "Create error type").click().run()
    assert not at.exception
    snow = next(t for t in store.error_types() if t.name == "Snow")
    assert snow.parent_id == weather.id
    names = [m.value for m in at.markdown]
    assert names.index("**Weather**") < names.index("↳ **Snow**")

"""apply-taxonomy and timeline on multi-label and regression runs (real runs of tiny checkpoints)."""

from __future__ import annotations

import shutil

import pytest
from task_fixtures import ML_LABELS, build_head, multilabel_rows, regression_rows

from erroranalysis import stages
from erroranalysis.labels import LabelStore
from erroranalysis.rundir import Run

CLUSTER = {"reducer": "pca", "layout": "pca", "min_cluster_size": 3}


@pytest.fixture(scope="module", params=["multilabel", "regression"])
def two_runs(request, tmp_path_factory):
    import erroranalysis as ea

    root = tmp_path_factory.mktemp(request.param)
    if request.param == "multilabel":
        ck = build_head(root / "ck", labels=ML_LABELS, problem_type="multi_label_classification", seed=3)
        rows, options = multilabel_rows(48), [{"threshold": 0.5}, {"threshold": 0.45}]
    else:
        ck = build_head(root / "ck", num_labels=1, problem_type="regression", seed=5)
        rows, options = regression_rows(48), [{"tolerance": 1.5}, {"tolerance": 1.5}]
    runs = [ea.run(ck, rows, out=root / "ws" / name, id="id", infer={"max_length": 64}, task_options=opts,
                   checks=None, cluster=CLUSTER).path for name, opts in zip(("a", "b"), options)]
    return request.param, root, runs


def test_apply_taxonomy(two_runs):
    task, root, (a, b) = two_runs
    store = LabelStore(root / "ws" / "labels.sqlite", user="alice")
    store.create_error_type("Kind", "the failures", severity="high")
    from erroranalysis.rundir import readers

    preds = readers.read_predictions(Run.open(a))
    store.assign("a", list(preds.loc[~preds["correct"], "example_id"])[:10], "Kind")
    taxonomy = stages.export_taxonomy(a, "json", root / "taxonomy.json")
    result = stages.apply_taxonomy(taxonomy, b, labels_db=root / "ws" / "labels.sqlite")
    assert sum(result.counts.values()) == int((~readers.read_predictions(Run.open(b))["correct"]).sum())
    assert Run.open(b).manifest["stages"]["apply_taxonomy"]["status"] == "done"


def test_timeline(two_runs, tmp_path):
    task, _, runs = two_runs
    for i, run in enumerate(runs):
        shutil.copytree(run, tmp_path / "exp" / f"step-{(i + 1) * 100:06d}")
    doc = stages.build_timeline(tmp_path / "exp")
    assert doc["task"] == task and [s["step"] for s in doc["steps"]] == [100, 200]
    assert all(s["accuracy"] is not None for s in doc["steps"])

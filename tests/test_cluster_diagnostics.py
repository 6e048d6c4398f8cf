"""What the slices and checks stages add to each cluster: the slices it overlaps, its suspected label issues."""

from __future__ import annotations

import numpy as np
import pandas as pd
from fake_runs import commit

from erroranalysis.rundir import Run, create_run
from erroranalysis.stages.cluster_parts import other_stages, with_other_stages


def make_run(tmp_path, *, slices: bool, checks: bool) -> Run:
    with create_run(tmp_path / "run", task="classification", labels=["a", "b"]) as run:
        pass
    if slices:
        commit(run, "slices", slices_parquet=pd.DataFrame(
            {"slice_id": [0, 1], "description": ['text contains "rain"', 'source == "app"']}),
            slice_members_parquet=pd.DataFrame({"example_id": ["f0", "f1", "f2", "f3", "f5"],
                                                "slice_id": [0, 0, 0, 1, 1]}))
    if checks:
        commit(run, "checks", checks_parquet=pd.DataFrame(
            {"example_id": [f"f{i}" for i in range(6)], "label_issue_score": 0.5,
             "label_issue": [False, False, False, True, True, False]}), checks_json={})
    return run


def test_slices_and_label_issues_per_cluster(tmp_path):
    run = make_run(tmp_path, slices=True, checks=True)
    clusters = pd.DataFrame({"cluster_id": [0, 1], "size": [3, 3]})
    ids = np.array([f"f{i}" for i in range(6)])
    labels = np.array([0, 0, 0, 1, 1, 1])
    out = with_other_stages(other_stages(run, ids), clusters, ids, labels)
    assert list(out.loc[0, "slices"]) == ['text contains "rain" (100%)']
    assert list(out.loc[1, "slices"]) == ['source == "app" (67%)']
    assert out["label_issue_share"].tolist() == [0.0, 2 / 3]
    assert out["probably_mislabeled"].tolist() == [False, True]


def test_without_those_stages_nothing_is_added(tmp_path):
    run = make_run(tmp_path, slices=False, checks=False)
    clusters = pd.DataFrame({"cluster_id": [0], "size": [2]})
    ids = np.array(["x", "y"])
    out = with_other_stages(other_stages(run, ids), clusters, ids, np.array([0, 0]))
    assert list(out.columns) == ["cluster_id", "size"]

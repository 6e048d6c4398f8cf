"""What the slices and checks stages add to each cluster: the slices it overlaps, its suspected label issues."""

from __future__ import annotations

import numpy as np
import pandas as pd

from erroranalysis import rundir
from erroranalysis.rundir import Run
from erroranalysis.stages.checks import CHECKS
from erroranalysis.stages.cluster import with_other_stages


def make_run(tmp_path, *, slices: bool, checks: bool) -> Run:
    run = Run.create(tmp_path / "run", task="classification", labels=["a", "b"])
    if slices:
        with run.stage("slices"):
            rundir.write_parquet(run.file(rundir.SLICES), pd.DataFrame(
                {"slice_id": [0, 1], "description": ['text contains "rain"', 'source == "app"']}))
            rundir.write_parquet(run.file(rundir.SLICE_MEMBERS), pd.DataFrame(
                {"example_id": ["f0", "f1", "f2", "f3", "f5"], "slice_id": [0, 0, 0, 1, 1]}))
    if checks:
        with run.stage("checks"):
            rundir.write_parquet(run.file(CHECKS), pd.DataFrame(
                {"example_id": [f"f{i}" for i in range(6)], "label_issue": [False, False, False, True, True, False]}))
    return run


def test_slices_and_label_issues_per_cluster(tmp_path):
    run = make_run(tmp_path, slices=True, checks=True)
    clusters = pd.DataFrame({"cluster_id": [0, 1], "size": [3, 3]})
    ids = np.array([f"f{i}" for i in range(6)])
    labels = np.array([0, 0, 0, 1, 1, 1])
    out = with_other_stages(run, clusters, ids, labels)
    assert list(out.loc[0, "slices"]) == ['text contains "rain" (100%)']
    assert list(out.loc[1, "slices"]) == ['source == "app" (67%)']
    assert out["label_issue_share"].tolist() == [0.0, 2 / 3]
    assert out["probably_mislabeled"].tolist() == [False, True]


def test_without_those_stages_nothing_is_added(tmp_path):
    run = make_run(tmp_path, slices=False, checks=False)
    clusters = pd.DataFrame({"cluster_id": [0], "size": [2]})
    out = with_other_stages(run, clusters, np.array(["x", "y"]), np.array([0, 0]))
    assert list(out.columns) == ["cluster_id", "size"]

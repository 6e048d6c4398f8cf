"""The counts the app's pages show (erroranalysis.report.summaries), on a run the stages made and a real labels store,
checked against counts made example by example from the run's own files. No Streamlit."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from ui_fixtures import make_run

from erroranalysis import stages
from erroranalysis.labels import LabelStore
from erroranalysis.report import summaries
from erroranalysis.rundir import readers


@pytest.fixture(scope="module")
def labeled_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("summaries")
    run = make_run(root / "run", n=400, n_failures=90, n_clusters=5)
    store = LabelStore(root / "labels.sqlite", user="tester")
    key = store.run_key(run)
    preds = readers.read_predictions(run)
    assignments = readers.read_assignments(run).set_index("example_id")["cluster_id"]
    failing = preds.loc[~preds["correct"], "example_id"].tolist()
    wrong = store.create_error_type("wrong topic words")
    vague = store.create_error_type("vague text")
    store.assign(key, failing[:30], wrong.id)
    store.assign(key, failing[30:40], vague.id)
    store.assign(key, preds.loc[preds["correct"], "example_id"].tolist()[:5], vague.id)  # a correct one, labeled
    types = dict.fromkeys(failing[:30], wrong.name) | dict.fromkeys(failing[30:40], vague.name)
    types |= dict.fromkeys(preds.loc[preds["correct"], "example_id"].tolist()[:5], vague.name)
    return {"run": run, "table": stages.example_table(run, store), "preds": preds, "cluster_of": assignments,
            "types": types}


def test_cluster_summary_counts_each_clusters_failures_and_labels(labeled_run):
    run, preds, cluster_of, types = (labeled_run[k] for k in ("run", "preds", "cluster_of", "types"))
    clusters = readers.read_clusters(run)
    summary = summaries.cluster_summary(labeled_run["table"], clusters)

    failures, members, labeled, kinds = Counter(), Counter(), Counter(), {}
    for example_id, correct in zip(preds["example_id"], preds["correct"]):
        cid = int(cluster_of[example_id])
        if cid < 0:
            continue
        members[cid] += 1
        failures[cid] += not correct
        if example_id in types:
            labeled[cid] += 1
            kinds.setdefault(cid, Counter())[types[example_id]] += 1
    n_fail = int((~preds["correct"]).sum())
    assert sorted(summary["cluster_id"]) == sorted(clusters["cluster_id"])
    for row in summary.itertuples():
        assert row.size == failures[row.cluster_id]
        assert row.share == pytest.approx(failures[row.cluster_id] / n_fail)
        assert row.labeled == pytest.approx(labeled[row.cluster_id] / members[row.cluster_id])
        assert row.main_type == (kinds[row.cluster_id].most_common(1)[0][0] if row.cluster_id in kinds else "")
    assert list(summary["size"]) == sorted(summary["size"], reverse=True)  # by impact
    assert summary["labeled"].gt(0).any() and summary["main_type"].ne("").any()


def test_slice_summary_counts_each_slices_labeled_failures(labeled_run):
    run, preds, types = labeled_run["run"], labeled_run["preds"], labeled_run["types"]
    found, members = readers.read_slices(run)
    assert len(found), "the planted structure makes slices"
    summary = summaries.slice_summary(found, members, labeled_run["table"])
    correct = dict(zip(preds["example_id"], preds["correct"]))
    cluster_name = dict(zip(labeled_run["table"]["example_id"], labeled_run["table"]["cluster_name"]))
    assert list(summary["slice_id"]) == list(found["slice_id"]) and "features" not in summary
    for row in summary.itertuples():
        ids = members.loc[members["slice_id"] == row.slice_id, "example_id"]
        failing = [i for i in ids if not correct[i]]
        typed = [types[i] for i in failing if i in types]
        assert row.labeled == pytest.approx(len(typed) / len(failing) if failing else 0.0)
        assert row.main_type == (Counter(typed).most_common(1)[0][0] if typed else "")
        names = Counter(cluster_name[i] for i in failing if cluster_name[i])
        assert (row.main_cluster in names and names[row.main_cluster] == max(names.values())) or \
            (row.main_cluster == "" and not names)


def test_confusion_pairs_count_failures_only_most_frequent_first(labeled_run):
    preds = labeled_run["preds"]
    pairs = summaries.confusion_pairs(labeled_run["table"])
    expected = Counter((lab, pred) for lab, pred, ok in zip(preds["label"], preds["pred"], preds["correct"]) if not ok)
    assert dict(pairs.items()) == dict(expected)
    assert list(pairs.items()) == sorted(expected.items(), key=lambda kv: (-kv[1], kv[0]))
    assert summaries.confusion_pairs(labeled_run["table"][labeled_run["table"]["correct"]]).empty


def test_the_map_sample_keeps_every_cluster_within_the_budget(labeled_run):
    table = labeled_run["table"]
    failing = table[~table["correct"].astype(bool)]
    assert summaries.sample_by_cluster(failing, len(failing), 10) is failing  # under the budget: all of them
    sample = summaries.sample_by_cluster(failing, 40, 5)
    sizes = failing["cluster_id"].value_counts()
    kept = sample["cluster_id"].value_counts()
    assert len(sample) <= 40 and set(kept.index) == set(sizes.index)
    assert all(kept[c] >= min(5, sizes[c]) for c in sizes.index)
    assert not sample["example_id"].duplicated().any() and set(sample["example_id"]) <= set(failing["example_id"])
    assert np.array_equal(summaries.sample_by_cluster(failing, 40, 5).index, sample.index)  # seeded

"""The Compare and Review pages without a browser (streamlit.testing.v1.AppTest)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from app_session import app_env, open_app, texts
from fake_runs import commit
from streamlit.testing.v1 import AppTest
from ui_fixtures import _VOCAB, analyze_frame

from erroranalysis import rundir
from erroranalysis.labels import LabelStore
from erroranalysis_ui.eaui import state

LABELS = ["business", "sport", "tech"]


def eval_set(n: int = 120, seed: int = 0) -> pd.DataFrame:
    """n examples with correct predictions; even rows read as business news, odd rows as sport news, so their
    failures are two kinds far apart for the embedder."""
    rng = np.random.default_rng(seed)
    gold = np.array(LABELS, dtype=object)[rng.integers(0, 3, n)]
    topic = np.where(np.arange(n) % 2 == 0, "business", "sport")
    texts = [f"example {i}: " + " ".join(rng.choice(_VOCAB[t], 6)) for i, t in enumerate(topic)]
    return pd.DataFrame({"id": [f"ex{i:03d}" for i in range(n)], "text": texts, "label": gold, "pred": gold.copy()})


def wrong(label: str) -> str:
    return LABELS[(LABELS.index(label) + 1) % 3]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """base, cand, third over one eval set (cand: 20 fixed, 5 broken), other over another; each made by
    `erroranalysis analyze` and the stages after it."""
    root = tmp_path_factory.mktemp("cmpws")
    df = eval_set()
    base, cand, third = df.copy(), df.copy(), df.copy()
    base.loc[:29, "pred"] = [wrong(x) for x in base.loc[:29, "label"]]
    cand.loc[20:29, "pred"] = base.loc[20:29, "pred"]
    cand.loc[100:104, "pred"] = [wrong(x) for x in cand.loc[100:104, "label"]]
    third.loc[:9, "pred"] = [wrong(x) for x in third.loc[:9, "label"]]
    other = df.copy()
    other["id"] = [f"o{i}" for i in range(120)]
    for name, frame in (("base", base), ("cand", cand), ("third", third), ("other", other)):
        analyze_frame(root / name, frame)
    return root


@pytest.fixture()
def start(workspace, tmp_path, monkeypatch):
    db = tmp_path / "labels.sqlite"
    store = LabelStore(db, user="alice")
    store.create_error_type("Even kind", "failures of the first kind")
    store.create_error_type("Odd kind <b>", "failures of the second kind", severity="high")
    ids = [f"ex{i:03d}" for i in range(30)]
    store.assign("base", ids[0::2], "Even kind")
    store.assign("base", ids[1::2], "Odd kind <b>")
    app_env(monkeypatch, workspace, db)

    def _start(page: str, run: str = "base", **session) -> AppTest:
        return open_app(page, run, session=session)

    _start.db = db
    return _start


def metric(at: AppTest, label: str):
    return next(m for m in at.metric if m.label == label)


# -- Compare ------------------------------------------------------------------------------------------------------


def test_compare_asks_for_candidates_first(start):
    at = start("compare", run="third")
    assert at.title[0].value == "Compare"
    baseline = at.selectbox(key=state.CMP_BASE)
    assert baseline.value == "third"  # the run being looked at, not the first in the folder
    assert at.multiselect(key=state.CMP_CANDIDATES).options == ["base", "cand", "other"]
    assert "Pick one or more candidate runs" in texts(at)
    assert not at.dataframe  # nothing compared yet


def test_compare_shows_deltas_examples_error_types_and_clusters(start):
    at = start("compare", CMP_CANDIDATES=["cand"])
    assert not at.error, [e.value for e in at.error]
    assert metric(at, "Fixed").value == "20" and metric(at, "Broken").value == "5"
    assert metric(at, "Accuracy").value == "87.5%" and "+12.5 pts" in str(metric(at, "Accuracy").delta)
    assert "95% CI" in texts(at)
    frames = {tuple(d.value.columns)[:2]: d.value for d in at.dataframe}
    per_class = next(v for k, v in frames.items() if k[0] == "class")
    assert sorted(per_class["class"]) == ["business", "sport", "tech"]
    types = next(v for k, v in frames.items() if k[0] == "name" and "fixed" in v.columns)
    assert set(types["name"]) == {"Even kind", "Odd kind <b>"} and types["fixed"].sum() == 20
    examples = at.dataframe[-1].value
    assert len(examples) == 20 and set(examples["example_id"]) == {f"ex{i:03d}" for i in range(20)}
    at.session_state[state.CMP_STATUS] = "Broken"
    at.run()
    assert len(at.dataframe[-1].value) == 5
    at.session_state[state.CMP_SEARCH] = "example 101"
    at.run()
    assert list(at.dataframe[-1].value["example_id"]) == ["ex101"]
    assert "vanished" in texts(at) and "appeared" in texts(at)


def test_compare_ablation_series_marks_the_baseline(start):
    at = start("compare", CMP_CANDIDATES=["cand", "third"])
    assert not at.error, [e.value for e in at.error]
    series = at.dataframe[0].value
    assert list(series.columns) == ["section", "name", "base (baseline)", "cand", "third"]
    fixed = series[series["name"] == "fixed"].iloc[0]
    assert (fixed["cand"], fixed["third"]) == ("20", "20")
    assert "Ablation series" in texts(at)
    at.session_state[state.CMP_DETAIL] = "third"
    at.run()
    assert "third vs base" in texts(at)


def test_compare_runs_over_another_eval_set_is_one_message(start):
    at = start("compare", CMP_CANDIDATES=["other"])
    assert not at.exception and at.error
    assert "not the same eval set" in at.error[0].value and "120 of the base's 120" in at.error[0].value


# -- Review -------------------------------------------------------------------------------------------------------


def test_review_suggests_from_another_run_then_accepts_and_rejects(start, monkeypatch):
    from erroranalysis_ui.eaui import tables

    monkeypatch.setattr(tables, "MAX_ROWS", 5)  # the table shows 5: "Reject all" must still take every one
    at = start("review", run="cand")
    assert at.title[0].value == "Review suggestions"
    assert "No suggestions await review" in texts(at)
    assert at.selectbox(key=state.REVIEW_FROM_RUN).value == "base"
    next(b for b in at.button if b.label == "Suggest error types").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Suggested an error type for" in texts(at)
    store = LabelStore(start.db)
    pending = store.assignments("cand")
    n = len(pending)
    assert 10 <= n <= 15 and set(pending["status"]) == {"pending"}  # most of cand's 15 failures are near a type
    assert metric(at, "Awaiting review").value == str(n)
    assert int(metric(at, "New / unmatched failures").value) == 15 - n
    table = at.dataframe[0].value
    assert len(table) == 5
    assert set(table["error_type"]) == {"Even kind", "Odd kind <b>"}
    assert set(table["basis"]) >= {"same example"}
    nonce = at.session_state[state.REVIEW_NONCE] if state.REVIEW_NONCE in at.session_state else 0
    at.session_state[f"{state.REVIEW_TABLE}_{nonce}"] = {"selection": {"rows": [0, 1], "columns": [], "cells": []}}
    at.run()
    next(b for b in at.button if b.label == "Accept 2 selected").click().run()
    assert not at.exception
    a = store.assignments("cand")
    assert (a["status"] == "accepted").sum() == 2
    assert metric(at, "Accepted").value == "2" and metric(at, "Awaiting review").value == str(n - 2)
    next(b for b in at.button if b.label.startswith("Reject all")).click().run()
    assert (store.assignments("cand")["status"] == "rejected").sum() == n - 2
    assert "No suggestions await review" in texts(at)


def test_review_without_labeled_runs_says_what_to_do(start):
    LabelStore(start.db).delete_error_type("Even kind")
    LabelStore(start.db).delete_error_type("Odd kind <b>")
    at = start("review", run="cand")
    assert "No other run in this workspace has labels yet" in texts(at)
    suggest = next(b for b in at.button if b.label == "Suggest error types")
    assert suggest.disabled


def test_review_of_a_broken_suggestions_file_is_one_message(start, workspace, tmp_path):
    run = rundir.Run.open(workspace / "third")
    commit(run, "apply_taxonomy", taxonomy_suggestions_parquet=pd.DataFrame({"example_id": ["x"]}))
    try:
        at = start("review", run="third")
        assert not at.exception and at.error and "taxonomy_suggestions.parquet" in at.error[0].value
    finally:
        with run.stage("apply_taxonomy"):  # removes the file again
            pass

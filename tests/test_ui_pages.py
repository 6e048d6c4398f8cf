"""Every page of the app on every kind of run the stages make (streamlit.testing.v1.AppTest, no browser): no
traceback anywhere, and what a page says when its run lacks something. The runs come from tests/ui_fixtures.py:
the real stages over planted predictions, with a fake embedder and PCA in place of MiniLM and UMAP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from app_session import app_env, go, open_app, texts
from streamlit.testing.v1 import AppTest
from ui_fixtures import KINDS, make_kinds, tiny_causal_lm

from erroranalysis.rundir import Run
from erroranalysis.rundir.readers import read_checks_report

PAGES = {"runs": "Runs", "overview": "Overview", "confusion": "Confusion matrix", "clusters": "Clusters",
         "slices": "Slices", "compare": "Compare", "label": "Label", "taxonomy": "Taxonomy",
         "review": "Review suggestions", "training": "Training", "data_checks": "Data checks",
         "training_data": "Training data"}

# What a page must say about a run that lacks something (kind, page) -> words on the page.
SAYS = {
    ("not-clustered", "clusters"): "has no clusters yet",
    ("not-clustered", "slices"): "has no slices yet",
    ("not-clustered", "data_checks"): "have not run on this run",
    ("no-failures", "clusters"): "found no clusters",
    ("no-probabilities", "overview"): "No calibration: the run has no probabilities",
    ("no-probabilities", "data_checks"): "Not checked: the run has no probabilities",
    ("generation", "data_checks"): "Not checked: the run has no probabilities",
    ("one-label", "data_checks"): "Not checked: the run has no probabilities",
}


@pytest.fixture(scope="module")
def kinds(tmp_path_factory) -> dict[str, Path]:
    lm = tiny_causal_lm(tmp_path_factory.mktemp("lm") / "tiny-llama")
    return make_kinds(tmp_path_factory.mktemp("kinds"), lm)


@pytest.fixture()
def open_run(kinds, tmp_path, monkeypatch):
    root = next(iter(kinds.values())).parent
    app_env(monkeypatch, root, tmp_path / "labels.sqlite")

    def _open(kind: str) -> AppTest:
        return open_app(run=kind)

    return _open


def stage_warnings(at: AppTest) -> list[str]:
    return [w.value for w in at.warning if w.value.startswith("Stage ")]


def visit(at: AppTest, page: str) -> AppTest:
    go(at, page)
    assert "Traceback" not in texts(at), page
    assert at.title and at.title[0].value == PAGES[page], page
    return at


@pytest.mark.parametrize("kind", KINDS)
def test_every_page_shows_every_kind_of_run(open_run, kind):
    at = open_run(kind)
    for page in PAGES:
        visit(at, page)
        if (kind, page) in SAYS:
            assert SAYS[kind, page] in texts(at, plain=True), (kind, page)
        if kind != "interrupted":  # every stage is done: no page warns about one
            assert not stage_warnings(at), page


def test_overview_draws_a_calibration_whose_bins_are_mostly_empty(open_run, kinds):
    """Regression: 13 of the demo's 15 bins are empty, stored as null, and the Overview page crashed on them."""
    bins = Run.open(kinds["flat-calibration"]).metrics()["calibration"]["bins"]
    filled = [b for b in bins if b["count"]]
    assert len(bins) == 15 and 1 < len(filled) <= 5
    assert all(b["accuracy"] is None and b["confidence"] is None for b in bins if not b["count"])
    at = visit(open_run("flat-calibration"), "overview")
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    bars = {t["name"]: t for t in spec["data"]}
    expected = [(b["lower"] + b["upper"]) / 2 for b in filled]
    assert bars["accuracy"]["x"] == pytest.approx(expected)
    assert bars["accuracy"]["y"] == pytest.approx([b["accuracy"] for b in filled])
    assert bars["examples"]["y"] == [b["count"] for b in filled]


def test_checks_page_of_a_generation_run(open_run, kinds):
    """Regression: a run without probabilities (every generation run) has no label-issue flags (NA), and the Checks
    page crashed filtering on them. It now shows the findings and says why label issues were not checked."""
    report = read_checks_report(Run.open(kinds["generation"]))
    assert report["label_issues"]["available"] is False
    at = visit(open_run("generation"), "data_checks")
    assert "Not checked: the run has no probabilities (probs.npy)." in texts(at, plain=True)
    assert any("label_issues_skipped" in m.value.replace("\\", "") for m in at.markdown)


def test_checks_page_lists_the_flagged_label_issues(open_run, kinds):
    from erroranalysis.rundir.readers import read_checks

    table = read_checks(Run.open(kinds["classification"]))
    flagged = set(table.loc[table["label_issue"].astype(bool), "example_id"])
    assert flagged
    at = visit(open_run("classification"), "data_checks")
    listed = at.dataframe[-1].value
    assert set(listed["example_id"]) == flagged
    assert f"{len(flagged):,} examples whose given label is probably wrong" in texts(at, plain=True)


def test_a_killed_stage_is_not_reported_as_ok(open_run, kinds):
    """The cluster stage of `interrupted` was killed by SIGKILL while running: the Runs page must not list the run
    as ok, and every page of it warns that its clusters may be missing or old."""
    at = visit(open_run("interrupted"), "runs")
    status = at.dataframe[0].value.set_index("run").loc["interrupted", "status"]
    assert status.startswith("⚠") and "stage 'cluster'" in status
    assert at.dataframe[0].value.set_index("run").loc["classification", "status"] == "✓ ok"
    for page in ("overview", "clusters", "label"):
        at = visit(at, page)
        assert any("Stage 'cluster' was interrupted" in w and "last completed run" in w for w in stage_warnings(at)), page


def test_a_killed_stage_is_reported_as_interrupted(open_run):
    at = visit(open_run("interrupted"), "runs")
    status = at.dataframe[0].value.set_index("run").loc["interrupted", "status"]
    assert "stage 'cluster' was interrupted" in status
    at = visit(at, "overview")
    assert "erroranalysis cluster" in stage_warnings(at)[0]


def test_the_apps_base_table_holds_each_text_column_in_one_chunk(tmp_path):
    """Read from a Parquet file of several row groups, texts arrive in several chunks (taking 2,000 rows from them
    copies them all); the app's table keeps the same values in one."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from erroranalysis_ui.eaui.labeled import one_chunk

    n = 5000
    texts = [f"text {i}" * (i % 7) for i in range(n)]
    pq.write_table(pa.table({"example_id": [f"e{i}" for i in range(n)], "text": texts, "x": list(range(n))}),
                   tmp_path / "p.parquet", row_group_size=1000)
    read = pd.read_parquet(tmp_path / "p.parquet")
    assert read["text"].array.__arrow_array__().num_chunks == 5
    one = one_chunk(read.copy())
    pd.testing.assert_frame_equal(one, read)
    assert one["text"].array.__arrow_array__().num_chunks == 1
    assert one["example_id"].array.__arrow_array__().num_chunks == 1


def test_the_per_class_table_ends_with_the_averages(open_run, kinds, kind="classification"):
    """The Overview's per-class table ends as classification_report's: micro, macro and weighted avg, their values
    the library's (`erroranalysis.metrics.averages`, checked against sklearn in test_familiar_output)."""
    from erroranalysis.metrics.averages import average_rows

    at = visit(open_run(kind), "overview")
    table = next(d.value for d in at.dataframe if "support" in d.value.columns and "f1" in d.value.columns)
    expected = average_rows(kind, Run.open(kinds[kind]).metrics())
    names = [r["label"] for r in expected]
    assert names == ["micro avg", "macro avg", "weighted avg"] and table["label"].tolist()[-3:] == names
    assert table["f1"].tolist()[-len(names):] == pytest.approx([r["f1"] * 100 for r in expected])

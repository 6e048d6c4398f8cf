"""The Python API (`import erroranalysis as ea`): data in memory (a DataFrame, a datasets.Dataset, a list of
dicts) analyzed into a run; its parts as DataFrames equal to an independent computation; the stage parameters as
their own dataclasses; comparisons; the notebook's HTML; the app started on a run; the public surface."""

from __future__ import annotations

import urllib.request

import numpy as np
import pandas as pd
import pytest
from conftest import eval_rows, write_jsonl

import erroranalysis as ea
from erroranalysis.core.errors import DataError, ParameterError

PUBLIC = ["__version__", "analyze", "run", "open", "Run", "Metrics", "Comparison", "DataOptions", "SourceParams",
          "GenerationParams", "InferParams", "MetricsParams", "CheckParams", "SliceParams", "ClusterParams",
          "CompareParams", "TrackerParams", "TaskParams", "sft_check", "SftParams"]
QUICK = {"checks": None, "cluster": None}


def predictions(n: int = 90, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    labels = np.array(["sport", "tech", "politics"])[np.arange(n) % 3]
    pred = np.where(rng.random(n) < 0.3, np.roll(labels, 1), labels)
    return pd.DataFrame({"id": [f"e{i}" for i in range(n)], "review": [f"text {i} about {l}" for i, l in
                                                                       enumerate(labels)],
                         "gold": labels, "pred": pred, "source": np.where(np.arange(n) % 2, "web", "app")})


def test_the_public_surface_is_held():
    assert ea.__all__ == PUBLIC
    for name in PUBLIC:
        assert getattr(ea, name) is not None
    from erroranalysis import stages

    assert ea.ClusterParams is stages.ClusterParams and ea.Run.__module__ == "erroranalysis.api.results"


def test_a_dataframe_is_analyzed_and_its_metrics_are_dataframes(tmp_path):
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    frame = predictions()
    run = ea.analyze(frame, text="review", label="gold", pred="pred", id="id", out=tmp_path / "x", **QUICK)
    assert isinstance(run, ea.Run) and run.task == "classification"
    labels = sorted(frame["gold"].unique())
    p, r, f1, support = precision_recall_fscore_support(frame["gold"], frame["pred"], labels=labels, zero_division=0)
    per_class = run.metrics.per_class
    assert isinstance(per_class, pd.DataFrame) and list(per_class.index) == labels
    np.testing.assert_allclose(per_class["f1"], f1)
    np.testing.assert_allclose(per_class["precision"], p)
    assert per_class["support"].tolist() == support.tolist()
    np.testing.assert_array_equal(run.metrics.confusion.to_numpy(),
                                  confusion_matrix(frame["gold"], frame["pred"], labels=labels))
    assert run.metrics.overall.loc["accuracy", "value"] == pytest.approx((frame["gold"] == frame["pred"]).mean())
    by_source = run.metrics.by_metadata.query("column == 'source'").set_index("value")["accuracy"]
    expected = (frame["gold"] == frame["pred"]).groupby(frame["source"]).mean()
    np.testing.assert_allclose(by_source.sort_index(), expected.sort_index())
    assert run.metrics.calibration.empty  # no probabilities given
    failures = run.failures
    assert sorted(failures["example_id"]) == sorted(frame.loc[frame["gold"] != frame["pred"], "id"])
    assert run.manifest["data"]["path"] == "DataFrame"
    assert run.stages.loc["slices", "status"] == "done" and "cluster" not in run.stages.index


def test_lists_of_dicts_datasets_and_paths_give_the_same_run(tmp_path):
    import datasets

    frame = predictions(30)
    kwargs = {"text": "review", "label": "gold", "id": "id", **QUICK, "slices": None}
    made = [ea.analyze(frame.to_dict("records"), out=tmp_path / "a", **kwargs),
            ea.analyze(datasets.Dataset.from_pandas(frame), out=tmp_path / "b", **kwargs),
            ea.analyze(write_jsonl(tmp_path / "p.jsonl", frame.to_dict("records")), out=tmp_path / "c", **kwargs)]
    columns = ["example_id", "text", "label", "pred", "correct", "source"]
    for other in made[1:]:
        pd.testing.assert_frame_equal(made[0].predictions[columns], other.predictions[columns])
    assert [m.manifest["data"]["format"] for m in made] == ["in_memory", "in_memory", "jsonl"]


def test_stage_parameters_are_their_dataclasses(tmp_path):
    frame = predictions(60)
    run = ea.analyze(frame, text="review", label="gold", id="id", out=tmp_path / "x", checks=None,
                     slices={"min_support": 5, "merge": False}, metrics=ea.MetricsParams(n_resamples=0),
                     cluster=ea.ClusterParams(embedder="minilm", reducer="pca", layout="none", min_failures=2))
    manifest = run.manifest["stages"]
    assert manifest["slices"]["params"]["merge"] is False and manifest["metrics"]["params"]["n_resamples"] == 0
    assert manifest["cluster"]["params"]["reducer"] == "pca" and "checks" not in manifest
    assert run.metrics.per_class["f1_ci_low"].isna().all()  # no bootstrap
    clusters = run.clusters
    assert len(clusters) >= 1
    first = int(clusters["cluster_id"].iloc[0])
    members = run.examples(cluster=first)
    assert len(members) == int(clusters["size"].iloc[0]) and not members["correct"].any()
    with pytest.raises(ParameterError, match="min_support"):
        ea.analyze(frame, out=tmp_path / "y", slices={"min_support": -1})
    with pytest.raises(ParameterError, match="mystery"):
        ea.analyze(frame, out=tmp_path / "y", cluster={"mystery": 1})
    assert not (tmp_path / "y").exists()


def test_bad_data_names_the_dataframe(tmp_path):
    frame = predictions(10).drop(columns="pred")
    with pytest.raises(DataError, match=r"^DataFrame: no column 'pred'"):
        ea.analyze(frame, text="review", label="gold", out=tmp_path / "x")
    with pytest.raises(DataError, match="not an eval set"):
        ea.analyze(42, out=tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_a_checkpoint_over_in_memory_data(tiny_checkpoint, tmp_path):
    frame = pd.DataFrame(eval_rows(40))
    run = ea.run(tiny_checkpoint, frame, id="id", out=tmp_path / "r", infer={"max_length": 32}, **QUICK,
                 slices=None)
    assert run.metrics.overall.loc["n", "value"] == 40
    assert set(run.predictions["example_id"]) == set(frame["id"])
    assert not run.metrics.calibration.empty  # a checkpoint gives probabilities


def test_open_compare_and_the_notebook_html(tmp_path):
    base = ea.analyze(predictions(seed=0), text="review", label="gold", id="id", out=tmp_path / "base", **QUICK)
    fixed = predictions(seed=0).assign(pred=lambda f: f["gold"])
    cand = ea.analyze(fixed, text="review", label="gold", id="id", out=tmp_path / "cand", **QUICK)
    comparison = ea.open(tmp_path / "base").compare(cand)
    counts = comparison.doc["comparisons"][0]["counts"]
    assert counts["fixed"] == len(base.failures) and counts["broken"] == 0
    overall = comparison.overall.set_index("metric")
    assert overall.loc["accuracy", "candidate"] == 1.0
    assert set(comparison.per_class["label"]) == {"sport", "tech", "politics"}
    html = base._repr_html_()
    assert "erroranalysis run" in html and "Per class" in html and "Confusion" in html and "<script" not in html
    assert "politics" in html and f"{len(base.failures):,} failures" in html
    assert "fixed" in comparison._repr_html_()
    page = comparison.report(tmp_path / "compare.html")
    assert page.stat().st_size > 0 and 'data-section="per-class"' in page.read_text()


@pytest.mark.slow
def test_show_starts_the_app_on_the_run(tmp_path):
    run = ea.analyze(predictions(30), text="review", label="gold", id="id", out=tmp_path / "runs" / "x", **QUICK,
                     slices=None)
    url = run.show()
    health = url.replace("localhost", "127.0.0.1").split("?")[0] + "_stcore/health"
    try:
        assert url.startswith("http://localhost:") and url.endswith("?run=x")
        with urllib.request.urlopen(health, timeout=10) as resp:
            assert resp.status == 200
    finally:
        run.stop()
    with pytest.raises(OSError):  # stopped: nothing answers there any more
        urllib.request.urlopen(health, timeout=5)


def test_the_docs_page_shows_the_docstrings():
    from pathlib import Path

    from erroranalysis.api import reference

    page = (Path(__file__).resolve().parent.parent / "docs" / "python-api.md").read_text(encoding="utf-8")
    assert page == reference.current(page), "run: python -m erroranalysis.api.reference docs/python-api.md"
    for name in ("analyze", "run", "open"):
        assert f"### `ea.{name}(" in page

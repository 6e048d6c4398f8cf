"""One rule for cell types (erroranalysis/sources/cells.py) as users bring them: the model's output as a probs/scores/logits
column (from a real `pipeline(..., top_k=None)` and from numpy), list metadata, Parquet struct columns, and bad
cells refused in one line before anything is written."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import LABELS, eval_rows, write_jsonl
from scipy.special import expit, softmax
from sklearn.metrics import accuracy_score, f1_score, log_loss
from test_cli_run import assert_user_error, invoke

import erroranalysis as ea
from erroranalysis.core.errors import DataError
from erroranalysis.rundir import Run
from erroranalysis.sources import cells

FAST = ("--no-cluster", "--no-data-checks")
TAGS = [["billing"], ["billing", "mobile"], [], ["mobile"], None, ["web", "billing"]]


def numpy_predictions(n: int = 90, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """A frame of gold, pred and logits as a notebook has them, with list metadata; and the softmax."""
    rng = np.random.default_rng(seed)
    gold = np.array(LABELS)[rng.integers(0, 3, n)]
    logits = rng.normal(size=(n, 3)) + 2.0 * (np.array(LABELS)[None, :] == gold[:, None])
    probs = softmax(logits, axis=1)
    frame = pd.DataFrame({"text": [f"review {i} of the item" for i in range(n)], "label": gold,
                          "pred": np.array(LABELS)[probs.argmax(1)], "tags": [TAGS[i % len(TAGS)] for i in range(n)]})
    frame["logits"] = list(logits)
    return frame, probs


def check_against_sklearn(run: Run, frame: pd.DataFrame, probs: np.ndarray) -> None:
    """probs.npy, loss, confidence and the metrics as sklearn computes them from the same arrays."""
    np.testing.assert_allclose(run.probs(), probs, atol=1e-6)
    preds = run.predictions()
    metrics = run.metrics()
    assert metrics["overall"]["accuracy"] == pytest.approx(accuracy_score(frame["label"], frame["pred"]))
    assert metrics["overall"]["macro_f1"] == pytest.approx(f1_score(frame["label"], frame["pred"], average="macro"))
    assert float(preds["loss"].mean()) == pytest.approx(log_loss(frame["label"], probs, labels=LABELS), rel=1e-5)
    np.testing.assert_allclose(preds["confidence"], probs.max(1), atol=1e-6)


def test_a_real_pipeline_top_k_none_is_the_models_output(tiny_checkpoint, tmp_path):
    from transformers import pipeline

    rows = eval_rows(30)
    scored = pipeline("text-classification", model=str(tiny_checkpoint), top_k=None)([r["text"] for r in rows])
    assert any([s["label"] for s in out] != LABELS for out in scored)  # sorted by score, not by label
    probs = np.array([[next(s["score"] for s in out if s["label"] == name) for name in LABELS] for out in scored])
    frame = pd.DataFrame({"id": [r["id"] for r in rows], "text": [r["text"] for r in rows],
                          "label": [r["label"] for r in rows], "pred": np.array(LABELS)[probs.argmax(1)]})
    write_jsonl(tmp_path / "p.jsonl", [{**r, "scores": s} for r, s in zip(frame.to_dict("records"), scored)])
    made = invoke("analyze", "-p", tmp_path / "p.jsonl", "-o", tmp_path / "run", "--id-column", "id", "--no-cluster")
    assert made.exit_code == 0, made.output
    run = Run.open(tmp_path / "run")
    assert run.labels == LABELS and run.manifest["data"]["probs_column"] == "scores"
    assert "scores" not in run.manifest["data"]["metadata_columns"]
    check_against_sklearn(run, frame, probs)
    # the same predictions as prob_<label> columns: the same probabilities, metrics and label issues
    write_jsonl(tmp_path / "q.jsonl", [{**r, **{f"prob_{n}": float(p) for n, p in zip(LABELS, row)}}
                                       for r, row in zip(frame.to_dict("records"), run.probs())])
    made = invoke("analyze", "-p", tmp_path / "q.jsonl", "-o", tmp_path / "ref", "--id-column", "id", "--no-cluster")
    assert made.exit_code == 0, made.output
    ref = Run.open(tmp_path / "ref")
    assert json.dumps(run.metrics(), sort_keys=True) == json.dumps(ref.metrics(), sort_keys=True)
    checks, expected = (pd.read_parquet(r.path / "checks.parquet") for r in (run, ref))
    assert checks["label_issue_score"].notna().all()
    pd.testing.assert_frame_equal(checks, expected)


def test_numpy_logits_and_softmax_lists_give_the_same_run(tmp_path):
    frame, probs = numpy_predictions()
    frame.to_parquet(tmp_path / "logits.parquet")  # list<double>
    as_probs = frame.drop(columns="logits").assign(probs=[list(map(float, p)) for p in probs])
    as_probs.to_parquet(tmp_path / "probs.parquet")
    for name in ("logits", "probs"):
        made = invoke("analyze", "-p", tmp_path / f"{name}.parquet", "-o", tmp_path / name, *FAST)
        assert made.exit_code == 0, made.output
        check_against_sklearn(Run.open(tmp_path / name), frame, probs)


def test_a_mapping_and_labels_order_plain_lists(tmp_path):
    frame, probs = numpy_predictions(30)
    order = ["positive", "negative", "neutral"]  # the order the lists are written in, given with --labels
    columns = [LABELS.index(name) for name in order]
    frame = frame.drop(columns="logits")
    write_jsonl(tmp_path / "list.jsonl", frame.assign(probs=[list(p[columns]) for p in probs]).to_dict("records"))
    write_jsonl(tmp_path / "map.jsonl", frame.assign(out=[dict(zip(LABELS, p)) for p in probs]).to_dict("records"))
    made = invoke("analyze", "-p", tmp_path / "list.jsonl", "-o", tmp_path / "a", "--labels", ",".join(order), *FAST)
    assert made.exit_code == 0, made.output
    run = Run.open(tmp_path / "a")
    assert run.labels == order
    np.testing.assert_allclose(run.probs(), probs[:, columns], atol=1e-6)
    made = invoke("analyze", "-p", tmp_path / "map.jsonl", "-o", tmp_path / "b", "--probs-column", "out", *FAST)
    assert made.exit_code == 0, made.output
    check_against_sklearn(Run.open(tmp_path / "b"), frame, probs)


def test_the_python_api_takes_the_same_arguments(tmp_path):
    frame, probs = numpy_predictions(60)
    frame = frame.rename(columns={"logits": "model_logits"})
    run = ea.analyze(frame, probs="model_logits", out=tmp_path / "x", checks=None, cluster=None)
    check_against_sklearn(Run.open(run.path), frame, probs)
    with pytest.raises(DataError, match=r"DataFrame, line 1, column 'model_logits': 3 scores where there are 2"):
        ea.analyze(frame, probs="model_logits", labels=["negative", "positive"], out=tmp_path / "y", checks=None,
                   cluster=None)
    assert not (tmp_path / "y").exists()


def test_list_metadata_is_one_group_and_one_slice_per_value(tmp_path):
    frame, probs = numpy_predictions(240, seed=3)
    frame.to_parquet(tmp_path / "p.parquet")
    made = invoke("analyze", "-p", tmp_path / "p.parquet", "-o", tmp_path / "run", "--no-cluster",
                  "--no-data-checks", "--min-support", "10")
    assert made.exit_code == 0, made.output
    run = Run.open(tmp_path / "run")
    groups = {g["value"]: g for g in run.metrics()["by_metadata"]["tags"]}
    assert set(groups) == {"billing", "mobile", "web", "(missing)"}
    for value in ("billing", "mobile", "web"):
        rows = frame["tags"].map(lambda t, v=value: t is not None and v in t)
        assert groups[value]["n"] == rows.sum()
        assert groups[value]["accuracy"] == pytest.approx(accuracy_score(frame["label"][rows], frame["pred"][rows]))
    empty = frame["tags"].map(lambda t: not t)
    assert groups["(missing)"]["n"] == empty.sum()
    from erroranalysis.slices import extract_features

    features = extract_features(metadata=frame[["tags"]], min_support=10)
    assert {"tags contains \"billing\"", "tags contains \"mobile\"", "tags is empty"} <= set(features.descriptions)
    column = features.matrix[:, features.descriptions.index('tags contains "billing"')].toarray().ravel()
    assert (column.astype(bool) == frame["tags"].map(lambda t: t is not None and "billing" in t)).all()


def test_multilabel_scores_columns(tmp_path):
    rng = np.random.default_rng(5)
    names = ["billing", "bug", "praise"]
    logits = rng.normal(size=(80, 3))
    gold = [[n for n, x in zip(names, row) if x > 0.3] for row in logits + rng.normal(scale=0.5, size=(80, 3))]
    frame = pd.DataFrame({"text": [f"ticket {i}" for i in range(80)], "label": gold, "logits": list(logits)})
    frame.to_parquet(tmp_path / "m.parquet")
    made = invoke("analyze", "--task", "multilabel", "-p", tmp_path / "m.parquet", "-o", tmp_path / "run", *FAST)
    assert made.exit_code == 0, made.output
    run = Run.open(tmp_path / "run")
    assert run.labels == names
    sig = expit(logits)
    np.testing.assert_allclose(run.probs(), sig, atol=1e-6)
    t = np.array([[n in g for n in names] for g in gold])
    assert run.metrics()["overall"]["micro_f1"] == pytest.approx(f1_score(t, sig >= 0.5, average="micro"))
    frame.drop(columns="logits").assign(probs=[list(p) for p in sig]).to_parquet(tmp_path / "p.parquet")
    made = invoke("analyze", "--task", "multilabel", "-p", tmp_path / "p.parquet", "-o", tmp_path / "run2", *FAST)
    assert made.exit_code == 0, made.output
    np.testing.assert_allclose(Run.open(tmp_path / "run2").probs(), sig, atol=1e-6)


def test_a_parquet_struct_column_is_flattened_one_level(tmp_path):
    frame, _ = numpy_predictions(60)
    frame = frame.drop(columns=["logits", "tags"])
    frame["info"] = [{"source": "web" if i % 3 else "app", "stars": i % 5, "deep": {"x": i}} for i in range(60)]
    frame.to_parquet(tmp_path / "s.parquet")  # a struct<source: string, stars: int64, deep: struct<x>> column
    made = invoke("analyze", "-p", tmp_path / "s.parquet", "-o", tmp_path / "run", *FAST)
    assert made.exit_code == 0, made.output
    assert "metadata column 'info': key 'deep' set aside (a struct inside a struct)" in made.stderr
    run = Run.open(tmp_path / "run")
    assert run.manifest["data"]["metadata_columns"] == ["info.source", "info.stars"]
    assert run.manifest["data"]["set_aside"] == ["metadata column 'info': key 'deep' set aside (a struct inside a "
                                                 "struct)."]
    groups = {g["value"]: g["n"] for g in run.metrics()["by_metadata"]["info.source"]}
    assert groups == {"web": 40, "app": 20}
    assert {s["status"] for s in run.manifest["stages"].values()} == {"done"}


def test_a_struct_column_in_a_generation_run(tmp_path):
    rows = [{"id": f"g{i}", "prompt": f"What is {i} + 1?", "output": str(i + 1 if i % 4 else i),
             "reference": str(i + 1), "meta": {"topic": "sums" if i % 2 else "easy", "level": i % 3}} for i in range(24)]
    write_jsonl(tmp_path / "gen.jsonl", rows)
    made = invoke("analyze", "--task", "generation", "-p", tmp_path / "gen.jsonl", "-o", tmp_path / "run",
                  "--id-column", "id", "--output-checks", "numeric", *FAST)
    assert made.exit_code == 0, made.output
    run = Run.open(tmp_path / "run")
    assert {"meta.topic", "meta.level"} <= set(run.manifest["data"]["metadata_columns"])
    assert "meta.topic" in run.metrics()["by_metadata"]


@pytest.mark.parametrize("cell, pattern", [
    ([0.5, "x", 0.5], r"p\.jsonl, line 2, column 'probs': score 'x' is not a finite number"),
    ([0.5, 0.5], r"p\.jsonl, line 2, column 'probs': 2 scores where there are 3 labels \('negative', 'neutral', "
                 r"'positive'\)"),
    ([0.5, 0.4, 0.4], r"p\.jsonl, line 2, column 'probs': the probabilities sum to 1\.3000, not 1"),
    ([1.5, -0.3, -0.2], r"p\.jsonl, line 2, column 'probs': 'negative' has probability 1\.5, not in \[0, 1\]"),
    ({"negative": 0.5, "happy": 0.5}, r"line 2, column 'probs': label 'happy' is not one of 3"),
    ([{"label": "negative", "score": 1.0}, "x"], r"line 2, column 'probs': .* mixes items that are not"),
])
def test_bad_scores_cells_are_one_line_and_leave_no_run(tmp_path, cell, pattern):
    rows = [{"text": f"t{i}", "label": LABELS[i], "pred": LABELS[i], "probs": [0.8 if j == i else 0.1 for j in
                                                                                   range(3)]} for i in range(3)]
    if isinstance(cell, dict):
        rows = [{**r, "probs": dict(zip(LABELS, r["probs"]))} for r in rows]
    rows[1]["probs"] = cell
    write_jsonl(tmp_path / "p.jsonl", rows)
    assert_user_error(invoke("analyze", "-p", tmp_path / "p.jsonl", "-o", tmp_path / "run"), pattern)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value, pattern", [
    ([{"a": 1}], r"line 2, column 'extra': a list \[\{'a': 1\}\] is not a cell erroranalysis reads"),
    ([[1, 2]], r"line 2, column 'extra': a list \[\[1, 2\]\] is not a cell"),
    ("plain", r"line 2, column 'extra': a str 'plain' where line 1 holds a list; write every cell"),
])
def test_unsupported_metadata_cells_are_one_line_and_leave_no_run(tmp_path, value, pattern):
    rows = [{"text": "a", "label": "x", "pred": "x", "extra": ["one"]}, {"text": "b", "label": "y", "pred": "x",
                                                                         "extra": value}]
    write_jsonl(tmp_path / "p.jsonl", rows)
    assert_user_error(invoke("analyze", "-p", tmp_path / "p.jsonl", "-o", tmp_path / "run"), pattern)
    assert not (tmp_path / "run").exists()


def test_a_list_prediction_is_refused(tmp_path):
    write_jsonl(tmp_path / "p.jsonl", [{"text": "a", "label": "x", "pred": "x"}, {"text": "b", "label": "y",
                                                                                 "pred": ["x", "y"]}])
    assert_user_error(invoke("analyze", "-p", tmp_path / "p.jsonl", "-o", tmp_path / "run"),
                      r"line 2, column 'pred': a list \['x', 'y'\] where line 1 holds a scalar")


def test_the_rule_classifies_columns():
    lines = np.arange(1, 5)

    def kind(values):
        return cells.column_kind(pd.Series(values, dtype=object), source="f", lines=lines, column="c")

    assert kind(["a", 1, None, 2.5]) == cells.SCALAR
    assert kind([["a"], None, np.array(["b", "c"]), []]) == cells.LIST
    assert kind([{"k": 1}, None, {"j": "x"}, {}]) == cells.STRUCT
    with pytest.raises(DataError, match=r"f, line 2, column 'c': a bytes"):
        kind(["a", b"raw", "b", "c"])
    assert cells.sort_labels(["10", "2", "1"]) == ["1", "2", "10"]
    assert cells.sort_labels(["LABEL_10", "LABEL_2", "b", "a"]) == ["LABEL_2", "LABEL_10", "a", "b"]
    logits = np.array([[1.0, 2.0, 0.5]])
    got = cells.read_scores([logits[0]], ["a", "b", "c"], multilabel=False, source="f", lines=[1], column="logits")
    np.testing.assert_allclose(got, softmax(logits, axis=1))
    pipeline_out = [[{"label": "b", "score": 0.7}, {"label": "a", "score": 0.2}, {"label": "c", "score": 0.1}]]
    got = cells.read_scores(pipeline_out, ["a", "b", "c"], multilabel=False, source="f", lines=[1], column="scores")
    np.testing.assert_allclose(got, [[0.2, 0.7, 0.1]])
    assert json.dumps(cells.ACCEPTS)  # the rule is data: what each use accepts


def test_a_checkpoint_run_reads_struct_and_list_metadata(tiny_checkpoint, tmp_path):
    rows = eval_rows(30)
    frame = pd.DataFrame(rows).assign(tags=[TAGS[i % len(TAGS)] for i in range(30)],
                                      info=[{"channel": "email" if i % 2 else "chat", "deep": {"x": i}}
                                            for i in range(30)])
    frame.to_parquet(tmp_path / "eval.parquet")
    made = invoke("run", "--model", tiny_checkpoint, "--data", tmp_path / "eval.parquet", "--out", tmp_path / "run",
                  "--id-column", "id", "--max-length", "16", *FAST)
    assert made.exit_code == 0, made.output
    assert "key 'deep' set aside" in made.stderr
    run = Run.open(tmp_path / "run")
    assert run.manifest["data"]["metadata_columns"] == ["source", "stars", "tags", "info.channel"]
    preds = run.predictions()
    by = run.metrics()["by_metadata"]
    channel = {g["value"]: g for g in by["info.channel"]}
    email = (frame["info"].map(lambda d: d["channel"]) == "email").to_numpy()
    assert channel["email"]["accuracy"] == pytest.approx(accuracy_score(preds["label"][email], preds["pred"][email]))
    billing = frame["tags"].map(lambda t: t is not None and "billing" in t).to_numpy()
    tags = {g["value"]: g for g in by["tags"]}
    assert tags["billing"]["n"] == billing.sum()
    assert tags["billing"]["accuracy"] == pytest.approx(accuracy_score(preds["label"][billing],
                                                                       preds["pred"][billing]))


def test_the_app_shows_a_run_with_list_and_struct_metadata(tmp_path, monkeypatch):
    from app_session import app_env, go, open_app

    frame, _ = numpy_predictions(120, seed=7)
    frame["info"] = [{"channel": "email" if i % 2 else "chat"} for i in range(120)]
    frame.to_parquet(tmp_path / "p.parquet")
    runs = tmp_path / "runs"
    made = invoke("analyze", "-p", tmp_path / "p.parquet", "-o", runs / "cells", "--reducer", "pca", "--layout",
                  "none", "--no-merge", "--min-support", "10")
    assert made.exit_code == 0, made.output
    app_env(monkeypatch, runs, tmp_path / "labels.sqlite")
    at = open_app(run="cells")
    for page in ("overview", "slices", "clusters", "label", "data_checks"):
        go(at, page)
        assert not at.error, (page, [e.value for e in at.error])


def test_one_way_of_giving_the_models_output(tmp_path):
    rows = [{"text": "a", "label": "x", "pred": "x", "prob_x": 0.9, "prob_y": 0.1, "probs": [0.9, 0.1]}]
    write_jsonl(tmp_path / "both.jsonl", rows)
    assert_user_error(invoke("analyze", "-p", tmp_path / "both.jsonl", "-o", tmp_path / "run"),
                      r"both\.jsonl: both prob_<label> columns and the scores column 'probs'; drop one")
    write_jsonl(tmp_path / "two.jsonl", [{**rows[0], "prob_x": None, "prob_y": None, "logits": [2.0, 0.0]}])
    frame = pd.read_json(tmp_path / "two.jsonl", lines=True).drop(columns=["prob_x", "prob_y"])
    frame.to_json(tmp_path / "two.jsonl", orient="records", lines=True)
    assert_user_error(invoke("analyze", "-p", tmp_path / "two.jsonl", "-o", tmp_path / "run"),
                      r"columns 'probs', 'logits' both look like the model's output; name the one to use with "
                      r"--probs-column")
    made = invoke("analyze", "-p", tmp_path / "two.jsonl", "-o", tmp_path / "run", "--probs-column", "logits",
                  "--labels", "x,y", *FAST)
    assert made.exit_code == 0, made.output
    write_jsonl(tmp_path / "scalar.jsonl", [{"text": "a", "label": "x", "pred": "x", "scores": 0.3},
                                            {"text": "b", "label": "y", "pred": "x", "scores": 0.7}])
    made = invoke("analyze", "-p", tmp_path / "scalar.jsonl", "-o", tmp_path / "run2", *FAST)
    assert made.exit_code == 0, made.output  # single numbers named scores: a metadata column, not the output
    assert Run.open(tmp_path / "run2").manifest["data"]["metadata_columns"] == ["scores"]


def test_metrics_of_a_run_written_before_the_rule_set_a_struct_column_aside(tmp_path):
    from fake_runs import inferred_run

    frame = pd.DataFrame({"example_id": [str(i) for i in range(6)], "text": ["t"] * 6, "label": list("abcabc"),
                          "pred": list("abcaaa"), "source": list("xyxyxy"),
                          "info": [{"k": i % 2} for i in range(6)]})
    run = inferred_run(tmp_path / "old", frame, labels=["a", "b", "c"],
                       data={"metadata_columns": ["source", "info"]})
    made = invoke("metrics", run.path)
    assert made.exit_code == 0, made.output
    run = Run.open(run.path)
    assert set(run.metrics()["by_metadata"]) == {"source", "text_length"}
    assert run.manifest["stages"]["metrics"]["metadata_set_aside"] == ["info"]


def test_a_struct_label_is_refused(tmp_path):
    write_jsonl(tmp_path / "p.jsonl", [{"text": "a", "label": "x", "pred": "x"},
                                       {"text": "b", "label": {"name": "y"}, "pred": "x"}])
    assert_user_error(invoke("analyze", "-p", tmp_path / "p.jsonl", "-o", tmp_path / "run"),
                      r"p\.jsonl, line 2, column 'label': a dict \{'name': 'y'\} is not a label")
    assert not (tmp_path / "run").exists()

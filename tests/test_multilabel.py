"""Multi-label sequence classification: the gold layouts, the metrics against scikit-learn on the same arrays, a
real run of a tiny multi-label checkpoint end to end, and a planted group whose one label is always missed."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from task_fixtures import ML_LABELS, build_head, multilabel_rows, write_jsonl
from test_cli_run import assert_user_error, invoke

from erroranalysis.core.errors import DataError
from erroranalysis.metrics.multilabel import compute_multilabel_metrics
from erroranalysis.rundir import Run
from erroranalysis.sources import gold


@pytest.fixture(scope="module")
def ml_checkpoint(tmp_path_factory):
    return build_head(tmp_path_factory.mktemp("ml") / "ck", labels=ML_LABELS,
                      problem_type="multi_label_classification", seed=3)


def arrays(seed=0, n=300, k=5):
    rng = np.random.default_rng(seed)
    t = (rng.random((n, k)) < 0.3).astype(int)
    probs = np.clip(t * 0.5 + rng.random((n, k)) * 0.6, 0, 1)
    return t, (probs >= 0.5).astype(int), probs


def test_metrics_match_sklearn():
    from sklearn import metrics as skm

    t, p, probs = arrays()
    labels = [f"l{i}" for i in range(t.shape[1])]
    m = compute_multilabel_metrics(t, p, labels, probs=probs, n_resamples=200)
    o = m["overall"]
    for average in ("micro", "macro", "weighted", "samples"):
        pr, rc, f1, _ = skm.precision_recall_fscore_support(t, p, average=average, zero_division=0)
        assert o[f"{average}_precision"] == pytest.approx(pr)
        assert o[f"{average}_recall"] == pytest.approx(rc)
        assert o[f"{average}_f1"] == pytest.approx(f1)
    assert o["subset_accuracy"] == pytest.approx(skm.accuracy_score(t, p))
    assert o["hamming_loss"] == pytest.approx(skm.hamming_loss(t, p))
    pr, rc, f1, support = skm.precision_recall_fscore_support(t, p, average=None, zero_division=0)
    cms = skm.multilabel_confusion_matrix(t, p)
    for j, row in enumerate(m["per_class"]):
        assert (row["precision"], row["recall"], row["f1"], row["support"]) == pytest.approx(
            (pr[j], rc[j], f1[j], support[j]))
        assert row["roc_auc"] == pytest.approx(skm.roc_auc_score(t[:, j], probs[:, j]))
        assert row["average_precision"] == pytest.approx(skm.average_precision_score(t[:, j], probs[:, j]))
        assert [[row["tn"], row["fp"]], [row["fn"], row["tp"]]] == cms[j].tolist()
        low, high = row["f1_ci"]
        assert low <= row["f1"] <= high
        assert m["calibration"]["per_label"][j]["brier"] == pytest.approx(
            skm.brier_score_loss(t[:, j], probs[:, j]))
    low, high = o["subset_accuracy_ci"]
    assert low <= o["subset_accuracy"] <= high
    assert o["brier"] == pytest.approx(np.mean((probs - t) ** 2))


def test_confusion_pairs_count_missed_with_spurious():
    t = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
    p = np.array([[0, 1, 0], [0, 1, 1], [0, 1, 0], [0, 0, 0]])
    m = compute_multilabel_metrics(t, p, ["a", "b", "c"], n_resamples=0)
    assert m["confusion"]["matrix"] == [[0, 2, 1], [0, 0, 0], [0, 0, 0]]  # gold a missed while b (twice), c read
    assert m["top_confusions"][0] == {"label": "a", "pred": "b", "count": 2, "share_of_failures": 2 / 3}
    assert [r["label"] for r in m["missed"]] == ["a", "c"] and [r["label"] for r in m["spurious"]] == ["b", "c"]
    assert m["overall"]["n_failures"] == 3


@pytest.mark.parametrize("values, sep, expected", [
    ([["a", "c"], [], ["b"]], None, [[1, 0, 1], [0, 0, 0], [0, 1, 0]]),
    ([[0, 2], [1]], None, [[1, 0, 1], [0, 1, 0]]),
    (['["a", "b"]', "[]"], None, [[1, 1, 0], [0, 0, 0]]),
    (["a|c", "", "(none)", "b"], "|", [[1, 0, 1], [0, 0, 0], [0, 0, 0], [0, 1, 0]]),
])
def test_gold_layouts(values, sep, expected):
    assert gold.multilabel_gold(values, ["a", "b", "c"], sep=sep, source="x.jsonl").tolist() == expected


def test_gold_per_column():
    frame = pd.DataFrame({"a": [1, 0], "b": ["true", "0"], "c": [0.0, 1.0]})
    assert gold.multilabel_columns(frame, ["a", "b", "c"], source="x.csv").tolist() == [[1, 1, 0], [0, 0, 1]]
    with pytest.raises(DataError, match=r"x.csv, line 3, column 'a': 2 is not 0 or 1"):
        gold.multilabel_columns(pd.DataFrame({"a": [1, 2], "b": [0, 0], "c": [0, 0]}), ["a", "b", "c"],
                                source="x.csv", lines=np.array([2, 3]))


@pytest.mark.parametrize("values, sep, message", [
    ([["a", "zzz"]], None, r"line 7, column 'label': label 'zzz' is not one the model knows"),
    (["a,b"], None, r"not a list of labels; pass --label-sep"),
    ([[5]], None, r"label id 5 is out of range"),
    ([3.5], None, r"multi-label gold is a list"),
])
def test_bad_gold_named_in_one_line(values, sep, message):
    with pytest.raises(DataError, match=message):
        gold.multilabel_gold(values, ["a", "b", "c"], sep=sep, source="x.jsonl", lines=np.array([7]))


def test_threshold_file(tmp_path):
    file = tmp_path / "t.json"
    file.write_text(json.dumps({"a": 0.2, "b": 0.7, "c": 0.5}))
    assert gold.read_thresholds(str(file), ["a", "b", "c"]).tolist() == [0.2, 0.7, 0.5]
    file.write_text(json.dumps({"a": 0.2, "b": 0.7}))
    with pytest.raises(DataError, match="no threshold for label 'c'"):
        gold.read_thresholds(str(file), ["a", "b", "c"])
    file.write_text(json.dumps({"a": 0.2, "b": 1.7, "c": 0.1}))
    with pytest.raises(DataError, match="threshold 1.7 of label 'b'"):
        gold.read_thresholds(str(file), ["a", "b", "c"])


def model_probs(checkpoint, texts):
    """The checkpoint's sigmoids computed here, independently of erroranalysis."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForSequenceClassification.from_pretrained(checkpoint).eval()
    with torch.no_grad():
        out = model(**tok(texts, padding=True, truncation=True, max_length=64, return_tensors="pt"))
    return torch.sigmoid(out.logits).numpy()


def test_run_end_to_end_matches_sklearn(ml_checkpoint, tmp_path):
    from sklearn import metrics as skm

    rows = multilabel_rows()
    data = write_jsonl(tmp_path / "eval.jsonl", rows)
    out = tmp_path / "run"
    result = invoke("run", "--model", ml_checkpoint, "--data", data, "--out", out, "--id-column", "id",
                    "--max-length", "64", "--threshold", "0.5", "--no-cluster", "--json")
    assert result.exit_code == 0, result.output
    run = Run.open(out)
    assert run.task == "multilabel" and run.labels == ML_LABELS
    probs = np.load(out / "probs.npy")
    assert probs.shape == (len(rows), len(ML_LABELS))
    np.testing.assert_allclose(probs, model_probs(ml_checkpoint, [r["text"] for r in rows]), atol=1e-4)
    t = np.array([[int(name in r["label"]) for name in ML_LABELS] for r in rows])
    p = (probs >= 0.5).astype(int)
    preds = pd.read_parquet(out / "predictions.parquet")
    assert preds["correct"].tolist() == (t == p).all(1).tolist()
    assert [list(m) for m in preds["missed"]] == [[n for j, n in enumerate(ML_LABELS) if t[i, j] and not p[i, j]]
                                                  for i in range(len(rows))]
    m = json.loads((out / "metrics.json").read_text())
    assert m["overall"]["micro_f1"] == pytest.approx(skm.f1_score(t, p, average="micro", zero_division=0))
    assert m["overall"]["macro_f1"] == pytest.approx(skm.f1_score(t, p, average="macro", zero_division=0))
    assert m["overall"]["subset_accuracy"] == pytest.approx(skm.accuracy_score(t, p))
    assert m["overall"]["hamming_loss"] == pytest.approx(skm.hamming_loss(t, p))
    for j, row in enumerate(m["per_class"]):
        if 0 < t[:, j].sum() < len(t):
            assert row["roc_auc"] == pytest.approx(skm.roc_auc_score(t[:, j], probs[:, j]), abs=1e-6)
    bce = -(t * np.log(probs) + (1 - t) * np.log(1 - probs)).mean(1)
    np.testing.assert_allclose(preds["loss"], bce, atol=1e-4)
    checks = json.loads((out / "checks.json").read_text())
    assert checks["label_issues"]["available"]  # cleanlab's multi-label confident learning ran
    summary = json.loads(result.stdout)
    assert summary["task"] == "multilabel" and "hamming_loss" in summary["overall"]
    shown = invoke("show", out)
    assert shown.exit_code == 0 and "Hamming loss" in shown.stdout and "Per label" in shown.stdout, shown.output


def test_gold_layouts_through_run(ml_checkpoint, tmp_path):
    rows = multilabel_rows(12)
    joined = [{**r, "label": ",".join(r["label"])} for r in rows]
    columns = [{k: v for k, v in r.items() if k != "label"} | {n: int(n in r["label"]) for n in ML_LABELS}
               for r in rows]
    runs = {}
    for name, data, extra in (("lists", rows, []), ("sep", joined, ["--label-sep", ","]),
                              ("columns", columns, ["--label-per-column"])):
        out = tmp_path / name
        result = invoke("run", "--model", ml_checkpoint, "--data", write_jsonl(tmp_path / f"{name}.jsonl", data),
                        "--out", out, "--id-column", "id", "--max-length", "64", "--no-cluster", "--no-slices",
                        "--no-data-checks", *extra)
        assert result.exit_code == 0, result.output
        runs[name] = pd.read_parquet(out / "predictions.parquet")["label"].tolist()
    assert runs["lists"] == runs["sep"] == runs["columns"]
    assert "channel" not in ML_LABELS


def test_bad_gold_refused_before_anything_is_written(ml_checkpoint, tmp_path):
    rows = multilabel_rows(6)
    rows[3]["label"] = ["billing", "shipping"]
    out = tmp_path / "run"
    result = invoke("run", "--model", ml_checkpoint, "--data", write_jsonl(tmp_path / "e.jsonl", rows), "--out", out)
    assert_user_error(result, r"e.jsonl, line 4, column 'label': label 'shipping' is not one the model knows")
    assert not out.exists()


def test_planted_group_always_missing_one_label_is_found(ml_checkpoint, tmp_path):
    """The model never predicts `billing` (its threshold is 0.999); every ticket mentioning a refund has billing
    among its gold labels, the rest have exactly what the model predicts: the failures are that group, and the
    slice search and the clusters name it."""
    import erroranalysis as ea

    texts = [f"{'refund' if i % 5 == 0 else 'question'} about the order number {i} "
             f"{['crash', 'wish', 'great', 'please'][i % 4]}" for i in range(80)]
    probs = model_probs(ml_checkpoint, texts)
    thresholds = {"billing": 0.999, "bug": 0.5, "feature": 0.5, "praise": 0.5}
    predicted = [[n for j, n in enumerate(ML_LABELS) if probs[i, j] >= thresholds[n]] for i in range(len(texts))]
    rows = [{"id": f"p{i}", "text": t, "label": predicted[i] + (["billing"] if "refund" in t else [])}
            for i, t in enumerate(texts)]
    file = tmp_path / "thresholds.json"
    file.write_text(json.dumps(thresholds))
    run = ea.run(ml_checkpoint, rows, out=tmp_path / "run", id="id", task_options={"threshold": str(file)},
                 infer={"max_length": 64}, checks=None)
    preds = run.predictions
    failing = preds[~preds["correct"]]
    assert set(failing["text"]) == {t for t in texts if "refund" in t}
    assert all(list(m) == ["billing"] for m in failing["missed"])
    top = run.slices.iloc[0]
    assert "refund" in top["description"] and top["error_rate"] == 1.0, run.slices.head()
    clusters = run.clusters
    assert len(clusters) >= 1 and "billing" in " ".join(map(str, clusters["gold_labels"].iloc[0]))


@pytest.mark.slow
def test_ray_gives_the_in_process_answers(ml_checkpoint, local_ray, tmp_path):
    """--engine ray on a multi-label head: the workers read the sigmoids as the local engine does."""
    from erroranalysis.engines import Engine
    from erroranalysis.sources.table import DataOptions
    from erroranalysis.stages import AfterParams, InferParams, run_checkpoint

    data = write_jsonl(tmp_path / "eval.jsonl", multilabel_rows(40))
    after = AfterParams(checks=None, slices=None, cluster=None)
    runs = {}
    for name in ("local", "ray"):
        runs[name] = run_checkpoint(ml_checkpoint, data, tmp_path / name, data_opts=DataOptions(id_column="id"),
                                    infer_opts=InferParams(batch_size=8, max_length=64), after=after,
                                    engine=Engine(name, concurrency=1 if name == "ray" else None))
    a, b = runs["local"].predictions(), runs["ray"].predictions()
    for column in ("label", "pred", "correct", "missed", "spurious"):
        assert [str(x) for x in a[column]] == [str(x) for x in b[column]], column
    np.testing.assert_allclose(np.asarray(runs["ray"].probs()), np.asarray(runs["local"].probs()), atol=1e-5)
    assert runs["local"].metrics()["overall"] == runs["ray"].metrics()["overall"]


def test_analyze_predictions_made_elsewhere(tmp_path):
    """`analyze --task multilabel`: gold lists and prob_<label> sigmoids from another framework; the predictions at
    --threshold and the metrics match scikit-learn on the same arrays; a pred column is read as given."""
    from sklearn import metrics as skm

    import erroranalysis as ea

    t, _, probs = arrays(seed=2, n=60, k=3)
    names = ["a", "b", "c"]
    frame = pd.DataFrame({"text": [f"text {i} " + " ".join(names[j] for j in np.flatnonzero(t[i])) for i in
                                   range(60)], "label": [[names[j] for j in np.flatnonzero(r)] for r in t],
                          **{f"prob_{n}": probs[:, j] for j, n in enumerate(names)}})
    run = ea.analyze(frame, task="multilabel", task_options={"threshold": 0.6}, out=tmp_path / "a", checks=None,
                     slices=None, cluster=None)
    p = (probs >= 0.6).astype(int)
    o = run.metrics.raw["overall"]
    assert o["micro_f1"] == pytest.approx(skm.f1_score(t, p, average="micro", zero_division=0))
    assert o["subset_accuracy"] == pytest.approx(skm.accuracy_score(t, p))
    assert run.metrics.raw["per_class"][1]["roc_auc"] == pytest.approx(skm.roc_auc_score(t[:, 1], probs[:, 1]))
    given = frame.drop(columns=[f"prob_{n}" for n in names]).assign(pred=["a|b"] * 60, label=[
        "|".join(names[j] for j in np.flatnonzero(r)) for r in t])
    path = tmp_path / "given.csv"
    given.to_csv(path, index=False)
    out = tmp_path / "b"
    result = invoke("analyze", "--predictions", path, "--task", "multilabel", "--label-sep", "|", "--out", out,
                    "--no-cluster", "--no-slices", "--no-data-checks")
    assert result.exit_code == 0, result.output
    preds = pd.read_parquet(out / "predictions.parquet")
    assert preds["pred"].unique().tolist() == ["a | b"]
    assert preds["correct"].tolist() == (t == [1, 1, 0]).all(1).tolist()


@pytest.mark.parametrize("task", ["multilabel", "classification"])
def test_a_probability_outside_0_1_is_one_line_naming_line_and_column(tmp_path, task):
    """Bring-your-own prob_<label> columns of either task go through one reader: a value that is not a
    probability is refused at its line and column, exit 2, and no run is left behind."""
    rows = [{"text": f"text {i}", "label": "a" if task == "classification" else "a|b",
             **({"pred": "a"} if task == "classification" else {}), "prob_a": 0.9, "prob_b": 0.1} for i in range(6)]
    rows[3]["prob_b"] = 1.5
    path = tmp_path / "preds.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    out = tmp_path / "run"
    result = invoke("analyze", "--predictions", path, "--task", task, "--label-sep", "|", "--out", out,
                    "--no-cluster", "--no-slices", "--no-data-checks")
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"error: {path}, line 5, column 'prob_b': probability 1.5 is not a number in [0, 1]."
    assert "Traceback" not in result.output
    assert not out.exists()

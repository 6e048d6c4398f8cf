"""Regression heads: metrics against scikit-learn and scipy on the same arrays, the failure rule (tolerance,
relative tolerance, the worst decile by default), a real run of a tiny regression checkpoint, and a planted group
with a large bias found as a slice."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from task_fixtures import build_head, regression_rows, write_jsonl
from test_cli_run import assert_user_error, invoke

from erroranalysis.core.errors import DataError
from erroranalysis.infer.predictions import Reading, within, worst_decile
from erroranalysis.metrics.regression import compute_regression_metrics
from erroranalysis.rundir import Run
from erroranalysis.sources.gold import regression_gold


@pytest.fixture(scope="module")
def rg_checkpoint(tmp_path_factory):
    return build_head(tmp_path_factory.mktemp("rg") / "ck", num_labels=1, problem_type="regression", seed=5)


def test_metrics_match_sklearn_and_scipy():
    from scipy.stats import spearmanr
    from sklearn import metrics as skm

    rng = np.random.default_rng(0)
    t = rng.normal(3, 1, 400)
    p = t + rng.normal(0.2, 0.5, 400)
    ok = np.abs(p - t) <= 0.6
    o = compute_regression_metrics(t, p, ok, n_resamples=200)["overall"]
    assert o["mae"] == pytest.approx(skm.mean_absolute_error(t, p))
    assert o["rmse"] == pytest.approx(np.sqrt(skm.mean_squared_error(t, p)))
    assert o["r2"] == pytest.approx(skm.r2_score(t, p))
    assert o["spearman"] == pytest.approx(spearmanr(t, p).statistic)
    assert o["bias"] == pytest.approx(np.mean(p - t))
    assert o["residual_quantiles"]["q50"] == pytest.approx(np.median(p - t))
    assert o["n_failures"] == int((~ok).sum())
    assert o["mae_ci"][0] <= o["mae"] <= o["mae_ci"][1]


def test_failure_rules():
    error, target = np.array([0.5, -2.0, 1.0]), np.array([10.0, 10.0, 1.0])
    assert within(error, target, Reading("regression", tolerance=1.0)).tolist() == [True, False, True]
    assert within(error, target, Reading("regression", tolerance=0.1, relative=True)).tolist() == [True, False,
                                                                                                   False]
    correct, tolerance = worst_decile(np.arange(100, dtype=float))
    assert (~correct).sum() == 10 and tolerance == pytest.approx(89.1)


def test_bad_targets_named():
    with pytest.raises(DataError, match=r"e.csv, line 3, column 'score': 'high' is not a number"):
        regression_gold([1.0, "high"], source="e.csv", lines=np.array([2, 3]), column="score")


def test_run_end_to_end(rg_checkpoint, tmp_path):
    import torch
    from scipy.stats import spearmanr
    from sklearn import metrics as skm
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    rows = regression_rows()
    out = tmp_path / "run"
    result = invoke("run", "--model", rg_checkpoint, "--data", write_jsonl(tmp_path / "e.jsonl", rows), "--out", out,
                    "--id-column", "id", "--max-length", "64", "--no-cluster")
    assert result.exit_code == 0, result.output
    assert "MAE" in result.stdout
    run = Run.open(out)
    assert run.task == "regression"
    tok = AutoTokenizer.from_pretrained(rg_checkpoint)
    model = AutoModelForSequenceClassification.from_pretrained(rg_checkpoint).eval()
    with torch.no_grad():
        expected = model(**tok([r["text"] for r in rows], padding=True, return_tensors="pt")).logits[:, 0].numpy()
    preds = pd.read_parquet(out / "predictions.parquet")
    np.testing.assert_allclose(preds["prediction"], expected, atol=1e-4)
    t = np.array([r["label"] for r in rows])
    m = json.loads((out / "metrics.json").read_text())["overall"]
    assert m["mae"] == pytest.approx(skm.mean_absolute_error(t, expected), abs=1e-5)
    assert m["r2"] == pytest.approx(skm.r2_score(t, expected), abs=1e-5)
    assert m["spearman"] == pytest.approx(spearmanr(t, expected).statistic, abs=1e-5)
    # default failures: the worst decile of |error|
    abs_error = np.abs(expected - t)
    assert set(preds.loc[~preds["correct"], "example_id"]) == {rows[i]["id"] for i in
                                                               np.flatnonzero(abs_error > np.quantile(abs_error, 0.9))}
    assert m["tolerance"]["rule"] == "worst decile of |error|"
    checks = json.loads((out / "checks.json").read_text())
    assert not checks["label_issues"]["available"] and "regression" in checks["label_issues"]["reason"]
    shown = invoke("show", out)
    assert shown.exit_code == 0 and "MAE" in shown.stdout, shown.output
    assert invoke("report", out, "--out", tmp_path / "r.html").exit_code == 0


def test_tolerance_option(rg_checkpoint, tmp_path):
    rows = regression_rows(20)
    out = tmp_path / "run"
    result = invoke("run", "--model", rg_checkpoint, "--data", write_jsonl(tmp_path / "e.jsonl", rows), "--out", out,
                    "--max-length", "64", "--tolerance", "1.5", "--no-cluster", "--no-slices", "--no-data-checks")
    assert result.exit_code == 0, result.output
    preds = pd.read_parquet(out / "predictions.parquet")
    assert preds["correct"].tolist() == (preds["abs_error"] <= 1.5).tolist()
    assert Run.open(out).manifest["task_params"]["tolerance"] == 1.5


def test_bad_target_refused_before_anything_is_written(rg_checkpoint, tmp_path):
    rows = regression_rows(5)
    rows[2]["label"] = "high"
    out = tmp_path / "run"
    result = invoke("run", "--model", rg_checkpoint, "--data", write_jsonl(tmp_path / "e.jsonl", rows), "--out", out)
    assert_user_error(result, r"e.jsonl, line 3, column 'label': 'high' is not a number")
    assert not out.exists()


def test_planted_bias_group_found(rg_checkpoint, tmp_path):
    """Gold = the model's own prediction, except that texts about refurbished items are scored 3 points higher:
    the failures (|error| > 1) are that group, and the slice search finds it."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    import erroranalysis as ea

    texts = [f"{'refurbished' if i % 6 == 0 else 'new'} laptop review {i} " + "fine " * (i % 3) for i in range(90)]
    tok = AutoTokenizer.from_pretrained(rg_checkpoint)
    model = AutoModelForSequenceClassification.from_pretrained(rg_checkpoint).eval()
    with torch.no_grad():
        value = model(**tok(texts, padding=True, return_tensors="pt")).logits[:, 0].numpy()
    rows = [{"id": f"b{i}", "text": t, "label": float(value[i]) + (3.0 if "refurbished" in t else 0.0)}
            for i, t in enumerate(texts)]
    run = ea.run(rg_checkpoint, rows, out=tmp_path / "run", id="id", task="regression",
                 task_options={"tolerance": 1.0}, infer={"max_length": 64}, checks=None, cluster=None)
    failing = run.predictions[~run.predictions["correct"]]
    assert set(failing["text"]) == {t for t in texts if "refurbished" in t}
    assert run.metrics.raw["overall"]["bias"] == pytest.approx(-3.0 * 15 / 90, abs=1e-3)
    top = run.slices.iloc[0]
    assert "refurbished" in top["description"] and top["error_rate"] == 1.0


def test_ray_without_tolerance_refused(rg_checkpoint, tmp_path):
    out = tmp_path / "run"
    result = invoke("run", "--model", rg_checkpoint, "--data", write_jsonl(tmp_path / "e.jsonl", regression_rows(6)),
                    "--out", out, "--engine", "ray")
    assert_user_error(result, r"--engine.*local for a regression run without --tolerance")
    assert not out.exists()


def test_compare_needs_one_failure_rule(rg_checkpoint, tmp_path):
    data = write_jsonl(tmp_path / "e.jsonl", regression_rows(20))
    common = ["--data", data, "--max-length", "64", "--no-cluster", "--no-slices", "--no-data-checks"]
    for name, extra in (("a", []), ("b", []), ("c", ["--tolerance", "1"]), ("d", ["--tolerance", "1"])):
        assert invoke("run", "--model", rg_checkpoint, "--out", tmp_path / name, *common, *extra).exit_code == 0
    assert_user_error(invoke("compare", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "ab"),
                      r"regression runs are compared on one failure rule.*same --tolerance")
    result = invoke("compare", tmp_path / "c", tmp_path / "d", "--out", tmp_path / "cd", "--json")
    assert result.exit_code == 0, result.output
    assert "regression runs" in (tmp_path / "cd" / "compare.md").read_text()


def test_trainer_callback_refuses_a_regression_model_in_memory(rg_checkpoint):
    from transformers import AutoModelForSequenceClassification

    from erroranalysis.core.errors import ModelError
    from erroranalysis.stages.steps import refuse_other_heads

    model = AutoModelForSequenceClassification.from_pretrained(rg_checkpoint)
    with pytest.raises(ModelError, match=r"sequence regression .* head .*erroranalysis run --model CHECKPOINT"):
        refuse_other_heads(model)


def test_analyze_values_made_elsewhere(tmp_path):
    from sklearn import metrics as skm

    import erroranalysis as ea

    rng = np.random.default_rng(1)
    t = rng.normal(size=50)
    p = t + rng.normal(scale=0.3, size=50)
    frame = pd.DataFrame({"text": [f"row {i}" for i in range(50)], "label": t, "pred": p})
    run = ea.analyze(frame, task="regression", task_options={"tolerance": 0.4}, out=tmp_path / "a", checks=None,
                     slices=None, cluster=None)
    o = run.metrics.raw["overall"]
    assert o["rmse"] == pytest.approx(np.sqrt(skm.mean_squared_error(t, p)))
    assert o["n_failures"] == int((np.abs(p - t) > 0.4).sum())
    assert run.task == "regression"

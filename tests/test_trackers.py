"""`--log-to mlflow|wandb|tensorboard` on run, analyze, compare, watch and timeline, read back from what each
tracker wrote: a real MLflow file store (read with MLflow's client), W&B in offline mode (its transaction log),
TensorBoard event files (read with TensorBoard's EventAccumulator). A tracker that is not installed is one line
with the install command, before any work. And the Trainer callback's keys reach MLflow grouped as TensorBoard and
W&B show them."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from conftest import LABELS, eval_rows, write_jsonl
from tracker_logs import (
    mlflow_artifacts,
    mlflow_runs,
    tensorboard_scalars,
    tensorboard_texts,
    wandb_history,
)
from typer.testing import CliRunner

from erroranalysis.cli.app import app
from erroranalysis.rundir import Run, readers

RUN = ["--id-column", "id", "--max-length", "32", "--check-embedder", "none", "--no-merge", "--embedder", "hidden",
       "--reducer", "pca", "--layout", "none", "--min-failures", "2"]


def cli(*args, code: int = 0):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result


@pytest.fixture
def trackers(tmp_path, monkeypatch):
    """MLflow on a file store, W&B offline, TensorBoard under tmp_path."""
    store = tmp_path / "mlruns"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wandb").mkdir()
    return {"mlflow": store, "wandb": tmp_path / "wandb", "tensorboard": tmp_path / "tb"}


@pytest.mark.slow
def test_a_run_reaches_all_three_trackers(tiny_checkpoint, tmp_path, trackers):
    data = write_jsonl(tmp_path / "eval.jsonl", eval_rows(60))
    out = tmp_path / "runs" / "base"
    cli("run", "--model", tiny_checkpoint, "--data", data, "--out", out, *RUN, "--log-to", "mlflow", "--log-to",
        "wandb", "--log-to", "tensorboard", "--log-dir", trackers["tensorboard"])
    run = Run.open(out)
    metrics, clusters = run.metrics(), readers.read_clusters(run)
    expected = {"ea/accuracy": metrics["overall"]["accuracy"], "ea/macro_f1": metrics["overall"]["macro_f1"],
                **{f"ea/f1/{c['label']}": c["f1"] for c in metrics["per_class"]},
                **{f"ea/cluster/{int(i)}": float(s) for i, s in zip(clusters["cluster_id"], clusters["size"])}}

    (logged,) = mlflow_runs(trackers["mlflow"])
    assert logged.info.run_name == "base" and logged.data.params["task"] == "classification"
    for key, value in expected.items():
        assert logged.data.metrics[key] == pytest.approx(value), key
    assert mlflow_artifacts(trackers["mlflow"], logged.info.run_id, "erroranalysis") == ["erroranalysis/base.html"]
    tables = mlflow_artifacts(trackers["mlflow"], logged.info.run_id, "ea")
    assert {"ea/per_class.json", "ea/clusters.json"} <= set(tables)

    rows, artifacts = wandb_history(trackers["wandb"])
    values = {k: v for row in rows for k, v in row.items()}
    for key, value in expected.items():
        assert values[key] == pytest.approx(value), key
    assert values["ea/per_class/_type"] == "table-file" and "erroranalysis-report:base.html" in artifacts

    scalars = tensorboard_scalars(trackers["tensorboard"] / "base")
    for key, value in expected.items():
        assert scalars[key] == [(0, pytest.approx(value))], key
    texts = tensorboard_texts(trackers["tensorboard"] / "base")
    assert texts["ea/per_class"].startswith("| label | precision |") and "HTML report:" in texts["ea/report"]


def test_analyze_compare_and_timeline_log_to_tensorboard(tmp_path, trackers):
    rows = eval_rows(60)
    frame = pd.DataFrame(rows)
    steps = tmp_path / "exp"
    for step, share in ((1, 0.4), (2, 0.1)):
        wrong = frame.index % 10 < share * 10
        other = {label: LABELS[(i + 1) % len(LABELS)] for i, label in enumerate(LABELS)}
        table = frame.assign(pred=frame["label"].where(~wrong, frame["label"].map(other)))
        path = tmp_path / f"s{step}.csv"
        table.to_csv(path, index=False)
        cli("analyze", "-p", path, "--out", steps / f"step-{step:06d}", "--id-column", "id", "--no-data-checks",
            "--no-cluster", "--no-slices", "--log-to", "tensorboard", "--log-dir", trackers["tensorboard"])
    first = tensorboard_scalars(trackers["tensorboard"] / "step-000001")
    assert first["ea/accuracy"] == [(0, pytest.approx(0.6))]
    cli("compare", steps / "step-000001", steps / "step-000002", "--resamples", "50", "--log-to", "tensorboard",
        "--log-dir", trackers["tensorboard"])
    (folder,) = [p for p in trackers["tensorboard"].iterdir() if p.name.startswith("compare")]
    compared = tensorboard_scalars(folder)
    assert compared["ea/compare/step-000002/delta/accuracy"] == [(0, pytest.approx(0.3))]
    assert compared["ea/compare/step-000002/fixed"] == [(0, 18.0)]
    cli("timeline", steps, "--log-to", "tensorboard", "--log-dir", trackers["tensorboard"] / "timeline")
    timeline = tensorboard_scalars(trackers["tensorboard"] / "timeline" / "exp")
    assert timeline["ea/accuracy"] == [(1, pytest.approx(0.6)), (2, pytest.approx(0.9))]
    assert [s for s, _ in timeline[f"ea/f1/{LABELS[0]}"]] == [1, 2]


@pytest.mark.slow
def test_watch_logs_each_step_as_it_lands(tiny_checkpoint, tmp_path, trackers):
    data = write_jsonl(tmp_path / "eval.jsonl", eval_rows(40))
    output = tmp_path / "output"
    for step in (2, 4):
        shutil.copytree(tiny_checkpoint, output / f"checkpoint-{step}")
        (output / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps(
            {"global_step": step, "log_history": [{"step": step, "loss": 1.0 / step}]}))
    cli("watch", output, "--data", data, "--out", tmp_path / "steps", "--once", "--id-column", "id",
        "--max-length", "32", "--no-cluster", "--no-slices", "--settle", "0", "--wait", "0", "--log-to", "mlflow")
    (logged,) = mlflow_runs(trackers["mlflow"])
    assert logged.info.run_name == "steps"
    from mlflow.tracking import MlflowClient

    history = MlflowClient(tracking_uri=trackers["mlflow"].as_uri()).get_metric_history(logged.info.run_id,
                                                                                         "ea/accuracy")
    assert sorted(m.step for m in history) == [2, 4]


@pytest.mark.parametrize("tracker, title", [("mlflow", "MLflow"), ("wandb", "Weights & Biases"),
                                            ("tensorboard", "TensorBoard")])
def test_a_missing_tracker_is_one_line_with_the_install_command(tmp_path, monkeypatch, tracker, title):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == tracker else real(name, *a))
    path = tmp_path / "p.csv"
    pd.DataFrame(eval_rows(10)).assign(pred="pos").to_csv(path, index=False)
    result = cli("analyze", "-p", path, "--out", tmp_path / "r", "--log-to", tracker, code=2)
    assert result.output.strip() == f"error: --log-to {tracker} needs {title}: pip install 'erroranalysis-ml[{tracker}]'."
    assert not (tmp_path / "r").exists()


def test_an_unknown_tracker_is_refused_by_its_declaration(tmp_path):
    result = cli("timeline", tmp_path, "--log-to", "comet", code=2)
    assert "--log-to 'comet' is invalid: expected names from: mlflow, wandb, tensorboard." in result.output


@pytest.mark.slow
def test_the_trainer_callback_reaches_mlflow_grouped_as_elsewhere(tmp_path, trackers, monkeypatch):
    from test_trainer_callback import FAST, make_trainer

    from erroranalysis import stages
    from erroranalysis.integrations import attach
    from erroranalysis.sources.table import DataOptions

    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "trainer")
    data = write_jsonl(tmp_path / "eval.jsonl", eval_rows(60))
    trainer = make_trainer(tmp_path, report_to=["mlflow"], max_steps=4, eval_steps=2)
    attach(trainer, data, out=tmp_path / "runs" / "exp", data=DataOptions(id_column="id"), after=FAST,
           infer=stages.InferParams(max_length=32, batch_size=16))
    trainer.train()
    (logged,) = mlflow_runs(trackers["mlflow"], "trainer")
    keys = set(logged.data.metrics)
    assert {"eval/ea/accuracy", "eval/ea/macro_f1", f"eval/ea/f1/{LABELS[0]}", "eval/ea/types"} <= keys
    assert not [k for k in keys if k.startswith("eval_ea/")]  # not beside eval_loss in a group of their own
    assert "eval_loss" in keys  # the Trainer's own keys are as MLflow's integration logs them
    steps = readers.read_metrics(Run.open(tmp_path / "runs" / "exp" / "step-000004"))["overall"]["accuracy"]
    assert logged.data.metrics["eval/ea/accuracy"] == pytest.approx(steps)

"""`erroranalysis log` and the API's `log_to` against real local backends: MLflow over a SQLite store (its client,
its database), TensorBoard event files read back, W&B offline (its transaction log). A finished run joins the
training run's tracker run (`--tracker-run`); error types are keyed by their taxonomy label or the timeline's id,
never by a size rank; the tracker's settings are refused before any work."""

from __future__ import annotations

import time

import pandas as pd
import pytest
from conftest import LABELS, eval_rows
from tracker_logs import tensorboard_scalars, wandb_history
from typer.testing import CliRunner

import erroranalysis as ea
from erroranalysis.cli.app import app
from erroranalysis.core.errors import UserError
from erroranalysis.rundir import Run, readers

ANALYZE = ["--id-column", "id", "--no-data-checks", "--no-slices", "--check-embedder", "none", "--no-merge",
           "--reducer", "pca", "--layout", "none", "--min-failures", "2", "--min-cluster-size", "3"]


def cli(*args, code: int = 0):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result


def predictions(tmp_path, name: str = "preds", share: float = 0.5):
    frame = pd.DataFrame(eval_rows(60))
    other = {label: LABELS[(i + 1) % len(LABELS)] for i, label in enumerate(LABELS)}
    wrong = frame.index % 10 < share * 10
    path = tmp_path / f"{name}.csv"
    frame.assign(pred=frame["label"].where(~wrong, frame["label"].map(other))).to_csv(path, index=False)
    return path


@pytest.fixture
def mlflow_db(tmp_path, monkeypatch):
    """MLflow on a SQLite store in tmp_path (artifacts beside it: MLflow puts them under the working folder)."""
    pytest.importorskip("sqlalchemy")
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """One clustered run of predictions made elsewhere, with half its failures' first cluster labeled."""
    from erroranalysis.labels import LabelStore, labels_db_for

    root = tmp_path_factory.mktemp("made")
    out = root / "runs" / "base"
    cli("analyze", "-p", predictions(root), "--out", out, *ANALYZE)
    run = Run.open(out)
    assign = readers.read_assignments(run)
    first = assign.loc[assign["cluster_id"] == 0, "example_id"].tolist()
    store = LabelStore(labels_db_for(out), user="ann")
    store.create_error_type("Sarcasm", "praise that means the opposite")
    store.assign(store.run_key(run), first, "Sarcasm")
    return out


def test_a_finished_run_joins_the_training_run_in_mlflow_sqlite(made, mlflow_db):
    experiment = mlflow_db.create_experiment("training")
    training = mlflow_db.create_run(experiment, run_name="fine-tune").info.run_id
    mlflow_db.log_param(training, "lr", "2e-5")
    mlflow_db.log_metric(training, "loss", 0.5, step=100)
    result = cli("log", made, "--log-to", "mlflow", "--tracker-run", training)
    assert f"to MLflow run {training} at sqlite:///" in result.output  # where it went, for people

    run = mlflow_db.get_run(training)
    metrics, clusters = Run.open(made).metrics(), readers.read_clusters(Run.open(made))
    assert run.data.metrics["ea/accuracy"] == pytest.approx(metrics["overall"]["accuracy"])
    assert run.data.metrics["loss"] == 0.5 and run.data.params == {"lr": "2e-5"}  # the training run's own
    assert run.data.tags["ea.name"] == "base" and run.info.status == "RUNNING"  # its owner ends it, not us
    # error types by taxonomy label; unlabeled clusters add up, their size ranks are never keys
    sizes = dict(zip(clusters["cluster_id"], clusters["size"]))
    assert run.data.metrics["ea/type/Sarcasm"] == sizes[0]
    assert run.data.metrics["ea/unkeyed_failures"] == sum(sizes.values()) - sizes[0]
    assert not [k for k in run.data.metrics if k.startswith("ea/cluster/")]
    artifacts = [a.path for a in mlflow_db.list_artifacts(training, "erroranalysis")]
    assert artifacts == ["erroranalysis/base.html"]
    table = [a.path for a in mlflow_db.list_artifacts(training, "ea")]
    assert "ea/clusters.json" in table

    cli("log", made, "--log-to", "mlflow", "--no-log-report", "--log-project", "evals")
    (own,) = mlflow_db.search_runs([mlflow_db.get_experiment_by_name("evals").experiment_id])
    assert own.info.run_name == "base" and own.info.status == "FINISHED" and own.data.params["task"] == "classification"


def test_tracker_settings_are_refused_before_any_work(tmp_path, mlflow_db, monkeypatch):
    path = predictions(tmp_path)
    out = tmp_path / "r"
    result = cli("analyze", "-p", path, "--out", out, "--log-to", "mlflow", "--tracker-run", "0" * 32, code=2)
    assert result.output.startswith("error: --log-to mlflow: run 00000000000000000000000000000000 at sqlite:")
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()
    result = cli("analyze", "-p", path, "--out", out, "--log-to", "mlflow", "--log-to", "tensorboard",
                 "--tracker-run", "abc", code=2)
    assert "give exactly one --log-to" in result.output and not out.exists()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    result = cli("analyze", "-p", path, "--out", out, "--log-to", "mlflow", code=2)
    assert "is MLflow's file store, which MLflow 3 refuses; set MLFLOW_TRACKING_URI=sqlite:///mlflow.db" in result.output
    assert not out.exists()
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    result = cli("analyze", "-p", path, "--out", out, "--log-to", "wandb", code=2)
    assert "no W&B API key" in result.output and "WANDB_MODE=offline" in result.output and not out.exists()
    monkeypatch.setenv("WANDB_MODE", "offline")
    result = cli("log", tmp_path, "--log-to", "wandb", "--log-project", "a/b", code=2)
    assert "--log-project 'a/b'" in result.output
    with pytest.raises(UserError, match="file store"):
        ea.analyze(pd.read_csv(path), id="id", out=out, log_to="mlflow")
    assert not out.exists()


def test_a_timeline_goes_to_a_tensorboard_run_and_keeps_its_type_ids(tmp_path):
    steps = tmp_path / "exp"
    for step, share in ((1, 0.5), (2, 0.4)):
        cli("analyze", "-p", predictions(tmp_path, f"s{step}", share), "--out", steps / f"step-{step:06d}",
            *ANALYZE)
    cli("log", steps, "--log-to", "tensorboard", "--log-dir", tmp_path / "tb", "--tracker-run", "fine-tune")
    scalars = tensorboard_scalars(tmp_path / "tb" / "fine-tune")
    assert [s for s, _ in scalars["ea/accuracy"]] == [1, 2]
    types = sorted(k for k in scalars if k.startswith("ea/type/"))
    assert types and all(k.removeprefix("ea/type/").startswith("T") for k in types)
    doc = ea.stages.build_timeline(steps)
    for t in doc["types"]:
        assert [(s["step"], float(s["size"])) for s in t["steps"]] == \
            [(s, v) for s, v in scalars[f"ea/type/{t['type_id']}"]]
    # one step run logged alone keys its clusters by the same timeline ids
    cli("log", steps / "step-000002", "--log-to", "tensorboard", "--log-dir", tmp_path / "tb2")
    alone = tensorboard_scalars(tmp_path / "tb2" / "step-000002")
    at_two = {f"ea/type/{t['type_id']}": float(s["size"]) for t in doc["types"] for s in t["steps"] if s["step"] == 2}
    assert {k: v[0][1] for k, v in alone.items() if k.startswith("ea/type/")} == at_two


def test_wandb_offline_resumes_the_training_run_path(made, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    result = cli("log", made, "--log-to", "wandb", "--tracker-run", "fine-tune/abc123", "--no-log-report")
    assert "to W&B run fine-tune/abc123 (offline: wandb sync " in result.output
    (log,) = list(tmp_path.rglob("run-*.wandb"))
    assert log.name.endswith("-abc123.wandb")
    for _ in range(60):  # W&B's own service process writes the log; under load it may trail finish() a little
        rows, _ = wandb_history(tmp_path)
        values = {k: v for row in rows for k, v in row.items()}
        if "ea/accuracy" in values:
            break
        time.sleep(0.5)
    assert values["ea/accuracy"] == pytest.approx(Run.open(made).metrics()["overall"]["accuracy"])
    assert "ea/type/Sarcasm" in values and not [k for k in values if k.startswith("ea/cluster/")]


def test_the_python_api_logs_a_run(made, mlflow_db, tmp_path):
    run = ea.open(made)
    assert run.log_to("tensorboard", log_dir=str(tmp_path / "tb"), log_report=False) == [
        f"TensorBoard run {tmp_path / 'tb' / 'base'}"]
    assert tensorboard_scalars(tmp_path / "tb" / "base")["ea/type/Sarcasm"][0][1] > 0
    made_here = ea.analyze(pd.read_csv(predictions(tmp_path)), id="id", out=tmp_path / "new", checks=None,
                           slices=None, cluster=None, log_to=["mlflow"])
    (logged,) = mlflow_db.search_runs([mlflow_db.get_experiment_by_name("erroranalysis").experiment_id])
    assert logged.info.run_name == "new" and logged.data.metrics["ea/accuracy"] == made_here.metrics.raw[
        "overall"]["accuracy"]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_mlflow_tracking_server(made, tmp_path, monkeypatch):
    """MLflow's own tracking server (`mlflow server` over SQLite): a run joined over HTTP; a server that is down is
    one line before any work."""
    import subprocess
    import sys
    import time
    import urllib.request

    pytest.importorskip("fastapi")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                               f"sqlite:///{tmp_path / 'server.db'}", "--default-artifact-root",
                               str(tmp_path / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
                               "--workers", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(240):  # it starts in 20 to 60 s on two busy cores
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        uri = f"http://127.0.0.1:{port}"
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        training = client.create_run(client.create_experiment("training")).info.run_id
        cli("log", made, "--log-to", "mlflow", "--tracker-run", training)
        run = client.get_run(training)
        assert run.data.metrics["ea/accuracy"] == pytest.approx(Run.open(made).metrics()["overall"]["accuracy"])
        assert [a.path for a in client.list_artifacts(training, "erroranalysis")] == ["erroranalysis/base.html"]
    finally:
        server.terminate()
        server.wait(30)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    out = tmp_path / "r"
    result = cli("analyze", "-p", predictions(tmp_path), "--out", out, "--log-to", "mlflow", code=2)
    assert "--log-to mlflow: the tracking store at http://127.0.0.1:" in result.output and "cannot be reached" in \
        result.output and not out.exists()

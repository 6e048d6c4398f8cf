"""The Training page (issue 7) without a browser: the checkpoint's log found from the manifest, findings listed and
marked on the curves, a typed log path, paths outside the workspace refused, runs without a log."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from app_session import app_env, open_app, texts
from conftest import eval_rows, write_jsonl
from streamlit.testing.v1 import AppTest
from ui_fixtures import make_run

from erroranalysis import rundir
from erroranalysis.checklist.training import diagnose
from erroranalysis.checklist.training_log import read_trainer_state
from erroranalysis.core import files
from erroranalysis_ui.eaui import charts, state


def history(nan_at: int | None = None) -> list[dict]:
    """A Hugging Face log_history: loss falling, warm-up then decay, evaluation every 100 steps."""
    rng = np.random.default_rng(0)
    out = []
    for step in range(10, 1001, 10):
        lr = 5e-5 * min(step / 100, (1000 - step) / 900)
        loss = 0.3 + 2 * math.exp(-step / 250) + rng.normal(0, 0.02)
        out.append({"step": step, "epoch": step / 500, "loss": float("nan") if step == nan_at else loss,
                    "grad_norm": float(np.exp(rng.normal(0, 0.15))), "learning_rate": lr})
        if step % 100 == 0:
            out.append({"step": step, "epoch": step / 500, "eval_loss": 0.35 + 2 * math.exp(-step / 250)})
    return out


def write_state(folder: Path, log_history: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 1000, "log_history": log_history}))  # NaN as NaN, like HF
    return path


def point_model_at(run_dir: Path, folder: str) -> None:
    """The one hand edit: a manifest whose model path is relative (read against the run folder)."""
    run = rundir.Run.open(run_dir)
    manifest = run.manifest
    manifest.setdefault("model", {})["path"] = folder
    files.write_json(run.file(rundir.MANIFEST), manifest)


def checkpoint_run(checkpoint: Path, data: Path, out: Path):
    """`erroranalysis run` with the checkpoint (inference and metrics only)."""
    from erroranalysis.sources.table import DataOptions
    from erroranalysis.stages import AfterParams, InferParams, run_checkpoint

    return run_checkpoint(checkpoint, data, out, data_opts=DataOptions(id_column="id"),
                          infer_opts=InferParams(batch_size=16, max_length=64),
                          after=AfterParams(cluster=None, slices=None, checks=None))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tiny_checkpoint):
    """news-a: made with a checkpoint outside the runs folder whose trainer_state.json has a NaN at step 500;
    news-b: made with a checkpoint since deleted; inside: its manifest names a relative checkpoint folder inside
    the run, with a healthy log; logs/: logs to type in."""
    root = tmp_path_factory.mktemp("ws")
    outside = tmp_path_factory.mktemp("checkpoints")
    data = write_jsonl(outside / "eval.jsonl", eval_rows())
    shutil.copytree(tiny_checkpoint, outside / "news-bert")
    write_state(outside / "news-bert", history(nan_at=500))
    checkpoint_run(outside / "news-bert", data, root / "news-a")
    shutil.copytree(tiny_checkpoint, outside / "gone")
    checkpoint_run(outside / "gone", data, root / "news-b")
    shutil.rmtree(outside / "gone")
    make_run(root / "inside", n=100, n_failures=20, seed=2, with_clusters=False)
    write_state(root / "inside" / "checkpoints" / "news-bert", history())
    point_model_at(root / "inside", "checkpoints/news-bert")
    (root / "logs").mkdir()
    write_state(root / "logs" / "spiky", history(nan_at=700))
    return root


@pytest.fixture()
def start(workspace, tmp_path, monkeypatch):
    app_env(monkeypatch, workspace, tmp_path / "labels.sqlite", user=None)

    def _start(run: str = "news-a") -> AppTest:
        return open_app("training", run)

    return _start


def test_the_checkpoint_log_and_a_planted_nan(start, workspace):
    at = start()
    assert at.title[0].value == "Training"
    assert not at.error, [e.value for e in at.error]
    shown = texts(at)
    assert "training loss is nan at step 500" in shown.replace("\\", "").lower()
    assert "What to do" in shown and "step 500" in shown.replace("\\", "").lower().replace(",", "")
    assert [m.label for m in at.metric] == ["Errors", "Warnings", "Notes", "Steps logged"]
    assert at.metric[0].value == "1"
    assert "trainer_state.json" in shown
    summary = at.dataframe[0].value
    assert set(summary["signal"]) == {"training loss", "validation loss", "grad norm", "learning rate"}
    assert summary.set_index("signal").loc["training loss", "non_finite"] == 1
    assert len(at.get("plotly_chart")) == 1


def test_findings_are_marked_on_the_curves(workspace, tmp_path):
    log = read_trainer_state(write_state(tmp_path, history(nan_at=500)))
    findings = [f.to_dict() for f in diagnose(log)]
    fig = charts.training_figure({n: (s.steps, s.values) for n, s in log.signals.items()}, findings)
    lines = [t for t in fig.data if t.mode and "lines" in t.mode]
    assert {t.name for t in lines} == {"training loss", "validation loss", "grad norm", "learning rate"}
    marks = [t for t in fig.data if t.mode == "markers"]
    nan = next(t for t in marks if t.name == "non finite")
    assert list(nan.x) == [500] and list(nan.marker.symbol) == ["x"]
    assert "NaN at step 500" in nan.hovertemplate
    assert any(shape.x0 == 500 for shape in fig.layout.shapes)  # the dotted line at the error's step
    assert not any(np.isinf(np.asarray(t.y, dtype=float)).any() for t in lines)  # inf would break the axes


def test_a_healthy_log_found_through_a_relative_checkpoint_path(start):
    at = start("inside")
    assert not at.error
    assert "No problems found" in at.success[0].value
    assert at.metric[0].value == "0"


def test_a_run_without_a_log_says_so(start):
    at = start("news-b")
    assert not at.exception and not at.error
    message = at.info[0].value
    assert "No training log" in message and "--allow-path" in message
    assert "erroranalysis training" in message


def test_the_log_is_the_runs_own_copy(workspace):
    """`erroranalysis run` copies the checkpoint's trainer_state.json into the run: the page reads that copy, so it
    works with the checkpoint folder outside the runs folder (which the app does not read)."""
    copied = rundir.readers.read_trainer_state(rundir.Run.open(workspace / "news-a"))
    assert copied == workspace / "news-a" / "trainer_state.json"
    folder = Path(rundir.Run.open(workspace / "news-a").manifest["model"]["path"])
    assert copied.read_bytes() == (folder / "trainer_state.json").read_bytes()
    assert rundir.readers.read_trainer_state(rundir.Run.open(workspace / "news-b")) is None


def test_a_typed_log_path_under_the_runs_folder(start):
    at = start("news-b")
    at.text_input(key=state.TRAINING_LOG).set_value("logs/spiky").run()
    assert not at.error, [e.value for e in at.error]
    assert "training loss is nan at step 700" in texts(at, plain=True).lower()


def test_paths_outside_the_workspace_are_refused(start, workspace, tmp_path):
    elsewhere = write_state(tmp_path / "elsewhere", history(nan_at=300))
    at = start("news-b")
    for typed in (str(elsewhere), "../" + elsewhere.parent.name, "/etc/passwd"):
        at.text_input(key=state.TRAINING_LOG).set_value(typed).run()
        assert not at.exception
        assert at.error and "outside" in at.error[0].value, typed
        assert "nan at step 300" not in texts(at, plain=True).lower()
    # A symlink inside the runs folder that leads out of it is refused too.
    link = workspace / "logs" / "sneaky"
    link.symlink_to(elsewhere.parent)
    try:
        at.text_input(key=state.TRAINING_LOG).set_value("logs/sneaky").run()
        assert at.error and "outside" in at.error[0].value
    finally:
        link.unlink()


def test_a_checkpoint_folder_outside_is_read_only_with_allow_path(start, workspace, monkeypatch):
    """The manifest naming a folder does not make it readable, for its own run or any other; --allow-path does."""
    folder = rundir.Run.open(workspace / "news-a").manifest["model"]["path"]
    for run in ("news-a", "news-b"):
        at = start(run)
        at.text_input(key=state.TRAINING_LOG).set_value(folder + "/trainer_state.json").run()
        assert at.error and "outside the folders this app may read" in at.error[0].value
        assert not at.metric or at.metric[0].value != "1"
    monkeypatch.setenv("ERRORANALYSIS_ALLOW_PATHS", str(Path(folder).parent))
    at = start("news-b")
    at.text_input(key=state.TRAINING_LOG).set_value(folder).run()
    assert not at.error and at.metric[0].value == "1"


def test_a_broken_log_is_one_message(start, workspace):
    (workspace / "logs" / "bad").mkdir(exist_ok=True)
    (workspace / "logs" / "bad" / "trainer_state.json").write_text('{"log_history": []}')
    at = start("news-b")
    at.text_input(key=state.TRAINING_LOG).set_value("logs/bad/trainer_state.json").run()
    assert not at.exception
    assert "empty log" in at.error[0].value

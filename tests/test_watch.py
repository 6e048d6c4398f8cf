"""Checkpoint watching: a checkpoint is analyzed only once complete, runs are named by step, a restarted watcher
skips what is done, and `erroranalysis watch --once` exits 0, 2 (not analyzed) or 3 (regression)."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import LABELS, eval_rows, write_jsonl
from typer.testing import CliRunner

from erroranalysis import stages
from erroranalysis.cli.app import app
from erroranalysis.integrations.watch import Watcher, checkpoint_ready
from erroranalysis.labels import labels_db_for
from erroranalysis.rundir import Run
from erroranalysis.sources.table import DataOptions

runner = CliRunner()
FAST = stages.AfterParams(checks=None, slices=None,
                          cluster=stages.ClusterParams(reducer="pca", layout="pca", min_failures=5))
OPTS = DataOptions(id_column="id")


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def biased_checkpoint(folder: Path, source: Path, favor: int) -> Path:
    """The tiny checkpoint with a classifier that always predicts class `favor` (a planted model)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(source)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.zero_()
        model.classifier.bias[favor] = 5.0
    model.save_pretrained(folder, safe_serialization=True)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return folder


def trainer_state(folder: Path, step: int) -> None:
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "epoch": step / 10, "log_history": [
        {"step": s, "loss": 1.0 / s, "learning_rate": 1e-4} for s in range(1, step + 1)]}))


def age(folder: Path, seconds: float = 120) -> None:
    past = time.time() - seconds
    for p in folder.rglob("*"):
        os.utime(p, (past, past))


@pytest.fixture()
def eval_file(tmp_path):
    return write_jsonl(tmp_path / "eval.jsonl", eval_rows(30))


def copy_checkpoint(source: Path, folder: Path, *, state_step: int | None = None) -> Path:
    shutil.copytree(source, folder)
    if state_step is not None:
        trainer_state(folder, state_step)
    return folder


def test_readiness_rules(tiny_checkpoint, tmp_path):
    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    assert checkpoint_ready(folder, None, settle=5)[:2] == (False, "no config.json yet")
    shutil.copy(tiny_checkpoint / "config.json", folder)
    weights = (tiny_checkpoint / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    ok, why, _ = checkpoint_ready(folder, None, settle=5)
    assert not ok and why.startswith("incomplete") and "truncated" in why
    (folder / "model.safetensors").write_bytes(weights)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_checkpoint / name, folder)
    ok, why, first = checkpoint_ready(folder, None, settle=5)  # just written, no trainer state: wait to settle
    assert not ok and "waiting until they are 5 s old" in why
    age(folder)
    assert checkpoint_ready(folder, None, settle=5)[0]
    (folder / "trainer_state.json").write_text('{"log_history": [{"step": 1, "lo')
    ok, why, _ = checkpoint_ready(folder, None, settle=5)
    assert not ok and why == "trainer_state.json is being written"
    trainer_state(folder, 3)
    ok, why, snap = checkpoint_ready(folder, None, settle=5)  # appeared just now: one more look
    assert not ok and why == "files changed since the last look"
    assert checkpoint_ready(folder, snap, settle=5)[0]  # unchanged since: the Trainer is done with it


def test_a_checkpoint_written_while_watching_is_analyzed_only_once_complete(tiny_checkpoint, eval_file, tmp_path):
    out, runs = tmp_path / "out", tmp_path / "runs" / "exp"
    out.mkdir()
    first = copy_checkpoint(tiny_checkpoint, out / "checkpoint-2", state_step=2)
    age(first)
    final = biased_checkpoint(tmp_path / "final", tiny_checkpoint, favor=1)
    target = out / "checkpoint-4"
    done = {}

    def write_slowly():  # as a Trainer or a copy to a shared filesystem does: files appear over a few seconds
        target.mkdir()
        shutil.copy(final / "config.json", target)
        data = (final / "model.safetensors").read_bytes()
        with open(target / "model.safetensors", "wb") as f:
            for i in range(0, len(data), len(data) // 4 + 1):
                f.write(data[i:i + len(data) // 4 + 1])
                f.flush()
                time.sleep(0.4)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(final / name, target)
        time.sleep(0.4)
        trainer_state(target, 4)
        done["at"] = time.time()

    watcher = Watcher(out, eval_file, runs=runs, data_opts=OPTS, infer=stages.InferParams(max_length=32),
                      after=FAST, settle=30, poll=0.2, say=lambda _: None)
    outcomes, pending = watcher.once(wait=0)
    assert [o.run.name for o in outcomes] == ["step-000002"] and pending == {}
    writer = threading.Thread(target=write_slowly)
    writer.start()
    while not target.exists():
        time.sleep(0.05)
    outcomes, pending = watcher.once(wait=60)
    writer.join()
    assert [o.step for o in outcomes] == [4] and not pending and outcomes[0].error is None
    run = Run.open(runs / "step-000004")
    created = run.manifest["created"]
    import datetime as dt

    assert dt.datetime.fromisoformat(created).timestamp() >= int(done["at"])  # not before it was complete
    assert run.manifest["training"]["checkpoint"] == str(target.resolve())
    assert run.manifest["training"]["source"] == "watch" and run.manifest["training"]["epoch"] == 0.4
    assert set(run.predictions()["pred"]) == {LABELS[1]}  # the final weights, not a half-written file
    assert watcher.once(wait=0) == ([], {})  # a restarted look finds both done
    assert labels_db_for(runs / "step-000002") == labels_db_for(runs / "step-000004")

    # identical to a separate `erroranalysis run` of the same checkpoint
    result = invoke("run", "--model", target, "--data", eval_file, "--id-column", "id", "--max-length", "32",
                    "--out", tmp_path / "separate", "--no-cluster", "--no-data-checks", "--no-slices")
    assert result.exit_code == 0, result.output
    separate = Run.open(tmp_path / "separate")
    assert stages.same_predictions(run, separate)
    np.testing.assert_allclose(np.asarray(run.probs()), np.asarray(separate.probs()), atol=1e-6)
    assert run.hidden_states() is None  # per-step runs keep no hidden states by default
    assert json.loads(run.file("trainer_state.json").read_text())["global_step"] == 4


def test_cli_watch_once_exit_codes(tiny_checkpoint, eval_file, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    age(biased_checkpoint(out / "checkpoint-10", tiny_checkpoint, favor=0))
    trainer_state(out / "checkpoint-10", 10)
    age(out / "checkpoint-10")
    common = ["--data", eval_file, "--id-column", "id", "--max-length", "32", "--reducer", "pca", "--once",
              "--out", tmp_path / "runs" / "exp", "--fail-on-regression"]
    result = invoke("watch", out, *common)
    assert result.exit_code == 0, result.output
    assert "checkpoint-10 -> " in result.output and "1 checkpoint(s) analyzed" in result.output

    # a later checkpoint that predicts another class: class F1 falls, a regression against step 10
    age(biased_checkpoint(out / "checkpoint-20", tiny_checkpoint, favor=2))
    result = invoke("watch", out, *common)
    assert result.exit_code == 3, result.output
    assert "significant regression(s) against step-000010" in result.output
    assert "F1 of class 'negative' fell from 0.500 to 0.000" in result.output
    assert "regression: " in result.stderr and "exit 3" in result.stderr

    # half written, and the wait runs out: exit 2, one line, and no run for it
    (out / "checkpoint-30").mkdir()
    shutil.copy(tiny_checkpoint / "config.json", out / "checkpoint-30")
    weights = (tiny_checkpoint / "model.safetensors").read_bytes()
    (out / "checkpoint-30" / "model.safetensors").write_bytes(weights[:1000])
    result = invoke("watch", out, *common, "--wait", "0")
    assert result.exit_code == 2, result.output
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: 1 checkpoint(s) not analyzed (checkpoint-30)"), result.stderr
    assert "checkpoint-30: waiting: incomplete" in result.output
    assert not (tmp_path / "runs" / "exp" / "step-000030").exists()


@pytest.mark.parametrize("args, pattern", [
    (["{tmp}/missing", "--data", "{data}"], "no such folder"),
    (["{out}", "--data", "{tmp}/missing.jsonl"], "no such file"),
    (["{out}", "--data", "{data}", "--label-column", "nope"], "no column 'nope'"),
    (["{out}", "--data", "{data}", "--reducer", "tsne"], "--reducer 'tsne' is invalid"),
    (["{out}", "--data", "{data}", "--settle", "-1"], "--settle -1.0 is invalid"),
])
def test_cli_watch_bad_input_fails_before_watching(eval_file, tmp_path, args, pattern):
    (tmp_path / "out").mkdir()
    result = invoke("watch", *[a.format(tmp=tmp_path, data=eval_file, out=tmp_path / "out") for a in args], "--once")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and pattern in lines[0], result.stderr
    assert not (tmp_path / "runs").exists()


def test_cli_watch_a_causal_lm_runs_the_generation_stage(tmp_path):
    from test_generation import build_tiny_causal_lm

    out = tmp_path / "out"
    build_tiny_causal_lm(out / "checkpoint-5")
    trainer_state(out / "checkpoint-5", 5)
    age(out / "checkpoint-5")
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [
        {"id": f"p{i}", "prompt": f"Classify: item {i}", "label": "yes" if i % 2 else "no"} for i in range(6)])
    result = invoke("watch", out, "--data", prompts, "--id-column", "id", "--task", "generation", "--max-new-tokens",
                    "3", "--no-cluster", "--no-slices", "--once", "--out", tmp_path / "runs" / "lm")
    assert result.exit_code == 0, result.output
    run = Run.open(tmp_path / "runs" / "lm" / "step-000005")
    assert run.task == "generation" and run.manifest["training"]["source"] == "watch"
    assert "output_checks" in run.metrics()
    assert json.loads(run.file("trainer_state.json").read_text())["global_step"] == 5


def test_a_pickle_only_checkpoint_is_refused_at_once_not_waited_for(tiny_checkpoint, eval_file, tmp_path):
    out = tmp_path / "out"
    folder = out / "checkpoint-5"
    folder.mkdir(parents=True)
    shutil.copy(tiny_checkpoint / "config.json", folder)
    (folder / "pytorch_model.bin").write_bytes(b"a pickle")  # never loaded: its name is what the watcher reads
    trainer_state(folder, 5)
    result = invoke("watch", out, "--data", eval_file, "--id-column", "id", "--once", "--wait", "30",
                    "--out", tmp_path / "runs" / "exp")
    assert result.exit_code == 2, result.output
    assert "checkpoint-5: not analyzed: " in result.output and "only pickled weights" in result.output
    assert "safe_serialization=True" in result.output and "waiting" not in result.output
    assert not (tmp_path / "runs" / "exp" / "step-000005").exists()

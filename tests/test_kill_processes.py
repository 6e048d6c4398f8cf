"""Real processes killed mid-stage (SIGKILL) or stopped (SIGTERM): the run says what happened and how to resume,
the previous artifacts survive, and an interrupted --overwrite leaves the old run as it was.

Each child is the real `erroranalysis` entry point; only the model is slowed down (a sleep per batch), so the
signal lands while the stage runs.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import eval_rows, write_jsonl
from typer.testing import CliRunner

from erroranalysis import rundir
from erroranalysis.cli.app import app
from erroranalysis.rundir import Run, readers

pytestmark = pytest.mark.slow

SLOW_INFERENCE = """
import sys, time
import erroranalysis.infer.classifier as c
real = c.predict_batch
def slow(*args, **kwargs):
    time.sleep(0.3)
    return real(*args, **kwargs)
c.predict_batch = slow
from erroranalysis.cli.app import main
sys.argv = ["erroranalysis", *sys.argv[1:]]
main()
"""

SLOW_EMBEDDING = """
import sys, time
import numpy as np
import erroranalysis.embed.vector_files as e
def slow(self, frame, progress=None):
    time.sleep(60)
e.PrecomputedEmbedder.embed = slow
from erroranalysis.cli.app import main
sys.argv = ["erroranalysis", *sys.argv[1:]]
main()
"""


def start(code: str, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for(run_dir: Path, stage: str, status: str = "running", timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if json.loads((run_dir / rundir.MANIFEST).read_text())["stages"][stage]["status"] == status:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"stage {stage!r} never reached {status!r}")


@pytest.fixture()
def eval_set(tmp_path):
    return write_jsonl(tmp_path / "eval.jsonl", eval_rows(60))


def run_args(checkpoint, data, out, *extra):
    return ["run", "--model", checkpoint, "--data", data, "--id-column", "id", "--out", out, "--batch-size", "4",
            "--max-length", "32", "--no-cluster", "--no-data-checks", "--no-slices", *extra]


def test_sigkill_during_inference_leaves_an_interrupted_run_that_says_how_to_resume(tiny_checkpoint, eval_set,
                                                                                     tmp_path):
    out = tmp_path / "run"
    child = start(SLOW_INFERENCE, *run_args(tiny_checkpoint, eval_set, out))
    wait_for(out, "infer")
    child.send_signal(signal.SIGKILL)
    child.wait()
    run = Run.open(out)
    assert run.stage_status("infer") == "interrupted"
    show = CliRunner().invoke(app, ["show", str(out)])
    assert show.exit_code == 2 and "stage 'infer' was interrupted" in show.output
    assert f"resume with: erroranalysis run --model {tiny_checkpoint}" in show.output and "--overwrite" in show.output
    assert not (out / rundir.PREDICTIONS).exists()
    again = CliRunner().invoke(app, [str(a) for a in run_args(tiny_checkpoint, eval_set, out, "--overwrite")])
    assert again.exit_code == 0, again.output
    assert len(readers.read_predictions(Run.open(out))) == 60


def test_sigterm_during_clustering_marks_it_interrupted_and_keeps_the_last_clustering(tiny_checkpoint, eval_set,
                                                                                      tmp_path):
    import numpy as np

    out = tmp_path / "run"
    done = CliRunner().invoke(app, [str(a) for a in run_args(tiny_checkpoint, eval_set, out)])
    assert done.exit_code == 0, done.output
    vectors = tmp_path / "vectors.npy"
    np.save(vectors, np.random.default_rng(0).normal(size=(60, 8)).astype(np.float32))
    first = CliRunner().invoke(app, ["cluster", str(out), "--embedder", str(vectors), "--reducer", "pca",
                                     "--layout", "pca", "--min-cluster-size", "3"])
    assert first.exit_code == 0, first.output
    clusters = (out / rundir.CLUSTERS).read_bytes()
    child = start(SLOW_EMBEDDING, "cluster", out, "--embedder", vectors, "--reducer", "pca", "--layout", "pca")
    wait_for(out, "cluster")
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=30)
    assert child.returncode == 143 and "interrupted (SIGTERM)" in err and "Traceback" not in err
    run = Run.open(out)
    assert run.state("cluster")["status"] == "interrupted" and "recorded_status" not in run.state("cluster")
    assert (out / rundir.CLUSTERS).read_bytes() == clusters and not any((out / ".staging").iterdir())
    assert readers.read_clusters(run) is not None  # the last clustering is whole, and still shown
    assert "its outputs shown are those of its last completed run" in CliRunner().invoke(app, ["show",
                                                                                                str(out)]).output


def test_sigkill_during_an_overwrite_leaves_the_old_run_intact(tiny_checkpoint, eval_set, tmp_path):
    out = tmp_path / "run"
    done = CliRunner().invoke(app, [str(a) for a in run_args(tiny_checkpoint, eval_set, out)])
    assert done.exit_code == 0, done.output
    before = (out / rundir.PREDICTIONS).read_bytes(), (out / rundir.MANIFEST).read_bytes()
    child = start(SLOW_INFERENCE, *run_args(tiny_checkpoint, eval_set, out, "--overwrite"))
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".run.new-*/manifest.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    wait_for(next(tmp_path.glob(".run.new-*")), "infer")
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert ((out / rundir.PREDICTIONS).read_bytes(), (out / rundir.MANIFEST).read_bytes()) == before
    assert Run.open(out).stage_status("infer") == "done"
    from erroranalysis_ui.eaui import data

    assert data.discover(tmp_path) == ["run"]  # the half-built replacement is hidden from the app

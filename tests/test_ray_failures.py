"""A Ray run whose workers keep dying ends, with a readable reason, after a bounded number of restarts; SIGTERM to
the driver exits 143 with the stage marked interrupted. A real local Ray, started by the command itself; the run is
in a subprocess, so a run that would retry for ever fails the test instead of hanging it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import eval_rows, write_jsonl

pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.slow

LIMIT = 600  # seconds a command may take here (a loaded machine included) before it counts as retrying for ever


def actors(driver: int) -> list:
    """The Ray workers running our predictor in the local Ray this driver started (its raylet is the driver's
    child): never another process's, on a machine others share."""
    try:
        below = psutil.Process(driver).children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for proc in below:
        try:
            if any(name in " ".join(proc.cmdline()) for name in ("ShardPredictor", "SourcePredictor")):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def start(tiny_checkpoint, tmp_path, rows: int = 1600) -> tuple[subprocess.Popen, object]:
    data = write_jsonl(tmp_path / "eval.jsonl", eval_rows(rows))
    out = tmp_path / "run"
    env = {**os.environ, "ERRORANALYSIS_CACHE_DIR": str(tmp_path / "cache"), "RAY_USAGE_STATS_ENABLED": "0"}
    command = [sys.executable, "-m", "erroranalysis.cli", "run", "--model", str(tiny_checkpoint), "--data",
               str(data), "--id-column", "id", "--out", str(out), "--engine", "ray", "--max-length", "32",
               "--batch-size", "8", "--no-checks", "--no-cluster", "--no-slices"]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), out


def wait(proc: subprocess.Popen) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"the command was still running after {LIMIT} s")


def _running(out) -> bool:
    try:
        return infer_entry(out).get("status") == "running"
    except (OSError, ValueError, KeyError):
        return False


def infer_entry(out) -> dict:
    return json.loads((out / "manifest.json").read_text())["stages"]["infer"]


def test_workers_that_keep_dying_fail_the_run_after_bounded_restarts(tiny_checkpoint, tmp_path):
    proc, out = start(tiny_checkpoint, tmp_path)
    kills = 0
    while proc.poll() is None:  # kill every predictor as soon as it appears, as an OOM killer on a bad node would
        for actor in actors(proc.pid):
            try:
                actor.kill()
                kills += 1
            except psutil.Error:
                pass
        time.sleep(0.2)
    _, err = wait(proc)
    assert proc.returncode == 2, err[-2000:]
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: --engine ray: the inference job failed (a worker process kept dying"), err[-2000:]
    entry = infer_entry(out)
    assert entry["status"] == "failed" and "kept dying" in entry["error"]
    print(f"{kills} worker kills before the run failed", file=sys.stderr)


def test_sigterm_to_the_driver_exits_143_with_the_stage_interrupted(tiny_checkpoint, tmp_path):
    proc, out = start(tiny_checkpoint, tmp_path, rows=20000)
    deadline = time.monotonic() + LIMIT
    while proc.poll() is None and not (actors(proc.pid) and _running(out)) and time.monotonic() < deadline:
        time.sleep(0.2)  # the stage runs once the workers are up
    if proc.poll() is not None:
        pytest.fail(f"the run ended before its workers started: {wait(proc)[1][-2000:]}")
    proc.send_signal(signal.SIGTERM)
    _, err = wait(proc)
    assert proc.returncode == 143, err[-2000:]
    assert "interrupted (SIGTERM)" in err
    entry = infer_entry(out)
    assert entry["status"] == "interrupted" and entry["error"] == "Terminated"

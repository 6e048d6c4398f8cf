"""What a writer may trust of a run and what it promises back: a `.lock` that is not a regular file neither hangs nor
is followed, and a commit is durable in SQLite's order (file, then folder, then the manifest that names them).
The crafted manifests and links of an attacker are in test_confinement_matrix.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
from fake_runs import commit, inferred_run

from erroranalysis import rundir
from erroranalysis.core.errors import RunError
from erroranalysis.rundir import Run

LABELS = ["a", "b"]


def frame(n: int = 10) -> pd.DataFrame:
    return pd.DataFrame({"example_id": [f"e{i}" for i in range(n)], "text": [f"text {i}" for i in range(n)],
                         "label": ["a", "b"] * (n // 2), "pred": ["a"] * n})


def fifo_lock(tmp_path):
    run = inferred_run(tmp_path / "r", frame(), labels=LABELS)
    lock = run.path / rundir.artifacts.LOCK
    lock.unlink()
    os.mkfifo(lock)
    return run


def test_a_fifo_lock_neither_hangs_a_reader_nor_is_taken_by_a_writer(tmp_path):
    run = fifo_lock(tmp_path)
    # a subprocess, so that the old blocking open cannot hang the suite: it is killed and the test fails
    code = ("import sys; from erroranalysis.rundir import Run; from erroranalysis.rundir.lock import writer_alive; "
            "run = Run.open(sys.argv[1]); print(writer_alive(run.path), run.stage_status('infer'))")
    try:
        done = subprocess.run([sys.executable, "-c", code, str(run.path)], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("reading a run whose .lock is a FIFO blocked")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "done"]
    with pytest.raises(RunError, match=r"\.lock: cannot be opened as the run's lock \(not a regular file\)"):
        commit(run, "metrics", metrics_json={"overall": {}})
    assert "metrics" not in json.loads(run.file(rundir.MANIFEST).read_text())["stages"]


def test_show_answers_at_once_on_a_run_with_a_fifo_lock(tmp_path):
    run = fifo_lock(tmp_path)
    show = [sys.executable, "-m", "erroranalysis.cli", "show", str(run.path)]
    try:
        done = subprocess.run(show, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("'erroranalysis show' hung on a run whose .lock is a FIFO")
    assert done.returncode == 2 and "stage 'metrics' was not run" in done.stderr


class DiskLog:
    """Records fsync and rename calls in order, with the manifest each rename of manifest.json puts in place."""

    def __init__(self, monkeypatch):
        self.events: list[tuple] = []
        real_fsync, real_replace = os.fsync, os.replace

        def fsync(fd):
            self.events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
            return real_fsync(fd)

        def replace(src, dst, **kw):
            doc = json.loads(open(src).read()) if str(dst).endswith(rundir.MANIFEST) else None
            self.events.append(("rename", os.path.realpath(src), os.path.realpath(dst), doc))
            return real_replace(src, dst, **kw)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)

    def index(self, test) -> int:
        return next(i for i, e in enumerate(self.events) if test(e))

    def synced_before(self, path: str, at: int, after: int = -1) -> bool:
        return any(e == ("fsync", path) for e in self.events[after + 1:at])


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads fsync's file from /proc")
def test_a_commit_is_on_disk_before_the_manifest_names_it(tmp_path, monkeypatch):
    run = inferred_run(tmp_path / "r", frame(), labels=LABELS)
    root = os.path.realpath(run.path)
    log = DiskLog(monkeypatch)
    commit(run, "metrics", metrics_json={"overall": {"n": 10}})

    def manifest_with(status):
        return lambda e: e[0] == "rename" and e[3] and (e[3]["stages"].get("metrics") or {}).get("status") == status

    committing = log.index(manifest_with("committing"))
    staged = log.events[committing][3]["stages"]["metrics"]["commit"]
    folder = os.path.join(root, rundir.artifacts.STAGING, staged["staging"])
    # the commit point: the staged file and its folder reached the disk before the manifest recording them did
    assert log.synced_before(os.path.join(folder, rundir.METRICS), committing)
    assert log.synced_before(folder, committing)
    assert log.synced_before(log.events[committing][1], committing)  # the manifest's own temporary file
    moved = log.index(lambda e: e[0] == "rename" and e[2] == os.path.join(root, rundir.METRICS))
    done = log.index(manifest_with("done"))
    assert committing < moved < done
    assert log.synced_before(root, done, after=moved)  # the move is on disk before the manifest says done
    assert log.synced_before(root, len(log.events), after=done)  # and the manifest's rename before we return
    assert Run.open(run.path).stage_status("metrics") == "done"

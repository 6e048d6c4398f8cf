"""The run directory never lies: stages commit their artifacts together, a stage whose process is gone reads as
interrupted with the command that resumes it, readers refuse what no stage committed, and --overwrite replaces a
run only when the new one is whole."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from fake_runs import commit, inferred_run

from erroranalysis import rundir
from erroranalysis.core import files
from erroranalysis.core.errors import RunError
from erroranalysis.rundir import Run, create_run, readers
from erroranalysis.rundir.migrate import migrate_run

LABELS = ["a", "b"]


def frame(n: int = 20) -> pd.DataFrame:
    return pd.DataFrame({"example_id": [f"e{i}" for i in range(n)], "text": [f"text {i}" for i in range(n)],
                         "label": ["a", "b"] * (n // 2), "pred": ["a"] * n})


def write_manifest(run: Run, data: dict) -> None:
    files.write_json(run.file(rundir.MANIFEST), data)


def test_a_stage_commits_its_files_together_and_records_their_checksums(tmp_path):
    run = inferred_run(tmp_path / "r", frame(), labels=LABELS)
    commit(run, "slices", slices_parquet=pd.DataFrame({"slice_id": [0], "description": ["x"]}),
           slice_members_parquet=pd.DataFrame({"example_id": ["e1"], "slice_id": [0]}))
    artifacts = run.manifest["artifacts"]
    assert artifacts[rundir.SLICES]["stage"] == "slices"
    assert artifacts[rundir.SLICES] | files.digest(run.file(rundir.SLICES)) == artifacts[rundir.SLICES]
    assert not any((run.path / rundir.artifacts.STAGING).iterdir())
    slices, members = readers.read_slices(run)
    assert members["example_id"].tolist() == ["e1"]


def test_a_stage_that_raises_keeps_the_previous_artifacts(tmp_path):
    run = inferred_run(tmp_path / "r", frame(), labels=LABELS)
    commit(run, "metrics", metrics_json={"overall": {}, "per_class": [], "confusion": {}, "v": 1})
    with pytest.raises(ValueError), run.stage("metrics") as staging:
        staging.write_json(rundir.METRICS, {"overall": {}, "per_class": [], "confusion": {}, "v": 2})
        raise ValueError("boom")
    assert run.state("metrics")["status"] == "failed" and run.state("metrics")["error"] == "boom"
    assert readers.read_metrics(run)["v"] == 1  # the last commit is still whole and usable
    assert "boom" in run.notice("metrics")
    assert not any((run.path / rundir.artifacts.STAGING).iterdir())


def test_a_signal_while_the_staging_folder_is_made_still_marks_the_stage_interrupted(tmp_path, monkeypatch):
    run = inferred_run(tmp_path / "r", frame(), labels=LABELS)
    made = rundir.commit.Staging.__init__

    def signalled(self, *args):  # SIGTERM lands after the folder is made, before the stage's body runs
        made(self, *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(rundir.commit.Staging, "__init__", signalled)
    with pytest.raises(KeyboardInterrupt), run.stage("metrics"):
        pass
    entry = run.manifest["stages"]["metrics"]  # as written, not as read while no writer lives
    assert entry["status"] == "interrupted" and not any((run.path / rundir.artifacts.STAGING).iterdir())


def test_a_full_disk_at_the_stage_s_first_write_is_one_line_and_keeps_the_last_entry(tmp_path, monkeypatch):
    import errno

    run = inferred_run(tmp_path / "r", frame(), labels=LABELS)
    commit(run, "metrics", metrics_json={"overall": {}, "per_class": [], "confusion": {}, "v": 1})
    before = run.manifest["stages"]["metrics"]

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Run, "_write", full)
    with pytest.raises(files.DiskFullError, match="stage 'metrics' stopped, the disk is full; its previous files"), \
            run.stage("metrics"):
        pass
    assert run.manifest["stages"]["metrics"] == before and readers.read_metrics(run)["v"] == 1


def test_a_stage_left_running_by_a_dead_process_is_interrupted_with_the_command_to_resume(tmp_path):
    run = inferred_run(tmp_path / "r", frame(), labels=LABELS)
    manifest = run.manifest
    manifest["stages"]["cluster"] = {"status": "running", "pid": 999999, "host": "elsewhere",
                                     "started": "2026-12-01T00:00:00+00:00"}
    write_manifest(run, manifest)
    assert run.stage_status("cluster") == "interrupted"
    with pytest.raises(RunError, match=r"clusters.parquet is not available: stage 'cluster' was interrupted "
                                       r"\(pid 999999 on elsewhere.*resume with: erroranalysis cluster "):
        readers.read_clusters(run)
    assert readers.read_clusters(run, optional=True) is None
    with run.lock():  # while a process holds the run, the same entry reads as running
        assert run.stage_status("cluster") == "running"


def test_an_interrupted_source_stage_names_the_command_that_made_the_run(tmp_path):
    rundir.run.COMMAND = ["erroranalysis", "run", "--model", "m", "--data", "d.jsonl", "--out", str(tmp_path / "r")]
    try:
        with create_run(tmp_path / "r", task="classification", labels=LABELS) as run:
            pass
    finally:
        rundir.run.COMMAND = None
    manifest = run.manifest
    manifest["stages"]["infer"] = {"status": "running", "pid": 1, "host": "h", "started": "t"}
    write_manifest(run, manifest)
    with pytest.raises(RunError) as info:
        readers.read_metrics(run)  # metrics' input: the explanation names the stage that blocks it
    assert "stage 'infer' was interrupted" in str(info.value)
    assert "resume with: erroranalysis run --model m --data d.jsonl --out" in str(info.value)
    assert str(info.value).endswith("--overwrite")


def test_a_commit_stopped_halfway_is_rolled_forward_by_the_next_writer(tmp_path, monkeypatch):
    run = inferred_run(tmp_path / "r", frame(), labels=LABELS)
    real, moved = os.replace, []

    def crash_after_first_artifact(src, dst):
        into_place = ".staging" in str(src) and ".staging" not in str(dst)
        if into_place and moved:
            raise SystemExit("killed")  # as if the process died between two moves of the commit
        real(src, dst)
        if into_place:
            moved.append(dst)

    monkeypatch.setattr(os, "replace", crash_after_first_artifact)
    with pytest.raises(SystemExit):
        commit(run, "slices", slices_parquet=pd.DataFrame({"slice_id": [0], "description": ["x"]}),
               slice_members_parquet=pd.DataFrame({"example_id": ["e1"], "slice_id": [0]}))
    monkeypatch.setattr(os, "replace", real)
    assert run.state("slices")["status"] == "interrupted" and run.state("slices")["recorded_status"] == "committing"
    with pytest.raises(RunError, match="stopped while saving its files"):
        readers.read_slices(run)
    commit(run, "metrics", metrics_json={"overall": {}, "per_class": [], "confusion": {}})  # any writer recovers
    assert run.stage_status("slices") == "done"
    slices, members = readers.read_slices(run)
    assert members["example_id"].tolist() == ["e1"]


def test_what_a_stage_settles_in_the_manifest_is_committed_with_its_artifacts(tmp_path, monkeypatch):
    """A token run's workers count the texts cut: the infer stage's commit records them with its artifacts, so a
    process killed between its moves leaves a commit the next writer rolls forward with both (before, the manifest
    was updated after the commit, and a kill in between left the head's counts)."""
    run = inferred_run(tmp_path / "r", frame(), labels=LABELS)
    real, moved = os.replace, []

    def crash_after_first_move(src, dst):
        into_place = ".staging" in str(src) and ".staging" not in str(dst)
        if into_place and moved:
            raise SystemExit("killed")
        real(src, dst)
        if into_place:
            moved.append(dst)

    monkeypatch.setattr(os, "replace", crash_after_first_move)
    with pytest.raises(SystemExit):
        with run.stage("infer") as staging:
            staging.write_parquet(rundir.PREDICTIONS, frame())
            staging.write_npy(rundir.PROBS, np.full((20, 2), 0.5, np.float32))
            staging.manifest = {"data": {**run.manifest["data"], "n_cut": 7}}
    monkeypatch.setattr(os, "replace", real)
    assert run.manifest["data"].get("n_cut") != 7  # not yet: the commit stopped before its record
    commit(run, "metrics", metrics_json={"overall": {}, "per_class": [], "confusion": {}})  # any writer recovers
    assert run.stage_status("infer") == "done" and run.manifest["data"]["n_cut"] == 7

    manifest = run.manifest  # a plan may settle only the fields a stage counts, never the run's identity
    manifest["stages"]["slices"] = {"status": "committing", "commit": {
        "staging": "slices-1", "write": [], "remove": [], "digests": {}, "done": {"finished": "t"},
        "manifest": {"run_id": {"x": 1}}}}
    (run.path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RunError, match=r"'manifest' sets fields a stage does not settle \(only data, tokens\)"):
        run.recover()


def test_a_file_changed_behind_the_manifest_is_refused(tmp_path):
    run = inferred_run(tmp_path / "r", frame(), labels=LABELS)
    data = bytearray(run.file(rundir.PREDICTIONS).read_bytes())
    data[len(data) // 2] ^= 0xFF
    run.file(rundir.PREDICTIONS).write_bytes(bytes(data))
    with pytest.raises(RunError, match="does not match the checksum stage 'infer' recorded"):
        readers.read_predictions(run)


def test_a_second_writer_is_refused_while_the_first_holds_the_run(tmp_path):
    import subprocess
    import sys
    import time

    run = inferred_run(tmp_path / "r", frame(), labels=LABELS)
    code = ("import sys, time; from erroranalysis.rundir import Run\n"
            "run = Run.open(sys.argv[1])\n"
            "with run.stage('metrics'):\n"
            "    print('holding', flush=True); time.sleep(30)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(run.path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(RunError, match=r"stage 'metrics' is running \(pid \d+ on .*wait for it to finish"):
            commit(run, "slices", slices_parquet=pd.DataFrame({"slice_id": [], "description": []}),
                   slice_members_parquet=pd.DataFrame({"example_id": [], "slice_id": []}))
        assert run.stage_status("metrics") == "running"
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    assert run.stage_status("metrics") == "interrupted"


def test_overwrite_builds_beside_and_swaps_only_when_it_succeeds(tmp_path):
    old = inferred_run(tmp_path / "r", frame(10), labels=LABELS)
    before = old.file(rundir.PREDICTIONS).read_bytes()
    with pytest.raises(RuntimeError), create_run(tmp_path / "r", overwrite=True, task="classification",
                                                labels=LABELS) as run:
        assert run.path != tmp_path / "r" and run.path.name.startswith(".r.new-")
        raise RuntimeError("failed halfway")
    assert old.file(rundir.PREDICTIONS).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # the half-built run is gone
    new = inferred_run(tmp_path / "r", frame(30), labels=LABELS)
    assert new.path == tmp_path / "r" and len(readers.read_predictions(new)) == 30
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_create_refuses_what_it_must_not_replace(tmp_path):
    inferred_run(tmp_path / "r", frame(), labels=LABELS)
    with pytest.raises(RunError, match="a run already exists here; pass --overwrite"):
        with create_run(tmp_path / "r", task="classification"):
            pass
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(RunError, match="not empty and is not a run"):
        with create_run(tmp_path / "other", overwrite=True, task="classification"):
            pass
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_migrate_upgrades_a_v1_run_and_keeps_backups(tmp_path):
    v1 = tmp_path / "old"
    v1.mkdir()
    frame(6).assign(correct=False, confidence=0.5, loss=0.7, n_tokens=3, truncated=False).to_parquet(
        v1 / rundir.PREDICTIONS, index=False)
    metrics = {"overall": {"n": 6}, "per_class": [], "confusion": {},
               "per_slice": {"source": [{"slice": "web", "n": 6, "accuracy": 0.0}]}}
    (v1 / rundir.METRICS).write_text(json.dumps(metrics))
    manifest = {"schema_version": 1, "task": "classification", "labels": LABELS,
                "stages": {"infer": {"status": "done", "finished": "2026-01-01T00:00:00+00:00"},
                           "metrics": {"status": "done", "finished": "2026-01-01T00:00:01+00:00"},
                           "cluster": {"status": "running"}}}
    (v1 / rundir.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(RunError, match="schema_version 1 is from an older erroranalysis; upgrade the run with "
                                       "'erroranalysis migrate"):
        Run.open(v1)
    result = migrate_run(v1)
    assert result["changed"] == [rundir.METRICS, rundir.MANIFEST]
    run = Run.open(v1)
    assert readers.read_metrics(run)["by_metadata"]["source"][0]["value"] == "web"
    assert len(readers.read_predictions(run)) == 6
    assert run.stage_status("cluster") == "interrupted"
    assert json.loads((v1 / "metrics.json.v1.bak").read_text()) == metrics
    assert migrate_run(v1)["changed"] == []  # already current


def test_the_sharded_form_is_read_as_one_artifact(tmp_path):
    rows = frame(12)
    with create_run(tmp_path / "r", task="classification", labels=LABELS) as run:
        with run.stage("infer") as staging:
            folder = staging.file(rundir.PREDICTIONS)
            folder.mkdir()
            for i, part in enumerate((rows.iloc[:5], rows.iloc[5:])):
                part.assign(correct=part["label"] == part["pred"]).to_parquet(folder / f"part-{i:05d}.parquet")
            probs = staging.file(rundir.PROBS)
            probs.mkdir()
            np.save(probs / "part-00000.npy", np.full((5, 2), 0.5, np.float32))
            np.save(probs / "part-00001.npy", np.full((7, 2), 0.5, np.float32))
    assert readers.read_predictions(run)["example_id"].tolist() == rows["example_id"].tolist()
    assert readers.read_probs(run).shape == (12, 2)
    (run.file(rundir.PROBS) / "part-00001.npy").unlink()
    with pytest.raises(RunError, match="probs.npy: .* bytes, but stage 'infer' wrote"):
        readers.read_probs(run)

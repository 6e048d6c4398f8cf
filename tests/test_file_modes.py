"""Modes, one rule (files.py): everything erroranalysis writes honours the umask, files `0666 & ~umask` and folders
`0777 & ~umask`, atomic writes included (mkstemp's 0600 is changed before the rename). A run, its exports, its
report and the labels database with a backup, written under umask 0022, are read by another user (a real second
uid when the tests run as root); under umask 0077 nothing is readable by others."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import eval_rows, write_jsonl

from erroranalysis import stages
from erroranalysis.core import files
from erroranalysis.labels import LabelStore
from erroranalysis.sources.table import DataOptions
from erroranalysis.stages import AfterParams, InferParams, run_checkpoint

NOBODY = 65534


def _write_everything(base: Path, checkpoint: Path) -> Path:
    """What a user makes of a run and shares: the run (predictions, probs, hidden states, metrics, checks, slices),
    its exports in each format, its HTML report, the labels database beside it and a backup of it."""
    runs = base / "runs"
    data = write_jsonl(base / "eval.jsonl", eval_rows(40))
    run = run_checkpoint(checkpoint, data, runs / "r", data_opts=DataOptions(id_column="id"),
                         infer_opts=InferParams(batch_size=8, max_length=32), after=AfterParams(cluster=None))
    store = LabelStore(runs / "labels.sqlite", user="alice")
    store.create_error_type("Vocabulary overlap")
    key = store.run_key(run)
    store.assign(key, [run.predictions()["example_id"].iat[0]], "Vocabulary overlap")
    store.set_note(key, run.predictions()["example_id"].iat[0], "a private thought")
    store.backup()
    for fmt, ext in (("json", "json"), ("csv", "csv"), ("markdown", "md")):
        stages.export_taxonomy(run.path, fmt, runs / f"taxonomy.{ext}", labels_db=store.path)
    stages.write_run_report(run.path, runs / "report.html", labels_db=store.path)
    return runs


def _modes(root: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        found[path.relative_to(root).as_posix()] = stat.S_IMODE(path.lstat().st_mode)
    return found


def _read_as_nobody(paths: list[Path]) -> subprocess.CompletedProcess:
    script = 'for f in "$@"; do if [ -d "$f" ]; then ls "$f" >/dev/null || exit 1; else cat "$f" >/dev/null || ' \
             'exit 1; fi; done'
    return subprocess.run(["/bin/sh", "-c", script, "sh", *map(str, paths)], user=NOBODY, group=NOBODY,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def shared_base():
    """A folder in /tmp that another user may enter (pytest's own tmp folders are 0700)."""
    base = Path(tempfile.mkdtemp(prefix="ea-modes-", dir="/tmp"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_a_run_its_exports_and_labels_follow_the_umask(tiny_checkpoint, shared_base, mask):
    old = os.umask(mask)
    try:
        assert files.umask() == mask and files.file_mode() == 0o666 & ~mask
        runs = _write_everything(shared_base, tiny_checkpoint)
    finally:
        os.umask(old)
    modes = _modes(runs)
    for name in ("r/manifest.json", "r/metrics.json", "r/predictions.parquet", "r/probs.npy", "r/hidden_states.npy",
                 "r/.lock", "labels.sqlite", "taxonomy.json", "taxonomy.csv", "taxonomy.md", "report.html"):
        assert name in modes, sorted(modes)
    assert any("backup" in n for n in modes), sorted(modes)
    wrong = {n: oct(m) for n, m in modes.items()
             if m != (0o777 & ~mask if (runs / n).is_dir() else 0o666 & ~mask)}
    assert not wrong, wrong
    if os.geteuid() != 0:
        return  # the modes above are the rule; the second user needs root to become
    everything = [runs, *sorted(runs.rglob("*"))]
    seen = _read_as_nobody(everything)
    if mask == 0o022:
        assert seen.returncode == 0, seen.stderr  # a teammate (the app's service user) opens every file of the run
    else:
        assert seen.returncode != 0 and "Permission denied" in seen.stderr
        assert _read_as_nobody([runs / "r" / "manifest.json"]).returncode != 0


def test_a_cache_folder_is_built_whole_with_the_rules_mode(tmp_path):
    """folder_build: the hidden build folder (mkdtemp's 0700) gets the folder mode, is fsynced and renamed; a
    failed build leaves nothing; a build another process finished first is kept."""
    old = os.umask(0o022)
    try:
        target = tmp_path / "cache" / "model"
        with files.folder_build(target, done="source.json") as tmp:
            (tmp / "weights.bin").write_bytes(b"w")
            (tmp / "source.json").write_text("{}")
        assert stat.S_IMODE(target.stat().st_mode) == 0o755 and (target / "source.json").read_text() == "{}"
        assert stat.S_IMODE((target / "weights.bin").stat().st_mode) == 0o644
        with pytest.raises(RuntimeError), files.folder_build(tmp_path / "cache" / "other", done="x") as tmp:
            raise RuntimeError("killed half-way")
        with files.folder_build(target, done="source.json") as tmp:  # the same build, finished elsewhere first
            (tmp / "source.json").write_text('{"second": 1}')
        assert (target / "source.json").read_text() == "{}"
        assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["model"]
    finally:
        os.umask(old)


def test_a_scratch_folder_left_by_a_killed_command_is_swept_by_the_next(tmp_path):
    """scratch_folder: a process killed with SIGKILL leaves its folder; the next command removes it, and leaves a
    live process's folder and another host's (a shared disk) alone; its own folder goes when the block ends."""
    import signal
    import sys

    code = ("import sys, time; from erroranalysis.core import files\n"
            "with files.scratch_folder(sys.argv[1], '.run.rows-') as f:\n"
            "    (f / 'rows.parquet').write_text('x'); print(f, flush=True); time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    left = Path(child.stdout.readline().strip())
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert left.is_dir()  # SIGKILL: nothing could clean up
    elsewhere = tmp_path / ".run.rows-otherhost-1-abc"
    elsewhere.mkdir()
    with files.scratch_folder(tmp_path, ".run.rows-") as live:
        assert not left.exists() and elsewhere.is_dir() and live.is_dir()
        with files.scratch_folder(tmp_path, ".run.rows-") as other:  # this (live) process's folder stays
            assert live.is_dir() and other != live
    assert not live.exists() and elsewhere.is_dir()

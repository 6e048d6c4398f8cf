"""A run killed at any commit point never looks complete, and nothing reads a mixed set of files.

One instrumented pipeline (inference with the tiny checkpoint, metrics, checks, slices, clustering, then a second
clustering and renaming over the finished run) copies the run directory just before every `os.replace` that
touches it: each copy is exactly what a SIGKILL at that point leaves. Every reader then runs over every copy:
`show`, `export`, `compare` (against a finished run), the typed readers, the app's run list and, for each distinct
state, every page through AppTest. Only the slow models are faked (a bag-of-words embedder, PCA for UMAP).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import eval_rows, write_jsonl
from typer.testing import CliRunner

from erroranalysis import rundir
from erroranalysis.cli.app import app
from erroranalysis.core.errors import RunError
from erroranalysis.rundir import Run, readers
from erroranalysis.sources.table import DataOptions
from erroranalysis.stages import (
    AfterParams,
    CheckParams,
    ClusterParams,
    InferParams,
    MetricsParams,
    SliceParams,
    cluster_run,
    name_run,
    run_checkpoint,
)

PAGES = ["runs", "overview", "confusion", "clusters", "slices", "label", "taxonomy", "data_checks"]


class WordsEmbedder:
    """Hashed bag of words: fast, deterministic, and similar texts get similar vectors."""

    key = "test-words"

    def embed(self, frame, progress=None) -> np.ndarray:
        out = np.zeros((len(frame), 64), dtype=np.float32)
        for i, text in enumerate(frame["text"]):
            for word in str(text).lower().split():
                out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % 64] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


FAST_CLUSTER = ClusterParams(reducer="pca", layout="pca", min_cluster_size=3)
AFTER = AfterParams(metrics=MetricsParams(n_resamples=50), checks=CheckParams(embedder="none"),
                    slices=SliceParams(merge=False), cluster=FAST_CLUSTER)


def pipeline(checkpoint: Path, data: Path, out: Path) -> None:
    run = run_checkpoint(checkpoint, data, out, data_opts=DataOptions(id_column="id"),
                         infer_opts=InferParams(batch_size=16, max_length=64), after=AFTER,
                         embedder=WordsEmbedder())
    cluster_run(run.path, FAST_CLUSTER.replace(n_keywords=5), embedder=WordsEmbedder())  # re-cluster a done run
    name_run(run.path, n_keywords=4)


@pytest.fixture(scope="module")
def matrix(tiny_checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("kill")
    data = write_jsonl(root / "eval.jsonl", eval_rows())
    pipeline(tiny_checkpoint, data, root / "base")
    target = (root / "work" / "run").resolve()
    snapshots = root / "snapshots"
    real = os.replace

    def snapshot_then_replace(src, dst):
        if target in Path(dst).resolve().parents and (target / rundir.MANIFEST).exists():
            shutil.copytree(target, snapshots / f"k{len(list(snapshots.glob('k*'))):03d}", symlinks=True,
                            ignore=shutil.ignore_patterns(rundir.artifacts.LOCK))
        real(src, dst)

    snapshots.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "replace", snapshot_then_replace)
        pipeline(tiny_checkpoint, data, target)
    return root / "base", sorted(snapshots.iterdir())


def test_there_is_a_snapshot_for_every_commit_point(matrix):
    _, snaps = matrix
    assert len(snaps) >= 25  # manifest writes and artifact moves of 8 stages


def test_readers_refuse_or_return_a_consistent_set(matrix):
    base, snaps = matrix
    for snap in snaps:
        run = Run.open(snap)
        got = {}
        for name, read in [("predictions", readers.read_predictions), ("metrics", readers.read_metrics),
                           ("clusters", readers.read_clusters), ("assignments", readers.read_assignments),
                           ("embeddings", readers.read_embeddings), ("slices", readers.read_slices),
                           ("checks", readers.read_checks)]:
            try:
                got[name] = read(run)
            except RunError as exc:  # refused: one line that names a stage and what to run
                assert "\n" not in str(exc) and "stage '" in str(exc), (snap.name, str(exc))
        if "clusters" in got and "assignments" in got:
            known = set(got["clusters"]["cluster_id"])
            assigned = set(got["assignments"]["cluster_id"]) - {-1}
            assert assigned <= known, f"{snap.name}: assignments name clusters clusters.parquet lacks"
        if "embeddings" in got and "predictions" in got:
            failures = got["predictions"].loc[~got["predictions"]["correct"], "example_id"].tolist()
            assert got["embeddings"][1]["example_ids"] == failures, snap.name
        if "assignments" in got and "predictions" in got:
            assert got["assignments"]["example_id"].tolist() == got["predictions"]["example_id"].tolist()


def incomplete(run: Run) -> list[str]:
    return [name for name in run.manifest.get("stages", {}) if run.stage_status(name) != "done"]


def test_show_export_and_compare_never_crash_and_never_look_complete(matrix, tmp_path):
    base, snaps = matrix
    runner = CliRunner()
    for snap in snaps:
        run = Run.open(snap)
        show = runner.invoke(app, ["show", str(snap)])
        assert show.exit_code in (0, 2) and "Traceback" not in show.output, (snap.name, show.output)
        for name in incomplete(run):
            assert show.exit_code == 2 or f"{name}: " in show.output, (snap.name, name, show.output)
        export = runner.invoke(app, ["export", str(snap), "--format", "json", "--out", str(tmp_path / "t.json")])
        assert export.exit_code in (0, 2) and "Traceback" not in export.output, (snap.name, export.output)
        if export.exit_code == 0:
            doc = json.loads((tmp_path / "t.json").read_text())
            assert doc["run"]["n_examples"] == len(readers.read_predictions(run))
        compare = runner.invoke(app, ["compare", str(base), str(snap), "--resamples", "20"])
        assert compare.exit_code in (0, 2) and "Traceback" not in compare.output, (snap.name, compare.output)


def test_the_app_run_list_says_what_is_unfinished(matrix, monkeypatch):
    from erroranalysis_ui.eaui import data

    _, snaps = matrix
    table = data.list_runs(snaps[0].parent).set_index("run")
    for snap in snaps:
        problem = table.loc[snap.name, "problem"]
        if incomplete(Run.open(snap)):
            assert problem, f"{snap.name} is listed as fine although a stage is not done"


def _signature(snap: Path) -> tuple:
    run = Run.open(snap)
    manifest = run.manifest
    return (tuple(sorted((n, run.stage_status(n)) for n in manifest.get("stages", {}))),
            tuple(sorted(manifest.get("artifacts", {}))))


@pytest.mark.slow
def test_every_page_opens_on_every_distinct_state(matrix, tmp_path, monkeypatch):
    from app_session import app_env, go, open_app

    _, snaps = matrix
    distinct = {}
    for snap in snaps:
        distinct.setdefault(_signature(snap), snap)
    app_env(monkeypatch, snaps[0].parent, tmp_path / "labels.sqlite", user=None)
    for snap in distinct.values():
        at = open_app(run=snap.name)
        for page in PAGES:
            go(at, page)

"""A run directory is untrusted input: crafted manifests and links, each run through every command that writes a run
(and the app's suggest action), and a canary tree outside the run that must be byte-identical afterwards.

The world: `ws/runs/exp/step-000010` (the attacked run) and `step-000020` of an experiment, a labeled run `ws/runs/a`
whose taxonomy is applied, and `canary/` beside `ws/` holding what an attacker would like gone or moved: a file, a
folder, a folder of staged-looking folders, and a whole run of its own. Each attack is one row; each command runs
on a fresh copy of the world. Every command that meets the attack stops with one line naming the entry, exit 2,
and leaves the run as it was (its `.lock` aside); no command touches the canary.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_runs import inferred_run
from typer.testing import CliRunner

from erroranalysis import rundir, stages
from erroranalysis.cli.app import app
from erroranalysis.core.errors import UserError
from erroranalysis.labels import LabelStore
from erroranalysis.rundir import readers

LABELS = ["a", "b", "c"]
N = 60
STEP = "step-000010"
FAKE_DIGEST = {"sha256": "0" * 64, "bytes": 1}
DONE = {"status": "done", "finished": "2026-01-01T00:00:00+00:00"}


def frame() -> pd.DataFrame:
    gold = np.array(LABELS, dtype=object)[np.arange(N) % 3]
    pred = gold.copy()
    pred[::4] = np.roll(gold, 1)[::4]  # 15 failures: clustered by confusion pair, no UMAP
    texts = [f"{g} words number {i} {'rain' if i % 4 == 0 else 'sun'}" for i, g in enumerate(gold)]
    return pd.DataFrame({"example_id": [f"e{i:02d}" for i in range(N)], "label": gold, "pred": pred, "text": texts,
                         "source": np.where(np.arange(N) % 2, "web", "app")})


def hidden() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(N, 8)).astype(np.float32)


def probs() -> np.ndarray:
    return np.full((N, 3), 1 / 3, dtype=np.float32)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("world")
    runs = root / "ws" / "runs"
    for step in (STEP, "step-000020"):
        inferred_run(runs / "exp" / step, frame(), labels=LABELS, probs=probs(), hidden=hidden(),
                     training={"step": int(step[5:]), "source": "watch", "experiment": "exp"})
    source = inferred_run(runs / "a", frame(), labels=LABELS, hidden=hidden())
    store = LabelStore(runs / "labels.sqlite", user="alice")
    store.create_error_type("Rain", "texts about rain")
    store.assign(store.run_key(source.path), [f"e{i:02d}" for i in range(0, N, 4)], "Rain")
    stages.export_taxonomy(source.path, "json", root / "taxonomy.json")
    canary = root / "canary"
    (canary / "victim_dir" / "sub").mkdir(parents=True)
    (canary / "victim_dir" / "a.txt").write_text("keep me")
    (canary / "victim_dir" / "sub" / "b.txt").write_text("keep me too")
    (canary / "victim_file.txt").write_text("do not delete")
    for stage in ("metrics", "checks", "slices", "cluster", "apply_taxonomy", "prune", "secret"):
        (canary / "stagingdir" / f"{stage}-0000").mkdir(parents=True)
        (canary / "stagingdir" / f"{stage}-0000" / "staged.txt").write_text(stage)
    (canary / "secretdir").mkdir()
    (canary / "secretdir" / "secret.txt").write_text("secret")
    inferred_run(canary / "other_run", frame(), labels=LABELS, probs=probs(), hidden=hidden(),
                 training={"step": 5, "source": "watch", "experiment": "other"})
    return root


def snapshot(root: Path, skip=(rundir.artifacts.LOCK,)) -> dict:
    """Every entry under `root`: a file's bytes, a link's target, a folder's presence."""
    out = {}
    for folder, dirs, names in os.walk(root):
        for name in dirs + names:
            path = Path(folder) / name
            key = path.relative_to(root).as_posix()
            if name in skip:
                continue
            if path.is_symlink():
                out[key] = ("link", os.readlink(path))
            elif path.is_dir():
                out[key] = ("dir",)
            else:
                out[key] = ("file", path.read_bytes())
    return out


def rel(run: Path, target: Path) -> str:
    return os.path.relpath(target, run)


def plan(stage: str, staging: str, write=(), remove=()) -> dict:
    return {"status": "committing", "pid": 1, "host": "h",
            "commit": {"staging": staging, "write": list(write), "remove": list(remove),
                       "digests": {n: FAKE_DIGEST for n in write}, "done": {**DONE}}}


def add_stage(run: Path, name: str, entry: dict) -> None:
    manifest = json.loads((run / rundir.MANIFEST).read_text())
    manifest["stages"][name] = entry
    (run / rundir.MANIFEST).write_text(json.dumps(manifest))


def to_v1(run: Path) -> None:
    manifest = json.loads((run / rundir.MANIFEST).read_text())
    manifest["schema_version"] = 1
    manifest.pop("artifacts")
    (run / rundir.MANIFEST).write_text(json.dumps(manifest))


# -- the attacks: (name, setup(run, canary), the commands that must refuse it ("all": every writer of a current run),
# what the refusal says) ------------------------------------------------------------------------------------------


def issue_plan(run, canary):  # the report's manifest: moves a file in, deletes a file and a folder out there
    add_stage(run, "metrics", plan("metrics", str(canary / "secretdir"), ["secret.txt"],
                                   [str(canary / "victim_file.txt"), rel(run, canary / "victim_dir")]))


def staging_escapes(run, canary):
    add_stage(run, "metrics", plan("metrics", rel(run / ".staging", canary / "secretdir"), ["metrics.json"]))


def remove_escapes(run, canary):
    (run / ".staging" / "cluster-0001").mkdir()
    add_stage(run, "cluster", plan("cluster", "cluster-0001", remove=[rel(run, canary / "victim_dir")]))


def unknown_stage(run, canary):
    (run / ".staging" / "evil-0001").mkdir()
    add_stage(run, "evil", plan("evil", "evil-0001", remove=[str(canary / "victim_file.txt")]))


def foreign_names(run, canary):
    (run / ".staging" / "metrics-0001").mkdir()
    (run / ".staging" / "metrics-0001" / "notes.txt").write_text("x")
    add_stage(run, "metrics", plan("metrics", "metrics-0001", ["notes.txt"], ["predictions.parquet"]))


def staging_link(run, canary):
    shutil.rmtree(run / ".staging")
    (run / ".staging").symlink_to(canary / "stagingdir")


def staged_folder_links(run, canary):
    for stage in ("metrics", "checks", "slices", "cluster", "apply_taxonomy", "prune"):
        (run / ".staging" / f"{stage}-dead").symlink_to(canary / "victim_dir")


def lock_link(run, canary):
    (run / rundir.artifacts.LOCK).unlink(missing_ok=True)
    (run / rundir.artifacts.LOCK).symlink_to(canary / "made-by-lock")


def artifact_links(run, canary):
    for name in (rundir.METRICS, rundir.CHECKS, rundir.SLICES, rundir.CLUSTERS, rundir.SUGGESTIONS,
                 rundir.CENTROIDS):
        (run / name).symlink_to(canary / "victim_file.txt")


def manifest_link(run, canary):
    manifest = json.loads((run / rundir.MANIFEST).read_text())
    manifest["stages"]["metrics"] = plan("metrics", "metrics-0002", remove=[rel(run, canary / "victim_dir")])
    (canary / "manifest.json").write_text(json.dumps(manifest))
    (run / rundir.MANIFEST).unlink()
    (run / rundir.MANIFEST).symlink_to(canary / "manifest.json")


def step_link(run, canary):
    (run.parent / "step-000005").symlink_to(canary / "other_run")


def v1_links(run, canary):
    to_v1(run)
    (run / rundir.METRICS).write_text(json.dumps({"overall": {}, "per_class": [], "confusion": {}, "per_slice": {}}))
    add_stage(run, "metrics", {**DONE})
    add_stage(run, "doctor", {**DONE})
    (run / rundir.DOCTOR_MD).symlink_to(canary / "victim_file.txt")
    (run / (rundir.METRICS + ".v1.bak")).symlink_to(canary / "made-by-backup")


def v1_damaged(run, canary):
    to_v1(run)
    add_stage(run, "slices", {**DONE})
    (run / rundir.SLICES).write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")


ATTACKS = [
    ("the report's plan: absolute staging, absolute and .. removes", issue_plan, "all", "is an absolute path"),
    ("a plan whose staging folder climbs out with ..", staging_escapes, "all", "leads out of it"),
    ("a plan that removes a folder outside with ..", remove_escapes, "all", "leads out of it"),
    ("a plan of a stage erroranalysis does not have", unknown_stage, "all", "unknown stage"),
    ("a plan that moves in a file no stage writes and removes the predictions", foreign_names, "all",
     "which stage 'metrics' does not write"),
    (".staging is a symlink to a folder of staged-looking folders", staging_link, "all", "'.staging' goes through"),
    ("staged folders of every stage are symlinks", staged_folder_links, "all", "goes through a symlink"),
    (".lock is a dangling symlink out of the run", lock_link, "all", ".lock: cannot be opened"),
    ("artifacts are symlinks to a file outside", artifact_links, ("metrics", "checks", "slices", "cluster",
                                                                  "apply-taxonomy", "app-suggest", "prune"),
     "goes through a symlink"),
    ("manifest.json is a symlink to a manifest outside", manifest_link, "all",
     ("'manifest.json' goes through", "outside the folders that may be read here")),  # the app's readers refuse it
    ("a step folder is a symlink to a run outside", step_link, ("prune",), "step folder 'step-000005'"),
    ("a 0.1 run with a symlinked doctor.md and a symlinked backup name", v1_links, ("migrate",),
     "goes through a symlink"),
    ("a 0.1 run with a damaged Parquet", v1_damaged, ("migrate",), "was not migrated"),
]
COMMANDS = ("metrics", "checks", "slices", "cluster", "apply-taxonomy", "app-suggest", "migrate", "prune")
WRITERS = tuple(c for c in COMMANDS if c != "migrate")  # migrate leaves a current run alone: it writes nothing there


def run_command(command: str, world: Path) -> tuple[int, str]:
    run = world / "ws" / "runs" / "exp" / STEP
    args = {"metrics": ["metrics", run], "checks": ["data-checks", run, "--check-embedder", "none"],
            "slices": ["slices", run, "--no-merge"],
            "cluster": ["cluster", run, "--embedder", "hidden", "--reducer", "pca", "--layout", "none"],
            "apply-taxonomy": ["apply-taxonomy", world / "taxonomy.json", run, "--embedder", "hidden"],
            "migrate": ["migrate", run], "prune": ["timeline", run.parent, "--prune", "--keep-last", "1"]}
    if command == "app-suggest":  # what the Review page's "Suggest error types" calls, confined as the app is
        runs = world / "ws" / "runs"
        store = LabelStore(runs / "labels.sqlite", writer="app")
        try:
            with readers.confined([runs]):
                stages.apply_taxonomy(json.loads((world / "taxonomy.json").read_text()), run, store=store,
                                      embedder="hidden", name="run a")
        except UserError as exc:
            return 2, f"error: {exc}"
        return 0, ""
    result = CliRunner().invoke(app, [str(a) for a in args[command]])
    return result.exit_code, result.output


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("name, setup, refusing, fragment", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_no_command_touches_anything_outside_the_run(template, tmp_path, command, name, setup, refusing, fragment):
    world = tmp_path / "world"
    shutil.copytree(template, world, symlinks=True)
    run, canary = world / "ws" / "runs" / "exp" / STEP, world / "canary"
    setup(run, canary)
    outside, inside = snapshot(canary), snapshot(run)
    code, output = run_command(command, world)
    assert snapshot(canary) == outside, (command, output)
    if command in (WRITERS if refusing == "all" else refusing):
        lines = output.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (command, output)
        assert any(f in lines[0] for f in ((fragment,) if isinstance(fragment, str) else fragment)), (command, output)
        assert snapshot(run) == inside, (command, output)  # changed nothing, in the run either

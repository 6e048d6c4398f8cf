"""The timeline of a training run: its step runs (`runs/<experiment>/step-000500/`, one per analyzed step) read
into one report (classes' F1, error types matched across steps, training signals, events in words), and the
pruning of old steps' bulky artifacts.

    doc = build_timeline("runs/exp")          # format erroranalysis.timeline (docs/training.md)
    prune_steps("runs/exp", keep_last=1)      # probs, hidden states, embeddings of older steps go; centroids stay
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path

import numpy as np

from erroranalysis import __version__, rundir
from erroranalysis import timeline as tl
from erroranalysis.core import files
from erroranalysis.core.errors import DataError, RunError, UserError
from erroranalysis.core.validation import check_int
from erroranalysis.rundir import confine, readers

FORMAT = "erroranalysis.timeline"
SCHEMA_VERSION = 1
BULKY = (rundir.PROBS, rundir.HIDDEN, rundir.EMBEDDINGS)


# -- the step runs of an experiment ---------------------------------------------------------------------------


def experiment_folder(path: str | Path) -> Path:
    """The folder of step runs: `path` itself, or its parent when `path` is one of the step runs."""
    path = Path(path)
    if (path / rundir.MANIFEST).is_file() and tl.step_of(path.name) is not None:
        return path.parent
    if not path.is_dir():
        raise UserError(f"{path}: no such folder; pass the folder of a training run's step runs (runs/EXPERIMENT).")
    return path


def step_runs(path: str | Path) -> list[tuple[int, rundir.Run]]:
    """(step, run) of every `step-NNNNNN` run in the experiment folder, in step order."""
    folder = experiment_folder(path)
    found = []
    for child in folder.iterdir():
        step = tl.step_of(child.name)
        if step is not None and (child / rundir.MANIFEST).is_file():
            found.append((step, rundir.Run.open(child)))
    if not found:
        raise UserError(f"{folder}: no step runs (step-000500/ ...) here; make them with "
                        "erroranalysis.integrations.attach(trainer, ...) or 'erroranalysis watch OUTPUT_DIR'.")
    return sorted(found, key=lambda pair: pair[0])


def previous_step(path: str | Path, step: int) -> Path | None:
    """The run of the latest step before `step` in the experiment folder whose metrics are done, or None."""
    try:
        runs = step_runs(path)
    except UserError:
        return None
    earlier = [run for s, run in runs if s < step and readers.usable(run, rundir.METRICS)]
    return earlier[-1].path if earlier else None


# -- one step's state -----------------------------------------------------------------------------------------


def cluster_centroids(run: rundir.Run) -> tuple[dict[int, np.ndarray], str | None]:
    """({cluster id: unit centroid of its failures' vectors}, embedder key) from embeddings.npy, else from the
    centroids a prune kept; ({}, None) for a run without either."""
    stored = readers.read_embeddings(run, optional=True)
    assign = readers.read_assignments(run, optional=True)
    if stored is not None and assign is not None:
        vectors, meta = stored
        row_of = {str(e): i for i, e in enumerate(meta.get("example_ids") or [])}
        out = {}
        for cid, ids in _members(assign).items():
            rows = [row_of[e] for e in ids if e in row_of]
            if rows:
                out[cid] = tl.centroid(np.asarray(vectors[rows]))
        embedder = meta.get("embedder") or {}
        # a checkpoint's own hidden states move with training: their centroids are not comparable across steps
        return out, None if embedder.get("name") == "hidden" else embedder.get("key")
    kept = readers.read_centroids(run, optional=True)
    if kept is not None:
        ids, vectors, key = kept
        return {int(c): v for c, v in zip(ids, vectors)}, key
    return {}, None


def _members(assign) -> dict[int, frozenset]:
    """cluster id -> its failing members, from assignments.parquet."""
    a = assign[assign["cluster_id"] >= 0]
    if "failure" in a.columns:
        a = a[a["failure"].astype(bool)]
    return {int(c): frozenset(g["example_id"].astype(str)) for c, g in a.groupby("cluster_id")}


def step_state(step: int, run: rundir.Run, store=None) -> tuple[tl.StepState, dict]:
    """The run of `step` read into a StepState (failures, clusters, centroids, labeled types) and its metrics row."""
    predictions = readers.read_predictions(run, columns=[])
    failing = frozenset(predictions.loc[~predictions["correct"], "example_id"])
    assign = readers.read_assignments(run, optional=True)
    clusters = _members(assign) if assign is not None else {}
    clusters = {c: m & failing for c, m in clusters.items() if m & failing}
    named = readers.read_clusters(run, optional=True)
    names = {int(c): str(n) for c, n in zip(named["cluster_id"], named["name"])} if named is not None else {}
    centroids, key = cluster_centroids(run) if clusters else ({}, None)
    labels = _labels(run, store, failing)
    state = tl.StepState(step=step, name=run.name, failing=failing, clusters=clusters, names=names,
                         centroids=centroids, embedder=key,
                         labels={c: lab for c, m in clusters.items() if (lab := tl.majority_label(m, labels))})
    row = _row(step, run, failing, labels, bool(clusters))
    return state, row


_STATES: dict[tuple, tuple] = {}  # (run, manifest stamp, labels db, labels version) -> (state, row)
_MAX_STATES = 512


def _cached_state(step: int, run: rundir.Run, store, version) -> tuple[tl.StepState, dict]:
    """step_state, remembered while the run's manifest (every commit rewrites it) and the labels are unchanged: a
    callback rebuilding the timeline at each evaluation reads each older step once."""
    stat = run.file(rundir.MANIFEST).stat()
    key = (str(run.path.resolve()), stat.st_mtime_ns, stat.st_size, str(store.path) if store else None, version)
    if key not in _STATES:
        if len(_STATES) >= _MAX_STATES:
            _STATES.clear()
        _STATES[key] = step_state(step, run, store)
    state, row = _STATES[key]
    return state, dict(row)


def _labels(run: rundir.Run, store, failing: frozenset) -> dict[str, str]:
    """example id -> its error type (accepted labels and pending suggestions) among the run's failures."""
    if store is None:
        return {}
    a = store.assignments(store.run_key(run), include_rejected=False)
    if not len(a):
        return {}
    a = a[a["example_id"].astype(str).isin(failing)]
    return dict(zip(a["example_id"].astype(str), a["error_type"].astype(str)))


def _row(step: int, run: rundir.Run, failing: frozenset, labels: dict, clustered: bool) -> dict:
    manifest = run.manifest
    training = manifest.get("training") or {}
    row = {"step": step, "run": run.name, "epoch": training.get("epoch"), "clustered": clustered,
           "pruned": (run.state("prune", manifest) or {}).get("status") == "done", "n_failures": len(failing),
           "accuracy": None, "macro_f1": None, "per_class_f1": {}, "pass_rate": None, "checks": {},
           "labeled": {}, "training": training.get("last") or {}}
    for name in labels.values():
        row["labeled"][name] = row["labeled"].get(name, 0) + 1
    metrics = readers.read_metrics(run, optional=True)
    if metrics is not None:
        overall = metrics.get("overall") or {}
        row.update(accuracy=overall.get("accuracy"), macro_f1=overall.get("macro_f1"))
        row["per_class_f1"] = {str(c["label"]): c.get("f1") for c in metrics.get("per_class") or []}
        checks = metrics.get("output_checks")
        if checks:
            row["pass_rate"] = checks.get("pass_rate")
            row["checks"] = {str(c["check"]): c.get("pass_rate") for c in checks.get("per_check") or []}
    return row


# -- the training log ---------------------------------------------------------------------------------------------


def training_signals(runs: list[tuple[int, rundir.Run]]) -> tuple[dict, list[dict], str | None, list[str]]:
    """(signals {name: (steps, values)}, findings, the log file read, notes) from the latest step run that kept
    the training log (the callback writes the log so far into each step run; watch copies the checkpoint's)."""
    from erroranalysis.checklist.training import diagnose
    from erroranalysis.checklist.training_log import read_trainer_state

    for _, run in reversed(runs):
        file = readers.read_trainer_state(run, optional=True)
        if file is None:
            continue
        try:
            log = read_trainer_state(file)
        except DataError as exc:
            return {}, [], str(file), [f"training log not read: {str(exc).splitlines()[0]}"]
        signals = {name: (s.steps.tolist(), s.values.tolist()) for name, s in log.signals.items()}
        return signals, [f.to_dict() for f in diagnose(log)], str(file), []
    return {}, [], None, ["no step run kept a training log (trainer_state.json)"]


# -- the timeline -----------------------------------------------------------------------------------------------


def build_timeline(path: str | Path, *, labels_db: str | Path | None = None, store=None,
                   params: tl.TrackParams = tl.TrackParams(), **values) -> dict:
    """The timeline of the experiment at `path` (a folder of step runs, or one of them): per step, the metrics and
    labeled error types; the error types matched across steps (erroranalysis.timeline.track) with their stories;
    the training signals and findings of the latest training log; events in words. `params` (keyword values
    override it): see `timeline.TrackParams`."""
    from erroranalysis.stages.export import open_store

    params = params.replace(**values) if values else params
    runs = step_runs(path)
    folder = experiment_folder(path)
    if store is None:
        store = open_store(runs[0][1].path, labels_db)
    states, rows = [], []
    version = store.version() if store is not None else None
    for step, run in runs:
        try:
            state, row = _cached_state(step, run, store, version)
        except RunError as exc:  # a step still being analyzed, or damaged: the others still make a timeline
            rows.append({"step": step, "run": run.name, "problem": str(exc).splitlines()[0]})
            continue
        states.append(state)
        rows.append(row)
    good = [r for r in rows if "problem" not in r]
    types = tl.track(states, min_overlap=params.min_overlap, min_similarity=params.min_similarity)
    signals, findings, log_file, notes = training_signals(runs)
    events, stories = tl.describe(types, states, good, signals, findings)
    notes += [f"{r['run']}: left out ({r['problem']})" for r in rows if "problem" in r]
    keys = {s.embedder for s in states if s.embedder}
    if len(keys) > 1:
        notes.append("the steps' clusters were embedded differently, so centroids are compared only between steps "
                     "of the same embedder")
    manifest = runs[-1][1].manifest
    return {
        "format": FORMAT, "schema_version": SCHEMA_VERSION,
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "tool": {"name": "erroranalysis", "version": __version__},
        "experiment": str(folder), "task": manifest.get("task", "classification"),
        "labels": list(manifest.get("labels") or []),
        "labels_db": str(store.path) if store is not None else None,
        "matching": params.record(),
        "steps": rows,
        "types": [{**t.to_dict(), "story": stories[t.type_id]} for t in types],
        "labeled": _labeled_series(good),
        "events": [e.to_dict() for e in events],
        "signals": {name: {"steps": s, "values": [x if math.isfinite(x) else None for x in v]}
                    for name, (s, v) in signals.items()},
        "findings": findings, "training_log": log_file, "notes": notes,
    }


def _labeled_series(rows: list[dict]) -> list[dict]:
    names = sorted({n for r in rows for n in r["labeled"]}, key=str.casefold)
    return [{"name": n, "steps": [{"step": r["step"], "size": r["labeled"].get(n, 0)} for r in rows]} for n in names]


def write_timeline(doc: dict, out: str | Path) -> Path:
    """timeline.json at `out` (a file, or a folder to write it in), atomically."""
    out = Path(out)
    if out.is_dir():
        out = out / "timeline.json"
    if (out.parent / rundir.MANIFEST).is_file():
        raise UserError(f"{out}: inside a run directory; write the timeline elsewhere (the experiment folder is fine).")
    return files.write_json(out, doc)


# -- pruning --------------------------------------------------------------------------------------------------


def prune_run(run: rundir.Run) -> dict | None:
    """Drop the run's probabilities, hidden states and failure embeddings through the `prune` stage (it commits
    their removal, so the manifest says they are gone), keeping its clusters' centroids for the timeline's
    matching; None when there is nothing to drop."""
    import pandas as pd

    present = [name for name in BULKY if readers.usable(run, name)]
    if not present:
        return None
    centroids, key = cluster_centroids(run)
    sizes = {name: files.size_of(run.file(name)) for name in present}
    with run.stage("prune", {"removed": present}) as staging:
        if centroids:
            ids = sorted(centroids)
            staging.write_parquet(rundir.CENTROIDS, pd.DataFrame({
                "cluster_id": np.asarray(ids, dtype=np.int64), "embedder_key": [key] * len(ids),
                "centroid": [centroids[c].astype(np.float32).tolist() for c in ids]}))
        staging.facts.update({"removed": present, "bytes_freed": int(sum(sizes.values()))})
    return {"run": str(run.path), "removed": present, "bytes_freed": int(sum(sizes.values()))}


def prune_steps(path: str | Path, *, keep_last: int = 1) -> list[dict]:
    """Prune every step run of the experiment but the latest `keep_last`; the pruned runs' summaries."""
    check_int("keep_last", keep_last, 0)
    runs = step_runs(path)
    old = runs[:len(runs) - keep_last] if keep_last else runs
    # the step folders are the experiment's entries: each must be a folder of it, not a symlink to a run elsewhere,
    # and each run one a writer may touch; all of them are checked before any is pruned
    confine.entries(experiment_folder(path), [run.path.name for _, run in old], "step folder")
    for _, run in old:
        run.check_writable("prune")
    done = []
    for _, run in old:
        result = prune_run(run)
        if result is not None:
            done.append(result)
    return done

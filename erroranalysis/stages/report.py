"""`erroranalysis report RUN --out report.html` and `compare --html`: one self-contained HTML file to share.

The document is read from the run through its readers, bounded whatever the run's size: the largest clusters with
a few exemplars each (read by id, not every row), the best slices, the top label issues, the taxonomy's types with
their exemplars. `erroranalysis.report` renders it (pure); the file is written atomically.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path

from erroranalysis import __version__
from erroranalysis.compare import Report
from erroranalysis.core import files
from erroranalysis.core.errors import UserError
from erroranalysis.rundir import Run, readers


@dataclass(frozen=True)
class Limits:
    """How much of a run the report shows, so its size does not grow with the run."""

    clusters: int = 30
    exemplars: int = 3
    slices: int = 25
    label_issues: int = 15
    findings: int = 30
    error_types: int = 40


def run_document(path: str | Path, *, labels_db: str | Path | None = None, limits: Limits = Limits()) -> dict:
    """What the report of one run shows, as JSON-ready data (`erroranalysis.report.render_run` draws it)."""
    run = Run.open(path)
    manifest = run.manifest
    metrics = readers.read_metrics(run)
    model, data = manifest.get("model") or {}, manifest.get("data") or {}
    return {
        "tool_version": __version__,
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "run": {"name": run.name, "path": str(run.path.resolve()), "task": run.task, "n": metrics["overall"]["n"],
                "model": model.get("path"), "data": data.get("path"), "created": manifest.get("created"),
                "stages": {name: {"status": (run.state(name, manifest) or {}).get("status"),
                                  "seconds": s.get("seconds")} for name, s in manifest.get("stages", {}).items()}},
        "metrics": metrics,
        "clusters": _clusters(run, limits),
        "slices": _slices(run, limits),
        "checks": _checks(run, limits),
        "taxonomy": _taxonomy(run, labels_db, limits),
    }


def _missing(run: Run, stage: str) -> dict:
    return {"available": False, "reason": run.explain(stage) or f"stage {stage!r} wrote nothing to show"}


def _clusters(run: Run, limits: Limits) -> dict:
    frame = readers.read_clusters(run, optional=True)
    if frame is None:
        return _missing(run, "cluster")
    top = frame.head(limits.clusters)
    ids = [str(i) for ids in top["exemplar_ids"] for i in list(ids)[: limits.exemplars]]
    texts = readers.read_prediction_rows(run, ids) if ids else None
    by_id = {} if texts is None else {r["example_id"]: r for r in texts.to_dict("records")}
    rows = []
    for r in top.to_dict("records"):
        exemplars = [by_id[str(i)] for i in list(r["exemplar_ids"])[: limits.exemplars] if str(i) in by_id]
        rows.append({"cluster_id": int(r["cluster_id"]), "name": r["name"], "size": int(r["size"]),
                     "kind": r.get("kind"), "keywords": list(r.get("keywords") or []),
                     "exemplars": [{k: ex.get(k) for k in ("example_id", "label", "pred", "text")} for ex in exemplars]})
    return {"available": True, "n": int(len(frame)), "rows": rows}


def _slices(run: Run, limits: Limits) -> dict:
    found = readers.read_slices(run, optional=True)
    if found is None:
        return _missing(run, "slices")
    frame = found[0]
    columns = [c for c in ("slice_id", "description", "support", "failures", "error_rate", "lift", "p_value")
               if c in frame.columns]
    return {"available": True, "n": int(len(frame)), "rows": frame[columns].head(limits.slices).to_dict("records")}


def _checks(run: Run, limits: Limits) -> dict:
    doc = readers.read_checks_report(run, optional=True)
    if doc is None:
        return _missing(run, "checks")
    issues = (doc.get("label_issues") or {}).get("top") or []
    return {"available": True, "findings": (doc.get("findings") or [])[: limits.findings],
            "label_issues": [i for i in issues if i.get("label_issue")][: limits.label_issues]}


def _taxonomy(run: Run, labels_db, limits: Limits) -> dict:
    from erroranalysis.stages.export import build_taxonomy, open_store

    store = open_store(run.path, labels_db)
    if store is None:
        return {"available": False, "reason": "no labels database yet; label error types in the app "
                                              "(erroranalysis ui)"}
    types = store.error_types()
    if not types:
        return {"available": False, "reason": f"no error types in {store.path} yet; label some in the app"}
    doc = build_taxonomy(run, store, exemplars=limits.exemplars, error_types=types)
    return {"available": True, "summary": doc["summary"], "error_types": doc["error_types"][: limits.error_types]}


def write_run_report(path: str | Path, out: str | Path, *, labels_db: str | Path | None = None) -> Path:
    """The run's report as one HTML file at `out` (written atomically); returns `out`."""
    from erroranalysis.report import render_run

    out = _target(out)
    files.write_text(out, render_run(run_document(path, labels_db=labels_db)))
    return out


def write_compare_html(report: Report, out: str | Path) -> Path:
    """A comparison (`compare_runs`) as one HTML file at `out`; returns `out`."""
    from erroranalysis.report import render_compare

    out = _target(out)
    files.write_text(out, render_compare(report.doc))
    return out


def _target(out: str | Path) -> Path:
    out = Path(out)
    if out.is_dir():
        raise UserError(f"{out}: is a folder; name the HTML file to write, e.g. {out / 'report.html'}.")
    return out

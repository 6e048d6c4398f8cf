"""The Timeline page's data and figure: a training run's step runs (erroranalysis.stages.build_timeline), cached on
their files and the labels version, and one Plotly figure of classes, error types and training signals against step.

The page's session-state keys are declared here, beside the only page that uses them (move them to state.py with
the rest once the app's rework settles).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import streamlit as st

from erroranalysis import stages
from erroranalysis import timeline as tl
from erroranalysis.core.errors import RunError
from erroranalysis.labels import LabelStore
from erroranalysis.rundir import ASSIGNMENTS, CLUSTERS, EMBEDDINGS, MANIFEST, METRICS, TRAINER_STATE
from erroranalysis_ui.eaui import charts, data, labeled

EXPERIMENT = "ea_tl_experiment"  # the experiment (folder of step runs) shown, relative to the runs folder
STEP = "ea_tl_step"              # the step shown in detail
TYPE = "ea_tl_type"              # the error type (type id) shown in detail
CHART = "ea_tl_chart"            # the chart's selection event
CHART_SEEN = "ea_tl_chart_seen"  # the selection last applied (a new click picks its step and type)

ROOT = "."  # the experiment key of step runs lying directly in the runs folder
MAX_TYPES = 12  # error-type lines drawn (the largest); all are listed below the chart
_RUN_FILES = (MANIFEST, METRICS, ASSIGNMENTS, CLUSTERS, EMBEDDINGS, TRAINER_STATE)


def experiments(root: Path) -> list[str]:
    """Keys (relative to the runs folder) of the folders that hold step runs (step-000500/ ...)."""
    found = set()
    for key in data.discover(root):
        parts = key.split("/")
        if tl.step_of(parts[-1]) is not None:
            found.add("/".join(parts[:-1]) or ROOT)
    return sorted(found)


def experiment_of(run_key: str | None) -> str | None:
    """The experiment a run key belongs to, when it is a step run."""
    if not run_key:
        return None
    parts = run_key.split("/")
    return ("/".join(parts[:-1]) or ROOT) if tl.step_of(parts[-1]) is not None else None


def folder(root: Path, key: str) -> Path:
    """The experiment's folder, refusing anything outside the runs folder."""
    path = root if key == ROOT else root / key
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError):
        raise RunError(f"{key!r}: not a folder of the runs folder {root}; pick a training run above.") from None
    if Path(key).is_absolute() or ".." in Path(key).parts or not path.is_dir():
        raise RunError(f"{key!r}: not a training run in {root}; pick one above.")
    return path


def first_run(root: Path, key: str) -> Path:
    """The experiment's first step run (the labels database of its runs is found from it)."""
    path = folder(root, key)
    return min((p for p in path.iterdir() if tl.step_of(p.name) is not None), key=lambda p: tl.step_of(p.name))


def step_key(experiment: str, run_name: str) -> str:
    """The run key of a step run of `experiment`."""
    return run_name if experiment == ROOT else f"{experiment}/{run_name}"


def timeline(root: Path, key: str, db: LabelStore) -> dict:
    """stages.build_timeline of the experiment, cached on its step runs' files and the labels version."""
    path = folder(root, key)
    runs = sorted(p for p in path.iterdir() if tl.step_of(p.name) is not None and (p / MANIFEST).is_file())
    stamps = tuple((p.name, data.file_stamps(p, *_RUN_FILES)) for p in runs)
    return _timeline(str(path), stamps, str(db.path), db.version(), db)


@st.cache_data(show_spinner="Reading the training run…", max_entries=8)
def _timeline(path: str, stamps, db_path: str, version: int, _db: LabelStore) -> dict:
    return stages.build_timeline(path, store=_db)


def type_examples(root: Path, experiment: str, t: dict, limit: int = 20) -> list[tuple[dict, object]]:
    """(the type's occurrence at a step, its failing examples there) for each step where it is present."""
    out = []
    for occurrence in t["steps"]:
        base = labeled.base_table(data.run_dir(root, step_key(experiment, tl.step_name(occurrence["step"]))))
        rows = base[(base["cluster_id"] == occurrence["cluster_id"]) & ~base["correct"].astype(bool)]
        out.append((occurrence, rows[["example_id", "label", "pred", "text"]].head(limit)))
    return out


def selection(event) -> tuple[int | None, str | None]:
    """(step, type id) of the chart point a click picked; (None, None) when none."""
    try:
        points = event["selection"]["points"]
    except (KeyError, TypeError):
        return None, None
    for point in points or []:
        custom = point.get("customdata")
        if isinstance(custom, (list, tuple)) and custom:
            return int(custom[0]), (str(custom[1]) if len(custom) > 1 and custom[1] else None)
    return None, None


# -- the figure -----------------------------------------------------------------------------------------------------

_SIGNALS = (("loss", ("loss", "eval_loss"), "loss"), ("learning_rate", ("learning_rate",), "learning rate"),
            ("grad_norm", ("grad_norm",), "grad norm"))
_STYLE = {"loss": ("training loss", charts.PRIMARY), "eval_loss": ("validation loss", "#10B981"),
          "learning_rate": ("learning rate", "#64748B"), "grad_norm": ("grad norm", "#8B5CF6")}
_EVENT_SYMBOL = {"appeared": "triangle-up", "returned": "triangle-up", "fixed": "x", "dissolved": "x"}


def figure(doc: dict, *, step: int | None = None, type_id: str | None = None):
    """Per-class F1 (or output-check pass rates), failures per error type, loss and validation loss, learning rate
    and grad norm against step, on one shared x axis; the findings of the training log as dotted lines, the
    events (a type appearing or fixed) as markers. Every point of the first two panels is clickable: its
    customdata is [step, type id]."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = [r for r in doc["steps"] if "problem" not in r]
    steps = [r["step"] for r in rows]
    generation = doc["task"] == "generation" and any(r.get("checks") for r in rows)
    signals = {k: v for k, v in doc["signals"].items() if v["steps"]}
    panels = [("metrics", "output-check pass rate" if generation else "F1 per class"),
              ("types", "failures per error type")]
    panels += [(key, title) for key, names, title in _SIGNALS if any(n in signals for n in names)]
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.05,
                        subplot_titles=[t for _, t in panels], row_heights=[1.3, 1.3] + [0.8] * (len(panels) - 2))
    row_of = {key: i + 1 for i, (key, _) in enumerate(panels)}

    per = "checks" if generation else "per_class_f1"
    names = list(dict.fromkeys(k for r in rows for k in (r.get(per) or {})))
    for i, name in enumerate(names):
        ys = [(r.get(per) or {}).get(name) for r in rows]
        fig.add_trace(go.Scatter(x=steps, y=ys, mode="lines+markers", name=charts.html_text(charts.snippet(name, 30)),
                                 legendgroup="metrics", line=dict(color=charts.PALETTE[i % len(charts.PALETTE)]),
                                 customdata=[[s, ""] for s in steps],
                                 hovertemplate=f"{charts.html_text(name)}<br>step %{{x:,}}: %{{y:.3f}}<extra></extra>"),
                      row=row_of["metrics"], col=1)
    overall = [r.get("pass_rate") if generation else r.get("macro_f1") for r in rows]
    fig.add_trace(go.Scatter(x=steps, y=overall, mode="lines", name="pass rate" if generation else "macro F1",
                             line=dict(color="#0F172A", dash="dash", width=2), customdata=[[s, ""] for s in steps],
                             hovertemplate="step %{x:,}: %{y:.3f}<extra></extra>"), row=row_of["metrics"], col=1)

    types = sorted(doc["types"], key=lambda t: -max(s["size"] for s in t["steps"]))[:MAX_TYPES]
    for i, t in enumerate(types):
        sizes = {s["step"]: s["size"] for s in t["steps"]}
        ys = [sizes.get(r["step"], 0) if r.get("clustered") else None for r in rows]  # a gap: nothing clustered
        chosen = t["type_id"] == type_id
        fig.add_trace(go.Scatter(
            x=steps, y=ys, mode="lines+markers", name=charts.html_text(f"{t['type_id']} {charts.snippet(t['name'], 28)}"),
            legendgroup="types", line=dict(color=charts.PALETTE[i % len(charts.PALETTE)], width=4 if chosen else 2),
            marker=dict(size=[10 if s in sizes else 5 for s in steps]),
            customdata=[[s, t["type_id"]] for s in steps],
            hovertemplate=charts.html_text(f"{t['type_id']} {charts.snippet(t['name'], 60)}")
            + "<br>step %{x:,}: %{y:,} failures<extra></extra>"), row=row_of["types"], col=1)
    marks = [e for e in doc["events"] if e["kind"] in _EVENT_SYMBOL and e["type_id"]]
    if marks:
        size_of = {(t["type_id"], s["step"]): s["size"] for t in doc["types"] for s in t["steps"]}
        fig.add_trace(go.Scatter(
            x=[e["step"] for e in marks], y=[size_of.get((e["type_id"], e["step"]), 0) for e in marks],
            mode="markers", name="events", legendgroup="types",
            marker=dict(symbol=[_EVENT_SYMBOL[e["kind"]] for e in marks], size=13, color="#0F172A"),
            customdata=[[e["step"], e["type_id"]] for e in marks],
            text=[charts.html_text(charts.snippet(e["text"], 160)) for e in marks],
            hovertemplate="%{text}<extra></extra>"), row=row_of["types"], col=1)

    for key, names, _ in _SIGNALS:
        for name in names:
            if key in row_of and name in signals:
                xs = np.asarray(signals[name]["steps"], dtype=float)
                ys = np.array([np.nan if v is None else v for v in signals[name]["values"]], dtype=float)
                label, color = _STYLE[name]
                fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=label, line=dict(color=color, width=2),
                                         hovertemplate=f"{label}<br>step %{{x:,}}: %{{y:.4g}}<extra></extra>"),
                              row=row_of[key], col=1)
    for f in doc["findings"]:
        if f.get("severity") in ("error", "warning") and f.get("steps"):
            fig.add_vline(x=f["steps"][0], line=dict(color=charts.FINDING_COLORS[f["severity"]], dash="dot",
                                                      width=1.5), row="all", col=1)
    for s in steps:  # the analyzed steps, faintly, so a step's column is easy to hit
        fig.add_vline(x=s, line=dict(color=charts.GRID, width=1), row="all", col=1)
    if step is not None:
        fig.add_vline(x=step, line=dict(color=charts.PRIMARY, width=2), row="all", col=1)
    height = 300 * 2 + 170 * (len(panels) - 2) + 110
    fig.update_layout(**charts.figure_layout(height=height, hovermode="closest", clickmode="event+select",
                                       dragmode=False, legend=dict(font=dict(size=11)),
                                       margin=dict(l=10, r=10, t=40, b=10)))
    fig.update_xaxes(gridcolor=charts.GRID, zeroline=False)
    fig.update_yaxes(gridcolor=charts.GRID, zeroline=False)
    fig.update_xaxes(title_text="step", row=len(panels), col=1)
    return fig

"""The report's Plotly figures, from the sections of metrics.json and the compare document (pure: dicts in,
figures out). Each is bounded: at most MAX_CLASSES classes in a matrix, MAX_BARS bars."""

from __future__ import annotations

MAX_CLASSES = 30  # a confusion matrix shows the classes with the most errors beyond this
MAX_BARS = 40
LAYOUT = {"template": "plotly_white", "margin": {"l": 60, "r": 20, "t": 40, "b": 60}, "font": {"size": 12}}


def _go():
    import plotly.graph_objects as go

    return go


def per_class_f1(per_class: list[dict]):
    rows = sorted(per_class, key=lambda r: (r.get("f1") is None, r.get("f1") or 0))[:MAX_BARS]
    go = _go()
    errors = [None if not r.get("f1_ci") else [r["f1_ci"][1] - r["f1"], r["f1"] - r["f1_ci"][0]] for r in rows]
    has_ci = all(e is not None for e in errors) and bool(errors)
    bar = go.Bar(x=[r["f1"] for r in rows], y=[str(r["label"]) for r in rows], orientation="h", name="F1",
                 marker_color="#4f46e5",
                 error_x={"type": "data", "symmetric": False, "array": [e[0] for e in errors],
                          "arrayminus": [e[1] for e in errors]} if has_ci else None)
    fig = go.Figure(bar)
    fig.update_layout(title="F1 per class (95% interval)" if has_ci else "F1 per class", xaxis={"range": [0, 1]},
                      height=max(260, 26 * len(rows) + 100), **LAYOUT)
    return fig


def confusion(confusion_doc: dict):
    """The row-normalized confusion matrix (counts on hover)."""
    labels, matrix = list(confusion_doc["labels"]), confusion_doc["matrix"]
    keep = list(range(len(labels)))
    if len(labels) > MAX_CLASSES:  # the classes most involved in errors, in their order
        errors = [sum(matrix[i]) - matrix[i][i] + sum(row[i] for row in matrix) - matrix[i][i]
                  for i in range(len(labels))]
        keep = sorted(sorted(range(len(labels)), key=lambda i: -errors[i])[:MAX_CLASSES])
    names = [str(labels[i]) for i in keep]
    counts = [[matrix[i][j] for j in keep] for i in keep]
    norm = [[c / max(sum(matrix[i]), 1) for c in row] for i, row in zip(keep, counts)]
    go = _go()
    fig = go.Figure(go.Heatmap(z=norm, x=names, y=names, customdata=counts, colorscale="Blues", zmin=0, zmax=1,
                               hovertemplate="true %{y}<br>predicted %{x}<br>%{customdata} (%{z:.1%})<extra></extra>"))
    title = "Confusion (rows: true, columns: predicted; share of each true class)"
    if len(keep) < len(labels):
        title += f" — the {len(keep)} of {len(labels)} classes with most errors"
    fig.update_layout(title=title, yaxis={"autorange": "reversed"}, height=max(360, 22 * len(names) + 160), **LAYOUT)
    return fig


def reliability(calibration: dict):
    bins = [b for b in calibration["bins"] if b.get("count")]
    go = _go()
    fig = go.Figure([go.Scatter(x=[0, 1], y=[0, 1], mode="lines", line={"dash": "dash", "color": "#94a3b8"},
                                name="perfect"),
                     go.Scatter(x=[b["confidence"] for b in bins], y=[b["accuracy"] for b in bins],
                                mode="lines+markers", marker={"size": [6 + 14 * (b["count"] / max(
                                    max(x["count"] for x in bins), 1)) for b in bins]},
                                customdata=[b["count"] for b in bins], name="model",
                                hovertemplate="confidence %{x:.2f}<br>accuracy %{y:.2f}<br>%{customdata} examples"
                                              "<extra></extra>")])
    fig.update_layout(title="Reliability (marker size: examples in the bin)", xaxis={"title": "confidence",
                      "range": [0, 1]}, yaxis={"title": "accuracy", "range": [0, 1]}, height=380, **LAYOUT)
    return fig


def cluster_sizes(rows: list[dict]):
    rows = rows[:MAX_BARS]
    go = _go()
    fig = go.Figure(go.Bar(x=[r["size"] for r in rows], y=[f"#{r['cluster_id']} {str(r['name'])[:50]}" for r in rows],
                           orientation="h", marker_color="#f97316"))
    fig.update_layout(title="Failures per error cluster", yaxis={"autorange": "reversed"},
                      height=max(260, 24 * len(rows) + 100), **LAYOUT)
    return fig


def f1_deltas(per_class: list[dict], title: str):
    """A comparison's per-class F1 change in points, with its paired interval."""
    rows = sorted(per_class, key=lambda r: r["f1"]["delta"] or 0)[:MAX_BARS]
    go = _go()
    deltas = [100 * (r["f1"]["delta"] or 0) for r in rows]
    ci = [r["f1"]["ci"] if r["f1"]["ci"] and r["f1"]["ci"][0] is not None else None for r in rows]
    has_ci = all(c is not None for c in ci) and bool(ci)
    fig = go.Figure(go.Bar(x=deltas, y=[str(r["label"]) for r in rows], orientation="h",
                           marker_color=["#b91c1c" if d < 0 else "#15803d" for d in deltas],
                           error_x={"type": "data", "symmetric": False,
                                    "array": [100 * c[1] - d for c, d in zip(ci, deltas)],
                                    "arrayminus": [d - 100 * c[0] for c, d in zip(ci, deltas)]} if has_ci else None))
    fig.update_layout(title=title, xaxis={"title": "F1 change (points)"}, height=max(260, 26 * len(rows) + 100),
                      **LAYOUT)
    return fig

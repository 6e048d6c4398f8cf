"""Plotly figures of the app, built from plain arrays and DataFrames (no Streamlit here, so they are testable)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

PRIMARY = "#4F46E5"
MUTED = "#94A3B8"
GRID = "rgba(148,163,184,0.25)"
FONT = "Inter, ui-sans-serif, system-ui, -apple-system, 'Segoe UI', sans-serif"
# A calm qualitative palette with enough distinct hues for many clusters (Tableau 20-like, reordered).
PALETTE = ["#4F46E5", "#F59E0B", "#10B981", "#EF4444", "#06B6D4", "#8B5CF6", "#EC4899", "#84CC16", "#F97316",
           "#14B8A6", "#6366F1", "#EAB308", "#22C55E", "#E11D48", "#0EA5E9", "#A855F7", "#D946EF", "#65A30D",
           "#FB923C", "#2DD4BF"]
SEVERITY_COLORS = {"low": "#94A3B8", "medium": "#F59E0B", "high": "#F97316", "critical": "#E11D48"}
SNIPPET = 120


def cluster_color(cluster_id: int) -> str:
    return MUTED if cluster_id < 0 else PALETTE[cluster_id % len(PALETTE)]


def figure_layout(**extra) -> dict:
    """The app's Plotly layout (font, margins, transparent background, hover labels), with `extra` on top."""
    base = dict(
        font=dict(family=FONT, size=13, color="#0F172A"),
        margin=dict(l=10, r=10, t=30, b=10),
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        hoverlabel=dict(bgcolor="white", font=dict(family=FONT, size=12, color="#0F172A"), bordercolor="#CBD5E1"),
    )
    base.update(extra)
    return base


def snippet(text: str, limit: int = SNIPPET) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def html_text(text: str) -> str:
    """`text` escaped for Plotly's hover and legend text."""
    # Plotly renders hover text as (a subset of) HTML: user text must not become markup.
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# -- confusion matrix -------------------------------------------------------------------------------------------------


def confusion_figure(labels: Sequence[str], matrix, *, normalized: bool = False,
                     selected: tuple[str, str] | None = None):
    """Heatmap of true (rows) x predicted (columns): correct cells in green, errors in red, every cell clickable.

    Plotly heatmaps do not report clicks to Streamlit, so each cell also carries an invisible square marker (trace 2)
    whose selection is the cell's selection; its customdata is [true, pred, count, share of the true class].
    """
    import plotly.graph_objects as go

    labels = [str(x) for x in labels]
    counts = np.asarray(matrix, dtype=float)
    k = len(labels)
    row_sums = counts.sum(axis=1, keepdims=True)
    share = np.divide(counts, row_sums, out=np.zeros_like(counts), where=row_sums > 0)
    values = share if normalized else counts
    eye = np.eye(k, dtype=bool)
    diag = np.where(eye, values, np.nan)
    off = np.where(~eye & (counts > 0), values, np.nan)
    text = [[(f"{share[i, j]:.0%}" if normalized else f"{int(counts[i, j]):,}") if counts[i, j] else ""
             for j in range(k)] for i in range(k)]
    off_max = np.nanmax(off) if np.isfinite(off).any() else 1.0
    diag_max = np.nanmax(diag) if np.isfinite(diag).any() else 1.0
    font_size = 14 if k <= 8 else 11 if k <= 15 else 9
    fig = go.Figure()
    fig.add_trace(go.Heatmap(z=diag, x=labels, y=labels, hoverinfo="skip", showscale=False, xgap=2, ygap=2,
                             colorscale=[[0, "#D1FAE5"], [0.5, "#34D399"], [1, "#047857"]], zmin=0, zmax=diag_max))
    fig.add_trace(go.Heatmap(z=off, x=labels, y=labels, hoverinfo="skip", showscale=False, xgap=2, ygap=2,
                             colorscale=[[0, "#FFE4E6"], [0.4, "#FB7185"], [1, "#9F1239"]], zmin=0, zmax=off_max))
    xs, ys, custom = [], [], []
    for i in range(k):
        for j in range(k):
            xs.append(labels[j])
            ys.append(labels[i])
            custom.append([labels[i], labels[j], int(counts[i, j]), float(share[i, j])])
    selected_points = None
    if selected is not None and selected[0] in labels and selected[1] in labels:
        selected_points = [labels.index(selected[0]) * k + labels.index(selected[1])]
    size = max(14, min(60, int(360 / max(k, 1))))
    fig.add_trace(go.Scatter(
        x=xs, y=ys, mode="markers", customdata=custom, name="cells",
        marker=dict(symbol="square", size=size, color=PRIMARY, opacity=0.0),
        selected=dict(marker=dict(opacity=0.3)), unselected=dict(marker=dict(opacity=0.0)),
        selectedpoints=selected_points,
        hovertemplate=("True <b>%{customdata[0]}</b> → predicted <b>%{customdata[1]}</b><br>"
                       "%{customdata[2]:,} examples · %{customdata[3]:.1%} of the class<extra></extra>"),
        showlegend=False,
    ))
    # Cell numbers as annotations: one colour per cell (white on dark cells), untouched by selection dimming.
    annotations = []
    for i in range(k):
        for j in range(k):
            if not text[i][j]:
                continue
            top = diag_max if i == j else off_max
            dark = top > 0 and values[i, j] / top > 0.55
            annotations.append(dict(x=labels[j], y=labels[i], text=text[i][j], showarrow=False,
                                    font=dict(size=font_size, color="white" if dark else "#0F172A")))
    rotate = max(len(x) for x in labels) * k > 60 if labels else False
    height = max(380, min(820, 64 * k + 150))
    fig.update_layout(**figure_layout(
        height=height, clickmode="event+select", dragmode=False, annotations=annotations,
        xaxis=dict(title=dict(text="Predicted", standoff=6), side="top", tickangle=-35 if rotate else 0,
                   showgrid=False, zeroline=False),
        yaxis=dict(title=dict(text="True label", standoff=6), autorange="reversed", showgrid=False, zeroline=False),
        margin=dict(l=10, r=10, t=90 if rotate else 70, b=10),
    ))
    return fig


def pair_from_selection(event) -> tuple[str, str] | None:
    """The (true, predicted) pair of a confusion_figure selection event, or None."""
    try:
        points = event["selection"]["points"]
    except (KeyError, TypeError):
        return None
    for point in points or []:
        custom = point.get("customdata")
        if custom and len(custom) >= 2:
            return str(custom[0]), str(custom[1])
    return None


# -- calibration ------------------------------------------------------------------------------------------------------


def reliability_figure(bins: list[dict]):
    """Reliability diagram: accuracy against confidence per bin (bars), the diagonal, and the count per bin.

    Only bins that hold examples are drawn: an empty bin has no accuracy or confidence (metrics.json stores null)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    bins = [b for b in bins if b.get("count") and finite(b.get("accuracy")) and finite(b.get("confidence"))]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.75, 0.25], vertical_spacing=0.04)
    bins = [b for b in bins if b.get("count") and b.get("accuracy") is not None]  # empty bins are stored as null
    mids = [(b["lower"] + b["upper"]) / 2 for b in bins]
    widths = [(b["upper"] - b["lower"]) * 0.92 for b in bins]
    acc = [float(b["accuracy"]) for b in bins]
    conf = [float(b["confidence"]) for b in bins]
    counts = [int(b["count"]) for b in bins]
    gap_color = ["#FDA4AF" if c - a > 0.05 else "#A5B4FC" for a, c in zip(acc, conf)]
    fig.add_trace(go.Bar(x=mids, y=acc, width=widths, marker=dict(color=gap_color, line=dict(width=0)),
                         name="accuracy", customdata=np.column_stack([conf, counts]) if bins else None,
                         hovertemplate="confidence %{customdata[0]:.2f}<br>accuracy %{y:.2f}<br>"
                                       "%{customdata[1]:,} examples<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", line=dict(color="#0F172A", dash="dot", width=1),
                             name="perfect calibration", hoverinfo="skip"), row=1, col=1)
    fig.add_trace(go.Scatter(x=conf, y=acc, mode="markers", marker=dict(color=PRIMARY, size=7), name="bin mean",
                             hoverinfo="skip"), row=1, col=1)
    fig.add_trace(go.Bar(x=mids, y=counts, width=widths, marker=dict(color=MUTED), name="examples",
                         hovertemplate="%{y:,} examples<extra></extra>"), row=2, col=1)
    fig.update_layout(**figure_layout(height=380, showlegend=False, bargap=0))
    fig.update_xaxes(range=[0, 1], gridcolor=GRID, zeroline=False)
    fig.update_yaxes(range=[0, 1.02], gridcolor=GRID, zeroline=False, title_text="accuracy", row=1, col=1)
    fig.update_yaxes(gridcolor=GRID, zeroline=False, title_text="n", row=2, col=1)
    fig.update_xaxes(title_text="confidence", row=2, col=1)
    return fig


def slices_figure(rows, overall_error: float | None):
    """Horizontal bars of error rate per slice (worst on top) with the overall error rate as a line."""
    import plotly.graph_objects as go

    rows = rows.sort_values("error_rate", ascending=True)
    colors = ["#F43F5E" if overall_error is not None and e > overall_error * 1.2 else "#A5B4FC"
              for e in rows["error_rate"]]
    fig = go.Figure(go.Bar(y=[html_text(s) for s in rows["slice"].astype(str)], x=rows["error_rate"], orientation="h",
                           marker=dict(color=colors), customdata=rows["n"],
                           hovertemplate="%{y}<br>error rate %{x:.1%} · n=%{customdata:,}<extra></extra>"))
    if overall_error is not None:
        fig.add_vline(x=overall_error, line=dict(color="#0F172A", dash="dot", width=1),
                      annotation_text=f"overall {overall_error:.1%}", annotation_position="top")
    fig.update_layout(**figure_layout(height=max(180, 34 * len(rows) + 70), xaxis=dict(tickformat=".0%", gridcolor=GRID),
                                yaxis=dict(automargin=True)))
    return fig


# -- clusters ---------------------------------------------------------------------------------------------------------


def map_traces(points, names: dict[int, str], *, background=None) -> dict:
    """The 2-D layout of failing examples coloured by cluster, as a plain Plotly figure dict (WebGL traces).

    Built once per run and cached; `styled_map` then highlights one cluster cheaply (a cluster switch restyles
    markers and rebuilds nothing). `points` has example_id, x, y, cluster_id, label, pred, text; `background`
    (optional) the same columns for correct examples, drawn faint and not hoverable. Each point's customdata is
    its example_id; a selection event's points carry it back.
    """
    data = []
    if background is not None and len(background):
        data.append({"type": "scattergl", "x": background["x"].to_numpy(), "y": background["y"].to_numpy(),
                     "mode": "markers", "name": "correct", "hoverinfo": "skip",
                     "marker": {"size": 3, "color": "#CBD5E1", "opacity": 0.35}})
    cids = points["cluster_id"].to_numpy()
    ids = points["example_id"].astype(str).to_numpy(dtype=object)
    # Hover text is built once, here, as one HTML-escaped string per point: Plotly validates a 1-D array of
    # strings ~20x faster than a 2-D customdata array, which matters at 10k+ points on every rerun.
    name_of = {int(c): html_text(names.get(int(c), f"cluster {c}") if c >= 0 else "unclustered")
               for c in set(cids.tolist())}
    cluster_names = np.array([name_of[int(c)] for c in cids], dtype=object)
    snippets = html_series(points["text"].astype(str).str.replace(r"\s+", " ", regex=True).str.slice(0, SNIPPET))
    hover = ("<b>" + cluster_names + "</b><br>" + html_series(points["label"].astype(str)) + " → "
             + html_series(points["pred"].astype(str)) + " · <i>" + html_series(points["example_id"].astype(str))
             + "</i><br>" + snippets)
    x, y = points["x"].to_numpy(), points["y"].to_numpy()
    for cid in sorted(set(cids.tolist()), key=lambda c: (c < 0, c)):
        idx = np.flatnonzero(cids == cid)
        name = names.get(int(cid), f"cluster {cid}") if cid >= 0 else "unclustered"
        data.append({"type": "scattergl", "x": x[idx], "y": y[idx], "mode": "markers", "customdata": ids[idx],
                     "text": hover[idx], "hovertemplate": "%{text}<extra></extra>", "meta": int(cid),
                     "name": html_text(snippet(f"{cid}: {name}" if cid >= 0 else "unclustered", 40)),
                     "marker": {"size": 6, "color": cluster_color(int(cid)), "opacity": 0.8}})
    layout = figure_layout(
        height=540, dragmode="lasso", clickmode="event+select", hovermode="closest",
        legend=dict(orientation="h", itemsizing="constant", font=dict(size=11), x=0, y=-0.02, yanchor="top"),
        xaxis=dict(visible=False), yaxis=dict(visible=False, scaleanchor="x"),
        margin=dict(l=0, r=0, t=10, b=0),
    )
    return {"data": data, "layout": layout}


def styled_map(base: dict, highlight: int | None) -> dict:
    """`base` (from map_traces) with one cluster drawn larger and the others faded; shares the point arrays."""
    data = []
    for trace in base["data"]:
        cid = trace.get("meta")
        if cid is None or highlight is None:
            data.append(trace)
            continue
        is_hl = int(cid) == int(highlight)
        marker = {**trace["marker"], "size": 8 if is_hl else 6, "opacity": 0.95 if is_hl else 0.3,
                  "line": {"width": 0.6 if is_hl else 0, "color": "white"}}
        data.append({**trace, "marker": marker})
    return {"data": data, "layout": base["layout"]}


def cluster_map(points, names: dict[int, str], *, highlight: int | None = None, background=None):
    """The cluster map as a plotly Figure (map_traces + styled_map)."""
    import plotly.graph_objects as go

    return go.Figure(styled_map(map_traces(points, names, background=background), highlight))


def fast_figure(figure: dict):
    """A go.Figure of a dict this module built, without Plotly's per-element validation: st.plotly_chart validates
    a dict (0.3 s for 10k points) but not a Figure, and map_traces' output is validated once in the tests
    (cluster_map). Falls back to a validated Figure if Plotly ever drops the private switch."""
    import plotly.graph_objects as go

    try:
        return go.Figure(figure, _validate=False)
    except TypeError:  # pragma: no cover - a future Plotly without `_validate`
        return go.Figure(figure)


def html_series(series) -> np.ndarray:
    return (series.str.replace("&", "&amp;", regex=False).str.replace("<", "&lt;", regex=False)
            .str.replace(">", "&gt;", regex=False).to_numpy(dtype=object))


def ids_from_selection(event) -> list[str]:
    """Example ids of the points of a cluster_map selection event (each point's customdata)."""
    try:
        points = event["selection"]["points"]
    except (KeyError, TypeError):
        return []
    ids = []
    for point in points or []:
        custom = point.get("customdata")
        if isinstance(custom, (list, tuple)):
            custom = custom[0] if custom else None
        if custom is not None and custom != "":
            ids.append(str(custom))
    return list(dict.fromkeys(ids))


def error_type_bars(types: list[dict]):
    """Horizontal bars: examples per error type, coloured by severity."""
    import plotly.graph_objects as go

    types = sorted(types, key=lambda t: t["count"])
    fig = go.Figure(go.Bar(
        y=[html_text(snippet(t["name"], 40)) for t in types], x=[t["count"] for t in types], orientation="h",
        marker=dict(color=[SEVERITY_COLORS.get(t["severity"], MUTED) for t in types]),
        customdata=[[t["severity"], t["share_of_failures"]] for t in types],
        hovertemplate="%{y}<br>%{x:,} examples · %{customdata[1]:.1%} of failures · %{customdata[0]}<extra></extra>",
    ))
    fig.update_layout(**figure_layout(height=max(160, 36 * len(types) + 60), xaxis=dict(gridcolor=GRID, title="examples"),
                                yaxis=dict(automargin=True)))
    return fig


def share_text(part: float, whole: float) -> str:
    return "–" if not whole else f"{part / whole:.0%}"


def finite(value) -> bool:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


# -- training signals -------------------------------------------------------------------------------------------------

FINDING_COLORS = {"error": "#E11D48", "warning": "#F59E0B", "info": "#0EA5E9"}
# The signal each training check is about (non_finite: whichever signal is NaN or inf at its steps).
CHECK_SIGNAL = {"loss_not_decreasing": "loss", "divergence": "loss", "grad_spike": "grad_norm",
                "lr_zero": "learning_rate", "lr_constant": "learning_rate", "lr_no_warmup": "learning_rate",
                "lr_no_decay": "learning_rate", "overfitting": "eval_loss", "train_val_gap": "eval_loss"}
_PANELS = (("loss", ("loss", "eval_loss"), "loss"), ("grad_norm", ("grad_norm",), "grad norm"),
           ("learning_rate", ("learning_rate",), "learning rate"))
_SIGNAL_STYLE = {"loss": ("training loss", PRIMARY, "solid"), "eval_loss": ("validation loss", "#10B981", "solid"),
                 "grad_norm": ("grad norm", "#8B5CF6", "solid"), "learning_rate": ("learning rate", "#64748B", "solid")}
MAX_MARKED_STEPS = 200


def training_figure(signals: dict, findings: list[dict]):
    """Loss and validation loss, grad norm and learning rate against step (one panel each, shared x), with the
    findings marked: a marker at each step a finding names, on the signal it is about (an x at the top of the
    panel where the value is NaN or inf), coloured by severity, and a dotted line at the first step of each error
    or warning. `signals` maps a signal name to (steps, values); `findings` are Finding.to_dict() dicts."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    series = {name: (np.asarray(s, dtype=float), np.asarray(v, dtype=float)) for name, (s, v) in signals.items()
              if len(s)}
    panels = [(key, [n for n in names if n in series], title) for key, names, title in _PANELS
              if any(n in series for n in names)]
    if not panels:
        panels = [("loss", [], "loss")]
    row_of = {n: i + 1 for i, (_, names, _) in enumerate(panels) for n in names}
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.07,
                        subplot_titles=[t for _, _, t in panels])
    for name, row in row_of.items():
        steps, values = series[name]
        label, color, dash = _SIGNAL_STYLE[name]
        shown = np.where(np.isfinite(values), values, np.nan)  # NaN and inf break the line; findings mark them
        fig.add_trace(go.Scatter(x=steps, y=shown, mode="lines+markers" if len(steps) <= 40 else "lines",
                                 name=label, line=dict(color=color, width=2, dash=dash), marker=dict(size=5),
                                 hovertemplate=f"{label}<br>step %{{x:,}}: %{{y:.4g}}<extra></extra>"),
                      row=row, col=1)
    for finding in findings:
        color = FINDING_COLORS.get(finding.get("severity"), MUTED)
        steps = [int(s) for s in finding.get("steps") or []][:MAX_MARKED_STEPS]
        names = [CHECK_SIGNAL[finding["check"]]] if finding.get("check") in CHECK_SIGNAL else list(series)
        xs, ys, symbols, rows = [], [], [], []
        for name in names:
            if name not in series:
                continue
            s, v = series[name]
            ok = np.isfinite(v)
            top = float(np.max(v[ok])) if ok.any() else 1.0
            for step in steps:
                at = np.flatnonzero(s == step)
                value = v[at[0]] if at.size else (np.interp(step, s[ok], v[ok]) if ok.any() else np.nan)
                if finding.get("check") == "non_finite" and (not at.size or np.isfinite(value)):
                    continue  # marked on the signal that is NaN or inf there
                bad = not np.isfinite(value)
                xs.append(step)
                ys.append(top if bad else float(value))
                symbols.append("x" if bad else "circle-open")
                rows.append(row_of[name])
        text = html_text(f"{finding.get('severity', '')}: {finding.get('message', '')}")
        for row in sorted(set(rows)):
            pick = [i for i, r in enumerate(rows) if r == row]
            fig.add_trace(go.Scatter(
                x=[xs[i] for i in pick], y=[ys[i] for i in pick], mode="markers",
                name=html_text(snippet(finding.get("check", "finding").replace("_", " "), 30)),
                legendgroup=finding.get("check"), showlegend=row == min(rows),
                marker=dict(symbol=[symbols[i] for i in pick], size=13, color=color, line=dict(width=2.5, color=color)),
                hovertemplate="step %{x:,}<br>" + text + "<extra></extra>"), row=row, col=1)
        if finding.get("severity") in ("error", "warning") and steps:
            fig.add_vline(x=steps[0], line=dict(color=color, dash="dot", width=1), row="all", col=1)
    height = max(300, 250 * len(panels) + 60)
    top = 80  # the legend sits above the first panel's title
    fig.update_layout(**figure_layout(height=height, hovermode="closest",
                                legend=dict(orientation="h", x=0, y=1 + 30 / (height - top - 10), yanchor="bottom",
                                            font=dict(size=11)),
                                margin=dict(l=10, r=10, t=top, b=10)))
    fig.update_xaxes(gridcolor=GRID, zeroline=False)
    fig.update_yaxes(gridcolor=GRID, zeroline=False)
    fig.update_xaxes(title_text="step", row=len(panels), col=1)
    return fig


def residual_figure(target, residual, failing, by_gold: list[dict] | None = None):
    """A regression run's residual plot: prediction - gold against gold, failures in red, the mean residual per
    gold decile as a line (a bias shows as the line off zero)."""
    import plotly.graph_objects as go

    target, residual = np.asarray(target, dtype=float), np.asarray(residual, dtype=float)
    failing = np.asarray(failing, dtype=bool)
    fig = go.Figure()
    for mask, name, color in ((~failing, "within tolerance", MUTED), (failing, "failure", "#E11D48")):
        fig.add_trace(go.Scattergl(x=target[mask], y=residual[mask], mode="markers", name=name,
                                   marker=dict(size=6, color=color, opacity=0.7),
                                   hovertemplate="gold %{x:.3g}<br>error %{y:+.3g}<extra></extra>"))
    if by_gold:
        fig.add_trace(go.Scatter(x=[(b["gold_low"] + b["gold_high"]) / 2 for b in by_gold],
                                 y=[b["mean_residual"] for b in by_gold], mode="lines+markers",
                                 name="mean error by gold decile", line=dict(color=PRIMARY, width=2)))
    fig.add_hline(y=0, line=dict(color="#0F172A", width=1, dash="dot"))
    fig.update_layout(**figure_layout(height=380, xaxis=dict(title="gold", gridcolor=GRID),
                                      yaxis=dict(title="prediction - gold", gridcolor=GRID),
                                      legend=dict(orientation="h", y=-0.2)))
    return fig

"""Confusion matrix: counts or row-normalized; selecting a cell lists the examples with that true -> predicted pair."""

from __future__ import annotations

import numpy as np
import streamlit as st

from erroranalysis.core.errors import UserError
from erroranalysis_ui.eaui import charts, data, labeled, state, tables, task_views
from erroranalysis_ui.eaui import components as ui

current = ui.current_run()
ui.header("Confusion matrix", current, "rows are the true label, columns the prediction")

with ui.guard("Run `erroranalysis metrics RUN` to compute the matrix."):
    metrics = data.metrics(current.path)
confusion = metrics.get("confusion") or {}
if confusion.get("kind") == "multilabel":
    task_views.multilabel_confusion(current, metrics)
    st.stop()
if confusion.get("kind") == "regression_bins":
    st.caption("A regression run: the gold and the predictions read as quantile bins of the gold; the Overview "
               "shows the residual plot.")
labels = [str(x) for x in confusion.get("labels") or []]
matrix = np.asarray(confusion.get("matrix") or [], dtype=float)
if not labels or matrix.shape != (len(labels), len(labels)):
    ui.problem(UserError(f"{current.path / 'metrics.json'}: no usable confusion matrix; run "
                         f"'erroranalysis metrics {current.path}' again."))
    st.stop()

# Every non-empty cell, errors first (largest first), then the diagonal.
cells = [(labels[i], labels[j], int(matrix[i, j])) for i in range(len(labels)) for j in range(len(labels))
         if matrix[i, j] > 0]
cells.sort(key=lambda c: (c[0] == c[1], -c[2], c[0], c[1]))
options = [state.pair_key(t, p) for t, p, _ in cells]
counts = {state.pair_key(t, p): c for t, p, c in cells}
if state.get(state.CM_PAIR) not in options:
    st.session_state[state.CM_PAIR] = options[0] if options else None


def _on_cell() -> None:
    pair = charts.pair_from_selection(st.session_state.get(state.CM_CHART))
    if pair is not None and state.pair_key(*pair) in counts:
        st.session_state[state.CM_PAIR] = state.pair_key(*pair)


if state.CM_MODE not in st.session_state:
    st.session_state[state.CM_MODE] = "Counts"
left, right = st.columns([1, 1], gap="large")
with left:
    mode = st.segmented_control("Show", ["Counts", "Normalized"], key=state.CM_MODE, required=True,
                                help="Normalized: each row divided by the true class's support (recall on the "
                                     "diagonal).")
    selected = state.split_pair(state.get(state.CM_PAIR))
    fig = charts.confusion_figure(labels, matrix, normalized=mode == "Normalized", selected=selected)
    st.plotly_chart(fig, key=state.CM_CHART, on_select=_on_cell, selection_mode="points",
                    config={"displayModeBar": False}, alt="Confusion matrix heatmap; click a cell to list its examples")
    st.caption("Click a cell to list its examples. Green: correct; red: errors, darker is more.")

with right:
    st.selectbox("Cell", options, key=state.CM_PAIR,
                 format_func=lambda k: f"{state.split_pair(k)[0]} → {state.split_pair(k)[1]} · {counts[k]:,}"
                 + ("" if state.split_pair(k)[0] != state.split_pair(k)[1] else " (correct)"))
    pair = state.split_pair(state.get(state.CM_PAIR))
    if pair is None:
        st.caption("This run has no examples.")
        st.stop()
    true, pred = pair
    st.subheader(f"{true} → {pred}", anchor=False)
    try:
        table = labeled.examples(current.path, ui.labels())
    except UserError as exc:
        ui.problem(exc, "The matrix comes from metrics.json; listing examples needs predictions.parquet.")
        st.stop()
    rows = table[(table["label"] == true) & (table["pred"] == pred)]
    share = len(rows) / max(1, int((table["label"] == true).sum()))
    st.caption(f"{len(rows):,} examples · {share:.1%} of true {ui.md(true)} · "
               f"{int((rows['error_type_id'] >= 0).sum()):,} labeled")
    query = st.text_input("Search text", key=state.CM_SEARCH, placeholder="words in the text or example id",
                          label_visibility="collapsed")
    rows = tables.search(rows, query)
    tables.examples_table(rows.sort_values("confidence", ascending=False, na_position="last"), height=420,
                          hide=("label", "pred", "loss", "note"), text_width=300)
    if true != pred and len(rows):
        def _go_label() -> None:
            st.session_state[state.LABEL_SOURCE] = "Confusion"
            st.session_state[state.LABEL_PAIR] = state.pair_key(true, pred)

        if st.button(f"Label these {len(rows):,} examples", icon=":material/sell:", on_click=_go_label,
                     type="primary"):
            ui.switch("views/label.py")

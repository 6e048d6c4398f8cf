"""Overview: headline metrics with intervals, per-class table, calibration, slices (worst first), top confusions; a
multi-label run's per-label table and missed/spurious labels, a regression run's residual plot (`eaui.task_views`), a token-classification run's entity scores and error spans
(`eaui.tokens`), a generation run's checks, failure modes, stop reasons and lengths (`eaui.generation`; its
per-class table and confusions only when the prompts had a label column)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from erroranalysis.metrics.averages import average_rows
from erroranalysis_ui.eaui import charts, data, generation, labeled, state, tables, task_views, tokens
from erroranalysis_ui.eaui import components as ui

current = ui.current_run()
ui.header("Overview", current)

with ui.guard("Run `erroranalysis metrics RUN` to (re)compute them; the other pages and runs still work."):
    metrics = data.metrics(current.path)

overall = metrics.get("overall", {})
n, n_fail = overall.get("n"), overall.get("n_failures")

task = task_views.task_of(data.manifest(current.path))
if task == "multilabel":
    task_views.multilabel_overview(metrics)
elif task == tokens.TASK:
    tokens.token_overview(metrics)
elif task == "regression":
    with ui.guard("The residual plot needs predictions.parquet."):
        task_views.regression_overview(metrics, labeled.base_table(current.path))
elif generation.is_generation(metrics) and not metrics["output_checks"].get("label_column"):
    generation.overview(metrics)
else:
    if generation.is_generation(metrics):  # a label column: the label extracted from the output, as a classifier's
        generation.overview(metrics)
        st.subheader("The label extracted from the output", anchor=False)
    cols = st.columns(5)
    cols[0].metric("Accuracy", ui.pct(overall.get("accuracy")), border=True,
                   help=ui.ci_text(overall.get("accuracy_ci")) or "No interval recorded.")
    cols[0].caption(ui.ci_text(overall.get("accuracy_ci")) or "")
    cols[1].metric("Macro F1", ui.pct(overall.get("macro_f1")), border=True,
                   help="Unweighted mean of the per-class F1.")
    cols[1].caption(ui.ci_text(overall.get("macro_f1_ci")) or
                    f"weighted F1 {ui.pct(overall.get('weighted_f1'))}")
    cols[2].metric("Failures", ui.count(n_fail), border=True)
    cols[2].caption(f"of {ui.count(n)} examples")
    cols[3].metric("ECE", f"{overall['ece']:.3f}" if charts.finite(overall.get("ece")) else "–", border=True,
                   help="Expected calibration error: mean gap between confidence and accuracy (lower is better).")
    cols[3].caption("calibration error")
    cols[4].metric("Brier", f"{overall['brier']:.3f}" if charts.finite(overall.get("brier")) else "–", border=True,
                   help="Mean squared error of the predicted probabilities (lower is better).")
    cols[4].caption("probability error")

    left, right = st.columns([3, 2], gap="large")
    with left:
        st.subheader("Per class")
        per_class = pd.DataFrame(metrics.get("per_class") or [])
        if per_class.empty:
            st.caption("No per-class metrics in metrics.json.")
        else:
            tables.scores_table(per_class, "Class", averages=average_rows(task, metrics))
            st.caption("Worst F1 first, then the averages as classification_report prints them; click a column "
                       "header to sort.")
        st.subheader("Top confusions")
        top = pd.DataFrame(metrics.get("top_confusions") or [])
        if top.empty:
            st.caption("No confusions recorded.")
        else:
            top = top.head(8)
            st.dataframe(top, hide_index=True, column_order=["label", "pred", "count", "share_of_failures"],
                         column_config={"label": "True", "pred": "Predicted",
                                        "count": st.column_config.NumberColumn("Examples", format="localized"),
                                        "share_of_failures": st.column_config.ProgressColumn(
                                            "Share of failures", format="percent", min_value=0,
                                            max_value=float(top["share_of_failures"].max() or 1))})
            st.page_link("views/confusion.py", label="Open the confusion matrix", icon=":material/grid_on:")

    with right:
        st.subheader("Calibration")
        calibration = metrics.get("calibration")
        if not calibration or not calibration.get("bins"):
            st.caption("No calibration: the run has no probabilities.")
        else:
            st.plotly_chart(charts.reliability_figure(calibration["bins"]), config={"displayModeBar": False},
                            alt="Reliability diagram: accuracy against confidence")
            st.caption("Bars under the diagonal are over-confident (red when the gap exceeds 5 points).")

st.subheader("By metadata")
by_metadata = metrics.get("by_metadata") or {}
if not by_metadata:
    st.caption("No metadata columns in metrics.json.")
else:
    columns = list(by_metadata)
    if state.get(state.SLICE_COLUMN) not in columns:
        st.session_state[state.SLICE_COLUMN] = columns[0]
    column = st.segmented_control("Column", columns, key=state.SLICE_COLUMN, required=True)
    rows = pd.DataFrame(by_metadata.get(column) or []).rename(columns={"value": "slice"})
    if rows.empty or "error_rate" not in rows.columns:
        st.caption("No values for this column.")
    else:
        rows = rows.sort_values("error_rate", ascending=False)
        overall_error = 1 - overall["accuracy"] if charts.finite(overall.get("accuracy")) else None
        a, b = st.columns([2, 3], gap="large")
        with a:
            st.dataframe(rows, hide_index=True,
                         column_order=[c for c in ["slice", "n", "error_rate", "accuracy", "macro_f1"]
                                       if c in rows.columns],
                         column_config={"slice": "Value", "n": st.column_config.NumberColumn("n", format="localized"),
                                        "error_rate": st.column_config.ProgressColumn(
                                            "Error rate", format="percent", min_value=0, max_value=1),
                                        "accuracy": st.column_config.NumberColumn("Accuracy", format="percent"),
                                        "macro_f1": st.column_config.NumberColumn("Macro F1", format="percent")})
        with b:
            st.plotly_chart(charts.slices_figure(rows.head(25), overall_error), config={"displayModeBar": False},
                            alt="Error rate per value")
        st.caption("Worst values first; red bars are more than 1.2 × the overall error rate.")

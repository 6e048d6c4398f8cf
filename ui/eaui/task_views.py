"""The Overview's parts that differ by task: a multi-label run's per-label table and missed/spurious labels, a
regression run's error metrics and residual plot (instead of the confusion matrix). Rendering only; the numbers
come from metrics.json and predictions.parquet."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from erroranalysis.metrics.averages import average_rows
from erroranalysis_ui.eaui import charts, tables
from erroranalysis_ui.eaui import components as ui


def task_of(manifest: dict) -> str:
    return manifest.get("task", "classification")


def _number(value, fmt: str = "{:.3f}") -> str:
    return fmt.format(value) if charts.finite(value) else "–"


def multilabel_overview(metrics: dict) -> None:
    o = metrics.get("overall", {})
    cols = st.columns(5)
    cols[0].metric("Subset accuracy", ui.pct(o.get("subset_accuracy")), border=True,
                   help="Examples whose predicted label set is exactly the gold set.")
    cols[0].caption(ui.ci_text(o.get("subset_accuracy_ci")) or "")
    cols[1].metric("Micro F1", ui.pct(o.get("micro_f1")), border=True, help="F1 over every (example, label) pair.")
    cols[1].caption(ui.ci_text(o.get("micro_f1_ci")) or f"samples F1 {ui.pct(o.get('samples_f1'))}")
    cols[2].metric("Macro F1", ui.pct(o.get("macro_f1")), border=True, help="Unweighted mean of the per-label F1.")
    cols[2].caption(f"weighted F1 {ui.pct(o.get('weighted_f1'))}")
    cols[3].metric("Hamming loss", _number(o.get("hamming_loss")), border=True,
                   help="Share of (example, label) pairs that are wrong (lower is better).")
    cols[3].caption(f"ECE {_number(o.get('ece'))} · Brier {_number(o.get('brier'))}")
    cols[4].metric("Failures", ui.count(o.get("n_failures")), border=True,
                   help="Examples with any wrong label: a gold label missed or a label predicted without gold.")
    cols[4].caption(f"of {ui.count(o.get('n'))} examples")
    left, right = st.columns([3, 2], gap="large")
    with left:
        st.subheader("Per label")
        per = pd.DataFrame(metrics.get("per_class") or [])
        if per.empty:
            st.caption("No per-label metrics in metrics.json.")
        else:
            tables.scores_table(per, "Label", {
                "roc_auc": st.column_config.NumberColumn("ROC-AUC", format="%.3f"),
                "average_precision": st.column_config.NumberColumn("AP", format="%.3f"),
                "fn": "Missed", "fp": "Spurious", "threshold": "Threshold"},
                averages=average_rows("multilabel", metrics))
            st.caption("Worst F1 first. Missed: gold but not predicted; spurious: predicted without gold.")
        st.subheader("Labels read instead of others")
        top = pd.DataFrame(metrics.get("top_confusions") or [])
        if top.empty:
            st.caption("No example misses one label while predicting another.")
        else:
            st.dataframe(top.head(8), hide_index=True, column_order=["label", "pred", "count", "share_of_failures"],
                         column_config={"label": "Gold, missed", "pred": "Predicted without gold",
                                        "count": "Examples", "share_of_failures": st.column_config.ProgressColumn(
                                            "Share of failures", format="percent", min_value=0, max_value=1)})
            st.page_link("views/confusion.py", label="Open the per-label confusion", icon=":material/grid_on:")
    with right:
        for key, title in (("missed", "Most missed labels"), ("spurious", "Most spurious labels")):
            st.subheader(title)
            rows = pd.DataFrame(metrics.get(key) or [])
            if rows.empty:
                st.caption("None.")
            else:
                st.dataframe(rows, hide_index=True, column_config={
                    "label": "Label", "count": "Examples", "share_of_failures": st.column_config.ProgressColumn(
                        "Share of failures", format="percent", min_value=0, max_value=1)})
        calibration = metrics.get("calibration")
        if calibration and calibration.get("bins"):
            st.subheader("Calibration (every label pooled)")
            st.plotly_chart(charts.reliability_figure(calibration["bins"]), config={"displayModeBar": False},
                            alt="Reliability diagram of the sigmoids: how often a label is gold against its "
                                "probability")


def regression_overview(metrics: dict, table) -> None:
    o = metrics.get("overall", {})
    cols = st.columns(5)
    cols[0].metric("MAE", _number(o.get("mae"), "{:.4g}"), border=True, help="Mean absolute error.")
    cols[0].caption(ui.ci_text(o.get("mae_ci")) or "")
    cols[1].metric("RMSE", _number(o.get("rmse"), "{:.4g}"), border=True, help="Root mean squared error.")
    cols[1].caption(ui.ci_text(o.get("rmse_ci")) or "")
    cols[2].metric("R²", _number(o.get("r2")), border=True, help="Coefficient of determination.")
    cols[2].caption(f"Spearman {_number(o.get('spearman'))}")
    cols[3].metric("Bias", _number(o.get("bias"), "{:+.4g}"), border=True, help="Mean of prediction - gold.")
    q = o.get("residual_quantiles") or {}
    cols[3].caption(f"median error {_number(q.get('q50'), '{:+.3g}')}")
    tolerance = o.get("tolerance") or {}
    cols[4].metric("Failures", ui.count(o.get("n_failures")), border=True,
                   help="|prediction - gold| above the tolerance (by default the worst decile of |error|).")
    bound = tolerance.get("tolerance")
    cols[4].caption(f"|error| > {_number(bound, '{:.3g}')}{' × |gold|' if tolerance.get('relative') else ''} "
                    f"({tolerance.get('rule', '')})")
    left, right = st.columns([3, 2], gap="large")
    with left:
        st.subheader("Residuals")
        if table is None or "error" not in getattr(table, "columns", []):
            st.caption("No predicted values in predictions.parquet.")
        else:
            st.plotly_chart(charts.residual_figure(table["target"], table["error"], ~table["correct"].to_numpy(bool),
                                                   (metrics.get("residuals") or {}).get("by_gold")),
                            config={"displayModeBar": False},
                            alt="Residual plot: prediction minus gold against gold, failures in red")
            st.caption("Points off the dotted zero line are errors; the line is the mean error per gold decile.")
    with right:
        st.subheader("Residual quantiles")
        st.dataframe(pd.DataFrame({"quantile": list(q), "prediction - gold": list(q.values()),
                                   "|error|": list((o.get("abs_error_quantiles") or {}).values())}),
                     hide_index=True)
        st.subheader("By gold range")
        per = pd.DataFrame(metrics.get("per_class") or [])
        if not per.empty:
            st.dataframe(per.reindex(columns=["label", "support", "mae", "bias", "failure_rate"]), hide_index=True,
                         column_config={"label": "Gold range", "support": "Examples",
                                        "mae": st.column_config.NumberColumn("MAE", format="%.3g"),
                                        "bias": st.column_config.NumberColumn("Bias", format="%+.3g"),
                                        "failure_rate": st.column_config.NumberColumn("Failure rate",
                                                                                      format="percent")})


def _has(values, name: str) -> bool:
    return values is not None and name in {str(v) for v in values}


def multilabel_confusion(current, metrics: dict) -> None:
    """The confusion view of a multi-label run: per-label 2x2 counts, the matrix of labels read instead of others
    (gold row missed while the column was predicted without gold), and the examples of a chosen error."""
    from erroranalysis_ui.eaui import labeled, tables

    confusion = metrics.get("confusion") or {}
    labels = [str(x) for x in confusion.get("labels") or []]
    st.caption("Per label: true negatives, spurious (predicted without gold), missed (gold, not predicted), "
               "true positives. The matrix: rows are gold labels missed, columns labels predicted without gold in "
               "the same example.")
    left, right = st.columns([1, 1], gap="large")
    with left:
        per = pd.DataFrame(confusion.get("per_label") or [])
        if not per.empty:
            st.dataframe(per.rename(columns={"tn": "TN", "fp": "Spurious (FP)", "fn": "Missed (FN)", "tp": "TP"}),
                         hide_index=True)
        if labels:
            st.plotly_chart(charts.confusion_figure(labels, confusion.get("matrix") or []),
                            config={"displayModeBar": False},
                            alt="Which labels are predicted instead of which: gold missed (rows) by predicted "
                                "without gold (columns)")
    with right:
        matrix = confusion.get("matrix") or []
        options = [f"missed {a}" for a in labels] + [f"spurious {b}" for b in labels] + [
            f"{a} missed, {b} spurious" for i, a in enumerate(labels) for j, b in enumerate(labels)
            if matrix and matrix[i][j] > 0]
        choice = st.selectbox("Errors to list", options, key="ml_confusion_choice")
        if choice is None:
            st.caption("This run has no labels.")
            return
        table = labeled.examples(current.path, ui.labels())
        missed, spurious = table["missed"].to_numpy(dtype=object), table["spurious"].to_numpy(dtype=object)
        if choice.startswith("missed "):
            name = choice[len("missed "):]
            mask = [_has(m, name) for m in missed]
        elif choice.startswith("spurious "):
            name = choice[len("spurious "):]
            mask = [_has(s, name) for s in spurious]
        else:
            a, b = choice.split(" missed, ", 1)
            b = b[:-len(" spurious")]
            mask = [_has(m, a) and _has(s, b) for m, s in zip(missed, spurious)]
        rows = table[pd.Series(mask, index=table.index, dtype=bool)]
        st.caption(f"{len(rows):,} examples")
        tables.examples_table(rows.sort_values("confidence", ascending=False, na_position="last"), height=420,
                              hide=("loss", "note"), text_width=260)


def errors_line(rows) -> str | None:
    """What a group of failing examples gets wrong, for a multi-label or regression run (None otherwise): the labels
    most often missed and predicted without gold, or the mean error and MAE."""
    from collections import Counter

    failing = rows[~rows["correct"].to_numpy(bool)]
    if "missed" in rows.columns:
        def top(column):
            counts = Counter(str(x) for v in failing[column] if v is not None for x in v)
            return ", ".join(f"{name} ({n})" for name, n in counts.most_common(4)) or "none"

        return f"Missed: {top('missed')} · Spurious: {top('spurious')}"
    if "error" in rows.columns and len(failing):
        error = failing["error"].to_numpy(dtype=float)
        return f"Mean error (prediction - gold) {error.mean():+.3g} · MAE {abs(error).mean():.3g}"
    return None


def example_errors(ex) -> str:
    """' · missed a, b · spurious c' (multi-label) or ' · error +0.3' (regression) for one example's caption."""
    parts = []
    for column in ("missed", "spurious"):
        value = ex.get(column) if hasattr(ex, "get") else None
        if value is not None and len(value):
            parts.append(f"{column} {', '.join(map(str, value))}")
    error = ex.get("error") if hasattr(ex, "get") else None
    if error is not None and charts.finite(error):
        parts.append(f"error {float(error):+.3g}")
    return "".join(f" · {p}" for p in parts)

"""Example tables: searching and showing rows of the joined example table the same way on every page; the
per-class score table every task's Overview shows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from erroranalysis_ui.eaui import components as ui

TEXT_LIMIT = 400
# Rows a table sends to the browser, at most: more than anyone scrolls, and each rerun sends them all again
# (`benchmarks/ui.py` at 1M examples: the largest cluster's table is 6.39 MB of Arrow at 20,000 rows, 0.65 MB at 2,000).
# The caption says when a table is cut.
MAX_ROWS = 2_000


def search(rows, query: str | None):
    """Rows whose text or example id contains `query` (case-insensitive, plain text, not a pattern)."""
    query = (query or "").strip()
    return rows[matches(rows, query)] if query else rows


def matches(rows, query: str):
    """Whether each row's text or example id contains `query` (case-insensitive, plain text)."""
    return (rows["text"].astype(str).str.contains(query, case=False, regex=False)
            | rows["example_id"].astype(str).str.contains(query, case=False, regex=False)).to_numpy(bool)


def top_rows(table, picked: np.ndarray, query: str | None, *, by: str = "confidence", limit: int | None = None):
    """The rows of `table` where the mask `picked` holds and `query` matches, highest `by` first (missing last), at
    most `limit`; and the positions of every row that matched (what an action on "all matching" acts on). Only the
    rows shown are copied: filtering a 1M-row table whole (texts included) takes longer than a click may."""
    at = np.flatnonzero(picked)
    query = (query or "").strip()
    if query:
        at = at[matches(table[["text", "example_id"]].iloc[at], query)]
    score = table[by].to_numpy(dtype=float, na_value=np.nan)[at]
    order = np.argsort(np.where(np.isnan(score), np.inf, -score), kind="stable")[:MAX_ROWS if limit is None else limit]
    return table.iloc[at[order]], at


def flag(values) -> np.ndarray:
    """A nullable flag column (checks.parquet's label_issue, in_train: NA where the check could not run) as a
    boolean mask, NA counted as not flagged."""
    import pandas as pd

    return pd.array(values, dtype="boolean").to_numpy(dtype=bool, na_value=False)


def display_frame(rows):
    """The columns people read, in reading order, with short text and one flags column."""
    out = rows[["example_id", "text", "label", "pred", "confidence", "loss", "cluster_name", "error_type",
                "note"]].copy()
    out["text"] = out["text"].astype(str).str.slice(0, TEXT_LIMIT)
    wrong = np.where(rows["label_wrong"].to_numpy(bool), "label is wrong", "")
    not_err = np.where(rows["not_error"].to_numpy(bool), "not an error", "")
    out["flags"] = [", ".join(x for x in pair if x) for pair in zip(wrong, not_err)]
    for column in ("missed", "spurious"):  # a multi-label run: which labels were missed, which predicted wrongly
        if column in rows.columns:
            out[column] = [", ".join(map(str, v)) if v is not None else "" for v in rows[column]]
    if "error" in rows.columns and "prediction" in rows.columns:  # a regression run: the value and its error
        out["prediction"] = rows["prediction"].to_numpy(dtype=float)
        out["error"] = rows["error"].to_numpy(dtype=float)
    return out


TASK_COLUMNS = ("missed", "spurious", "prediction", "error")  # shown where the run's task has them


COLUMN_CONFIG = {
    "example_id": st.column_config.TextColumn("Example", width="small"),
    "text": st.column_config.TextColumn("Text", width=440),
    "label": st.column_config.TextColumn("True", width="small"),
    "pred": st.column_config.TextColumn("Predicted", width="small"),
    "confidence": st.column_config.ProgressColumn("Confidence", format="%.2f", min_value=0.0, max_value=1.0,
                                                  width="small"),
    "loss": st.column_config.NumberColumn("Loss", format="%.2f", width="small"),
    "cluster_name": st.column_config.TextColumn("Cluster", width="medium"),
    "error_type": st.column_config.TextColumn("Error type", width="medium"),
    "flags": st.column_config.TextColumn("Flags", width="small"),
    "note": st.column_config.TextColumn("Note", width="medium"),
    "missed": st.column_config.TextColumn("Missed", width="small", help="Gold labels the model did not predict."),
    "spurious": st.column_config.TextColumn("Spurious", width="small",
                                            help="Labels predicted without being gold."),
    "prediction": st.column_config.NumberColumn("Value", format="%.3g", width="small",
                                                help="The predicted value (the True/Predicted columns are bins)."),
    "error": st.column_config.NumberColumn("Error", format="%+.3g", width="small", help="prediction - gold"),
}


def examples_table(rows, *, key: str | None = None, selectable: bool = False, height: int | str = "auto",
                   hide: tuple[str, ...] = (), text_width: int = 440, total: int | None = None):
    """Show rows (a slice of the example table); with selectable=True return the selection event (multi-row).
    `total`: how many rows matched when `rows` is already cut to the first of them (tables.top_rows)."""
    shown = rows.head(MAX_ROWS)
    total = len(rows) if total is None else total
    frame = display_frame(shown)
    order = [c for c in ["example_id", "text", "label", "pred", *TASK_COLUMNS, "confidence", "loss", "error_type",
                         "flags", "cluster_name", "note"] if c not in hide and c in frame.columns]
    config = dict(COLUMN_CONFIG)
    config["text"] = st.column_config.TextColumn("Text", width=text_width)
    kwargs = dict(hide_index=True, column_order=order, column_config=config, height=height, key=key,
                  row_height=35)
    if total > len(shown):
        st.caption(f"Showing the first {len(shown):,} of {total:,} rows; search to narrow them.")
    if selectable:
        return st.dataframe(frame, on_select="rerun", selection_mode="multi-row", **kwargs)
    st.dataframe(frame, **kwargs)
    return None


def type_tree(types, counts) -> list:
    """Error types as a two-level tree: (type, depth) with each parent first (most examples first, then by
    name) and its sub-types under it; a type whose parent is missing is shown at the top level."""
    ids = {t.id for t in types}
    children: dict = {}
    for t in types:
        children.setdefault(t.parent_id if t.parent_id in ids else None, []).append(t)
    order = lambda t: (-int(counts.get(t.id, 0)), t.name.lower())  # noqa: E731
    out = []

    def walk(parent, depth: int) -> None:
        for t in sorted(children.get(parent, []), key=order):
            out.append((t, depth))
            walk(t.id, depth + 1)

    walk(None, 0)
    return out


def scores_table(per: pd.DataFrame, label_title: str, extra: dict | None = None, averages=()) -> None:
    """Precision, recall and F1 (with its interval) and support per class or label, worst F1 first, then the
    `averages` rows (`erroranalysis.metrics.averages.average_rows`: micro, macro, weighted, samples avg) last;
    `extra` maps further columns of `per` to their column config."""
    extra = extra or {}
    shown = pd.DataFrame({"label": per["label"].astype(str)})
    for col in ("precision", "recall", "f1"):
        shown[col] = per[col].astype(float) * 100 if col in per.columns else float("nan")
    shown["f1_ci"] = [ui.ci_text(ci).replace("95% CI ", "") if ui.ci_text(ci) else ""
                      for ci in per.get("f1_ci", pd.Series([None] * len(per)))]
    shown["support"] = per.get("support")
    for col in extra:
        shown[col] = per.get(col)
    shown = shown.sort_values("f1")
    if len(averages):
        tail = pd.DataFrame(averages)
        tail[["precision", "recall", "f1"]] = tail[["precision", "recall", "f1"]] * 100
        shown = pd.concat([shown, tail.assign(f1_ci="")], ignore_index=True)
    st.dataframe(shown, hide_index=True, column_config={
        "label": st.column_config.TextColumn(label_title),
        "precision": st.column_config.NumberColumn("Precision", format="%.1f%%"),
        "recall": st.column_config.NumberColumn("Recall", format="%.1f%%"),
        "f1": st.column_config.ProgressColumn("F1", format="%.1f%%", min_value=0, max_value=100),
        "f1_ci": st.column_config.TextColumn("F1 95% CI"),
        "support": st.column_config.NumberColumn("Support", format="localized"), **extra})

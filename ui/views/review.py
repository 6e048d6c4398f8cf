"""Review: suggest error types for this run's failures from a labeled taxonomy (another run of the workspace, or a
taxonomy file), then accept the suggestions (they become labels) or reject them. Suggestions are stored in the labels
database as source 'suggested', status 'pending'; matching is erroranalysis.stages.apply_taxonomy's."""

from __future__ import annotations

import streamlit as st

from erroranalysis.labels import matching
from erroranalysis_ui.eaui import actions, data, labeled, state, tables
from erroranalysis_ui.eaui import components as ui

current = ui.current_run()
store = ui.labels()
run_key = labeled.run_key(store, current.path)
ui.header("Review suggestions", current, "error types carried over from a labeled taxonomy: accept or reject them")

with ui.guard("Suggestions need predictions.parquet; re-run the inference stage."):
    table = labeled.examples(current.path, store)
    found = data.suggestions(current.path)

suggested = table[table["source"] == "suggested"]
pending = suggested[suggested["status"] == "pending"]
failures = table[~table["correct"].astype(bool)]
unmatched = found[(found["status"] == matching.STATUS_UNMATCHED)] if found is not None else None
if unmatched is not None:  # still unmatched: nobody labeled them since
    unlabeled = set(failures.loc[failures["error_type_id"] < 0, "example_id"])
    unmatched = unmatched[unmatched["example_id"].isin(unlabeled)]

c = st.columns(4)
c[0].metric("Awaiting review", f"{len(pending):,}", border=True)
# An accepted suggestion becomes a human label (source "human"), so count decisions by status alone.
c[1].metric("Accepted", f"{int((table['status'] == 'accepted').sum()):,}", border=True)
c[2].metric("Rejected", f"{int((table['status'] == 'rejected').sum()):,}", border=True)
c[3].metric("New / unmatched failures", "–" if unmatched is None else f"{len(unmatched):,}", border=True)

if not store.can_write:
    ui.read_only_note(store)

# -- apply a taxonomy ---------------------------------------------------------------------------------------------
def _suggest_panel() -> None:
    """Apply a taxonomy to this run: it writes the run (taxonomy_suggestions.parquet) and the labels."""
    with st.expander("Suggest error types from a taxonomy", expanded=pending.empty, icon=":material/auto_fix_high:"):
        st.caption("Each failure of this run gets the error type of its nearest labeled examples (in the embedding "
                   "space of this run's clustering); failures far from every type stay unmatched, for you to name. "
                   "Labels people gave are never replaced. `erroranalysis apply-taxonomy` does the same.")
        if state.get(state.REVIEW_SOURCE) not in state.REVIEW_SOURCES:
            st.session_state[state.REVIEW_SOURCE] = state.REVIEW_SOURCES[0]
        source = st.segmented_control("Taxonomy from", list(state.REVIEW_SOURCES), key=state.REVIEW_SOURCE,
                                      required=True)
        cfg = ui.config()
        origin = None
        if source == state.REVIEW_SOURCES[0]:
            counts = labeled.labeled_per_run(store)
            choices = []
            for key in data.discover(cfg.workspace):
                if key == current.key:
                    continue
                n = counts.get(labeled.run_key(store, cfg.runs_root / key), 0)
                if n:
                    choices.append((key, n))
            if not choices:
                st.caption("No other run in this workspace has labels yet: label one on the **Label** page, or upload "
                           "a taxonomy file.")
            else:
                counts = dict(choices)
                if state.get(state.REVIEW_FROM_RUN) not in counts:
                    st.session_state[state.REVIEW_FROM_RUN] = choices[0][0]
                origin = st.selectbox("Labeled run", list(counts), key=state.REVIEW_FROM_RUN,
                                      format_func=lambda k: f"{k} ({counts[k]:,} labeled examples)")
        else:
            origin = st.file_uploader("Taxonomy JSON ('erroranalysis export RUN --format json')", type=["json"],
                                      key=state.REVIEW_UPLOAD)
        row = st.container(horizontal=True, vertical_alignment="bottom", gap="medium")
        if state.get(state.REVIEW_METHOD) not in matching.METHODS:
            st.session_state[state.REVIEW_METHOD] = matching.METHODS[0]
        method = row.selectbox("Match by", list(matching.METHODS), key=state.REVIEW_METHOD, width=220,
                               format_func={"centroid": "nearest type centroid", "knn": "nearest labeled examples"}.get)
        if state.REVIEW_AUTO not in st.session_state:
            st.session_state[state.REVIEW_AUTO] = True
        auto = row.toggle("Calibrate the threshold", key=state.REVIEW_AUTO,
                          help="Match a failure when it is as close to a type as that type's labeled examples are to "
                               "each other (95th percentile).")
        if state.REVIEW_THRESHOLD not in st.session_state:
            st.session_state[state.REVIEW_THRESHOLD] = 0.4
        threshold = row.slider("Largest cosine distance", 0.05, 1.0, key=state.REVIEW_THRESHOLD, step=0.01,
                               disabled=auto, width=280)
        if state.REVIEW_CONFUSIONS not in st.session_state:
            st.session_state[state.REVIEW_CONFUSIONS] = True
        confusions = row.toggle("Keep one-confusion types to their confusion", key=state.REVIEW_CONFUSIONS,
                                help="A type whose labeled examples all share a gold label or a prediction (\"tech read "
                                     "as business\") only takes failures with that label or prediction.")
        if st.button("Suggest error types", type="primary", icon=":material/auto_fix_high:", disabled=origin is None):
            with st.spinner("Embedding the failures and matching them to the taxonomy…"):
                actions.suggest_types(current.path, origin, method=method, threshold=None if auto else float(threshold),
                                      confusions=confusions)
            st.rerun()


if store.can_write:
    _suggest_panel()

# -- review -------------------------------------------------------------------------------------------------------
st.subheader("Awaiting review", anchor=False)
if pending.empty:
    st.info("No suggestions await review. Suggest error types from a labeled taxonomy above.",
            icon=":material/inbox:")
else:
    types = sorted(set(pending["error_type"]), key=str.casefold)
    options = ["All error types", *types]
    if state.get(state.REVIEW_TYPE) not in options:
        st.session_state[state.REVIEW_TYPE] = options[0]
    pick = st.selectbox("Suggested error type", options, key=state.REVIEW_TYPE, on_change=state.reset_review_selection,
                        format_func=lambda t: t if t == options[0] else
                        f"{t} ({int((pending['error_type'] == t).sum()):,})")
    rows = pending if pick == options[0] else pending[pending["error_type"] == pick]
    rows = rows.copy()
    if found is not None:
        info = found.set_index("example_id")
        rows["distance"] = rows["example_id"].map(info["distance"])
        rows["basis"] = rows["example_id"].map(info["basis"]).fillna("")
        rows["nearest_id"] = rows["example_id"].map(info["nearest_id"]).fillna("")
    else:
        rows["distance"], rows["basis"], rows["nearest_id"] = float("nan"), "", ""
    rows = rows.sort_values(["distance", "example_id"], na_position="last")
    shown = rows.head(tables.MAX_ROWS)
    st.session_state[state.REVIEW_ROWS] = shown["example_id"].tolist()
    frame = tables.display_frame(shown)
    for col in ("distance", "basis", "nearest_id"):
        frame[col] = shown[col].to_numpy()
    event = st.dataframe(
        frame, key=state.review_table_key(), on_select="rerun", selection_mode="multi-row", hide_index=True,
        height=420, row_height=35,
        column_order=["example_id", "text", "label", "pred", "error_type", "basis", "distance", "nearest_id",
                      "cluster_name"],
        column_config={**tables.COLUMN_CONFIG,
                       "text": st.column_config.TextColumn("Text", width=320),
                       "error_type": st.column_config.TextColumn("Suggested type", width="medium"),
                       "basis": st.column_config.TextColumn("Matched by", width="small",
                                                            help="same example: labeled in the taxonomy and failing "
                                                                 "the same way here; knn / centroid: by embedding"),
                       "distance": st.column_config.NumberColumn("Distance", format="%.3f",
                                                                 help="Cosine distance to the type (lower = closer)"),
                       "nearest_id": st.column_config.TextColumn("Nearest labeled", width="small")})
    selected = [shown["example_id"].iat[i] for i in event.selection.rows if i < len(shown)]
    st.caption(f"**{len(selected):,}** selected of {len(shown):,} shown, closest first"
               + (f" (of {len(rows):,}; the buttons for all act on every one)" if len(rows) > len(shown) else "."))
    if store.can_write:
        bar = st.container(horizontal=True, gap="small")
        bar.button(f"Accept {len(selected):,} selected", on_click=actions.review_selected, args=(run_key, True),
                   disabled=not selected, type="primary", icon=":material/check:")
        bar.button(f"Reject {len(selected):,} selected", on_click=actions.review_selected, args=(run_key, False),
                   disabled=not selected, icon=":material/close:")
        ids = rows["example_id"].tolist()  # every pending suggestion of the type picked, not only those shown
        bar.button(f"Accept all {len(ids):,}", on_click=actions.review_ids, args=(run_key, ids, True),
                   icon=":material/done_all:")
        bar.button(f"Reject all {len(ids):,}", on_click=actions.review_ids, args=(run_key, ids, False),
                   icon=":material/block:")
        actions.undo_button(bar, store, run_key)
    st.caption("Accepted suggestions count as labels everywhere (Taxonomy, exports, Compare); rejected ones are not "
               "suggested again for the same error type.")

if unmatched is not None and len(unmatched):
    with st.expander(f"New / unmatched failures ({len(unmatched):,})", icon=":material/help:"):
        st.caption("Too far from every known error type: likely new kinds of failure. Name them on the **Label** page "
                   "(From: Unlabeled failures).")
        rows = table.set_index("example_id").loc[unmatched["example_id"]].reset_index()
        rows["closest_type"] = unmatched["closest_type"].to_numpy()
        rows["distance"] = unmatched["distance"].to_numpy()
        st.dataframe(rows[["example_id", "text", "label", "pred", "closest_type", "distance"]]
                     .sort_values("distance", ascending=False), hide_index=True, height=300,
                     column_config={"example_id": st.column_config.TextColumn("Example", width="small"),
                                    "text": st.column_config.TextColumn("Text", width=420),
                                    "closest_type": "Closest type",
                                    "distance": st.column_config.NumberColumn("Distance", format="%.3f")})
        st.page_link("views/label.py", label="Go to Label", icon=":material/sell:")

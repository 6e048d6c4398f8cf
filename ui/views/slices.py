"""Slices: groups of examples defined by interpretable features (words and phrases, metadata, length, truncation,
the true label) whose error rate stands out, ranked; one slice in detail with its examples; one click turns a slice
into an error type in the labels store."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from erroranalysis.labels import fold_name
from erroranalysis.report import summaries
from erroranalysis_ui.eaui import actions, charts, data, labeled, state, tables
from erroranalysis_ui.eaui import components as ui

current = ui.current_run()
store = ui.labels()
run_key = labeled.run_key(store, current.path)
ui.header("Slices", current, "interpretable groups of examples whose error rate stands out")

with ui.guard("Re-run `erroranalysis slices RUN`; the other pages and runs still work."):
    stage = (data.manifest(current.path).get("stages") or {}).get("slices") or {}
    found = data.slices(current.path)
    if found is None:
        if stage.get("status") == "failed":
            st.error(f"The slices stage failed: {ui.md(stage.get('error') or 'no reason recorded')}",
                     icon=":material/error:")
        st.info(f"This run has no slices yet. Run `erroranalysis slices {current.path}` to search words, phrases, "
                "metadata columns and lengths for groups of examples whose error rate stands out (`erroranalysis "
                "run` and `analyze` compute them too).", icon=":material/filter_alt:")
        st.stop()
    slices, _ = found
    table = labeled.examples(current.path, store)
    summary = labeled.slice_summary(current.path, store)

failed = ~table["correct"].to_numpy(bool)
n_fail = int(failed.sum())
base = stage.get("base_error_rate")
base = float(base) if charts.finite(base) else (n_fail / len(table) if len(table) else 0.0)
rows_of_slice, in_any_slice = labeled.slice_rows(current.path)
in_a_slice = int(failed[in_any_slice].sum())

c = st.columns(4)
c[0].metric("Slices", f"{len(slices):,}", border=True)
c[1].metric("Base error rate", ui.pct(base), border=True, help="Failures / examples over the whole run.")
c[2].metric("Failures in a slice", ui.pct(in_a_slice / n_fail if n_fail else 0, 0), border=True,
            help="Share of the run's failures that belong to at least one slice.")
c[3].metric("Slices tested", ui.count(stage.get("n_tested")), border=True,
            help="Candidate slices tested for significance (the p-values are corrected for all of them).")
for message in stage.get("messages") or []:
    st.caption(ui.md(message))

if summary is None or summary.empty:
    st.info("No slice stands out: no group of examples over words, metadata or length fails significantly more "
            "often than the run as a whole. The clusters may still group the failures.",
            icon=":material/filter_alt:")
    st.stop()

ids = summary["slice_id"].astype(int).tolist()
if state.get(state.SLICE) not in ids:
    st.session_state[state.SLICE] = ids[0]
descriptions = dict(zip(ids, summary["description"].astype(str)))

st.subheader("Slices by score", anchor=False)
left, right = st.columns([5, 3], gap="medium")
with left:
    listed = st.dataframe(
        summary, key=state.SLICE_LIST, on_select="rerun", selection_mode="single-row", hide_index=True,
        height=min(420, 35 * (len(summary) + 1) + 3),
        selection_default={"selection": {"rows": [ids.index(state.get(state.SLICE))]}},
        column_order=["slice_id", "description", "support", "failures", "error_rate", "p_value", "labeled"],
        column_config={
            "slice_id": st.column_config.NumberColumn("#", width=36),
            "description": st.column_config.TextColumn("Slice", width="medium"),
            "support": st.column_config.NumberColumn("Support", format="localized", width=64),
            "failures": st.column_config.NumberColumn("Failures", format="localized", width=64),
            "error_rate": st.column_config.ProgressColumn("Error rate", format="percent", min_value=0, max_value=1,
                                                          width=90),
            "lift": st.column_config.NumberColumn("Lift", format="percent", width="small",
                                                  help="How much higher than the base error rate."),
            "p_value": st.column_config.NumberColumn("p-value", format="%.1e", width=64,
                                                     help="One-sided binomial test against the base error rate, "
                                                          "corrected for every slice tried."),
            "labeled": st.column_config.ProgressColumn("Labeled", format="percent", min_value=0, max_value=1,
                                                       width=72, help="Share of its failures with an error type."),
        },
    )
    st.caption("Best first (SliceLine's score: error-rate lift against size). Select a row to open the slice.")
with right:
    bars = pd.DataFrame({"slice": [f"#{i} {charts.snippet(descriptions[i], 32)}" for i in ids],
                         "error_rate": summary["error_rate"].astype(float), "n": summary["support"].astype(int)})
    fig = charts.slices_figure(bars.head(25), base)
    fig.update_xaxes(range=[0, 1.02])
    st.plotly_chart(fig, config={"displayModeBar": False}, alt="Error rate per slice against the base error rate")
    st.caption("Error rate per slice; red bars are more than 1.2 × the base error rate (dotted line).")

picked_rows = list(listed.selection.rows)
if picked_rows and picked_rows != state.get(state.SLICE_LIST_SEEN):  # a new pick in the list opens that slice
    st.session_state[state.SLICE] = ids[picked_rows[0]]
st.session_state[state.SLICE_LIST_SEEN] = picked_rows

# -- one slice ------------------------------------------------------------------------------------------------------
info_of = summary.set_index("slice_id")
sid = st.selectbox("Slice", ids, key=state.SLICE,
                   format_func=lambda i: f"#{i} · {charts.snippet(descriptions[i], 90)} "
                                         f"({int(info_of.at[i, 'failures']):,} of {int(info_of.at[i, 'support']):,} "
                                         "failing)")
info = info_of.loc[sid]
rows = table.iloc[rows_of_slice.get(int(sid), np.empty(0, dtype=np.int64))]
fail_rows = rows[~rows["correct"].to_numpy(bool)]

st.subheader(ui.md(info["description"]), anchor=False)
m = st.columns(5)
rate = float(info["error_rate"])
m[0].metric("Error rate", ui.pct(rate), f"{(rate - base) * 100:+.1f} pts vs base {ui.pct(base)}",
            delta_color="inverse", border=True)
m[1].metric("Support", f"{int(info['support']):,}", border=True, help="Examples in the slice.")
m[2].metric("Failures", f"{int(info['failures']):,}", border=True,
            help=f"{ui.pct(int(info['failures']) / n_fail if n_fail else 0)} of the run's failures.")
m[3].metric("Lift", f"{float(info['lift']):+.0%}", border=True,
            help=f"Error rate / base error rate - 1: {float(info['lift']) + 1:.1f} times the base rate.")
m[4].metric("p-value", f"{float(info['p_value']):.1e}" if charts.finite(info["p_value"]) else "–", border=True,
            help="Corrected for every slice tried; lower is stronger evidence.")

detail, act_col = st.columns([3, 2], gap="large")
with detail:
    a, b = st.columns(2)
    with a.container(border=True, height="stretch"):
        st.markdown("**Confusions**")
        pairs = summaries.confusion_pairs(fail_rows)
        for (t, p), n in pairs.head(4).items():
            st.markdown(f"{ui.md(t)} → {ui.md(p)} · **{n:,}**")
        if pairs.empty:
            st.caption("No failures here.")
    with b.container(border=True, height="stretch"):
        st.markdown("**Clusters and error types here**")
        here = fail_rows[fail_rows["cluster_id"] >= 0]["cluster_name"].replace("", pd.NA).dropna().value_counts()
        for name, n in here.head(3).items():
            st.markdown(f":material/bubble_chart: {ui.md(name)} · **{n:,}**")
        types_here = fail_rows[fail_rows["error_type_id"] >= 0]["error_type"].value_counts()
        for name, n in types_here.head(3).items():
            st.markdown(f":material/sell: {ui.md(name)} · **{n:,}**")
        if here.empty and types_here.empty:
            st.caption("Its failures are in no cluster and have no error type yet.")

with act_col:
    if store.can_write:
        name = actions.slice_type_name(info["description"])
        existing = {fold_name(t.name): t for t in labeled.error_types(store)}
        exists = existing.get(fold_name(name))
        fail_ids = fail_rows["example_id"].astype(str).tolist()
        clusters = {i: int(c) for i, c in zip(fail_rows["example_id"].astype(str), fail_rows["cluster_id"]) if c >= 0}
        definition = (f"Examples where {info['description']} (slice #{sid} of run {current.key}: "
                      f"{int(info['failures'])} of {int(info['support'])} failing, error rate {rate:.1%} against "
                      f"{base:.1%} overall, p = {float(info['p_value']):.2g}).")
        with st.container(border=True):
            st.markdown("**:material/sell: Make it an error type**")
            verb = "Assigns to the existing" if exists else "Creates the"
            st.caption(f"{verb} error type “{ui.md(name)}” and labels "
                       f"the slice's {len(fail_ids):,} failing examples with it, as you.")
            st.checkbox("Also move failures that already have an error type or a flag", key=state.SLICE_OVERWRITE)
            row = st.container(horizontal=True, gap="small")
            row.button("Assign its failures to that error type" if exists else "Make an error type from this slice",
                       type="primary", icon=":material/sell:", on_click=actions.slice_to_type,
                       args=(run_key, name, definition, fail_ids, clusters), disabled=not fail_ids)

            def _review() -> None:
                st.session_state[state.LABEL_SOURCE] = "Error type"
                st.session_state[state.LABEL_FROM_TYPE] = exists.id

            if exists is not None and row.button("Review on the Label page", icon=":material/open_in_new:",
                                                 on_click=_review):
                ui.switch("views/label.py")
    else:
        ui.read_only_note(store)

st.subheader("Examples in this slice", anchor=False)
f1, f2 = st.columns([3, 1], vertical_alignment="bottom")
query = f1.text_input("Search", key=state.SLICE_SEARCH, placeholder="words in the text or example id")
show_correct = f2.toggle("Include correct examples", key=state.SLICE_SHOW_CORRECT)
shown = rows if show_correct else fail_rows
shown = tables.search(shown, query).sort_values(["correct", "confidence"], ascending=[True, False],
                                                 na_position="last")
st.caption(f"{len(shown):,} examples" + (" (failures first)" if show_correct else " (failures only)"))
tables.examples_table(shown, height=420)

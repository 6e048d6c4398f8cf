"""Compare: a baseline run against one or more candidates over the same eval set. Deltas with paired bootstrap
intervals, McNemar, the fixed / broken / still-failing examples, error types and clusters before and after, and with
several candidates the ablation table with the baseline marked. The numbers come from erroranalysis.compare."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from erroranalysis import compare as cmp
from erroranalysis.report import compare_markdown as compare_report
from erroranalysis_ui.eaui import components as ui
from erroranalysis_ui.eaui import data, state, tables

cfg = ui.config()
store = ui.labels()
st.title("Compare")
st.caption("Change one thing and test again: a baseline against candidates over the same eval set, matched by "
           "example id. `erroranalysis compare` writes the same report.")

keys = data.discover(cfg.workspace)
if len(keys) < 2:
    st.info("Comparing needs at least two runs of the same eval set in this workspace (a baseline and a candidate).",
            icon=":material/compare_arrows:")
    st.stop()

if state.get(state.CMP_BASE) not in keys:
    current = state.get(state.RUN)
    st.session_state[state.CMP_BASE] = current if current in keys else keys[0]
left, right = st.columns([1, 2], gap="medium")
base = left.selectbox("Baseline", keys, key=state.CMP_BASE, help="The run the others are measured against.")
others = [k for k in keys if k != base]
picked = [k for k in (state.get(state.CMP_CANDIDATES) or []) if k in others]
if picked != (state.get(state.CMP_CANDIDATES) or []):
    st.session_state[state.CMP_CANDIDATES] = picked
candidates = right.multiselect("Candidates", others, key=state.CMP_CANDIDATES, placeholder="pick one or more runs",
                               help="One run for a before/after comparison; several for an ablation series.")
if not candidates:
    st.info("Pick one or more candidate runs to compare with the baseline.", icon=":material/compare_arrows:")
    st.stop()

with ui.guard("Compare runs of the same eval set (same example ids, texts and gold labels)."):
    report = data.comparison(cfg.workspace, base, candidates, store)
doc = report.doc

if len(candidates) > 1:
    st.subheader("Ablation series", anchor=False)
    frame = cmp.series_frame(doc)
    st.dataframe(frame, hide_index=True, height=min(35 * (len(frame) + 1) + 3, 740), column_config={
        "section": st.column_config.TextColumn("", width="small"),
        "name": st.column_config.TextColumn("", width="medium"),
    })
    b = doc["bootstrap"]
    st.caption(f"The baseline is marked **(baseline)**. Candidate cells: value (change in points [paired bootstrap "
               f"{b['level']:.0%} interval]); * marks an interval that excludes 0. Error types count failures "
               "(accepted plus suggested labels).")
    if state.get(state.CMP_DETAIL) not in candidates:
        st.session_state[state.CMP_DETAIL] = candidates[0]
    detail = st.selectbox("Details for", candidates, key=state.CMP_DETAIL)
else:
    detail = candidates[0]

comp = doc["comparisons"][candidates.index(detail)]
st.subheader(f"{comp['candidate']} vs {comp['base']}", anchor=False)
for note in comp["notes"]:
    st.caption(f"Note: {ui.md(note)}.")
acc, f1, mc = comp["overall"]["accuracy"], comp["overall"]["macro_f1"], comp["mcnemar"]
c = st.columns(5)
c[0].metric("Accuracy", ui.pct(acc["candidate"]), delta=f"{acc['delta'] * 100:+.1f} pts", border=True)
c[0].caption(f"from {ui.pct(acc['base'])} · 95% CI {compare_report.ci_text(acc['ci'])}")
c[1].metric("Macro F1", ui.pct(f1["candidate"]), delta=f"{f1['delta'] * 100:+.1f} pts", border=True)
c[1].caption(f"from {ui.pct(f1['base'])} · 95% CI {compare_report.ci_text(f1['ci'])}")
c[2].metric("Fixed", f"{comp['counts']['fixed']:,}", border=True)
c[3].metric("Broken", f"{comp['counts']['broken']:,}", border=True)
c[4].metric("McNemar p", f"{mc['p_value']:.3g}", border=True)
c[4].caption(mc["method"])

st.subheader("Per class", anchor=False)
rows = []
for r in comp["per_class"]:
    f = r["f1"]
    rows.append({"class": r["label"], "support": r["support"], "base": f["base"], "candidate": f["candidate"],
                 "delta": None if f["delta"] is None else f["delta"] * 100,
                 "ci": compare_report.ci_text(f["ci"]), "significant": f["significant"],
                 "recall": None if r["recall"]["delta"] is None else r["recall"]["delta"] * 100,
                 "precision": None if r["precision"]["delta"] is None else r["precision"]["delta"] * 100})
per_class = pd.DataFrame(rows).sort_values("delta", na_position="last")
st.dataframe(per_class, hide_index=True, column_config={
    "class": "Class",
    "support": st.column_config.NumberColumn("Support", format="localized"),
    "base": st.column_config.NumberColumn("F1 baseline", format="percent"),
    "candidate": st.column_config.NumberColumn("F1 candidate", format="percent"),
    "delta": st.column_config.NumberColumn("Δ F1 (pts)", format="%+.1f"),
    "ci": "95% CI (pts)",
    "significant": st.column_config.CheckboxColumn("CI excludes 0"),
    "recall": st.column_config.NumberColumn("Δ recall", format="%+.1f"),
    "precision": st.column_config.NumberColumn("Δ precision", format="%+.1f"),
})

types = comp["error_types"]
st.subheader("Error types", anchor=False)
if types is None:
    st.caption("No labels database for these runs yet.")
elif not types:
    st.caption("No error types labeled in these runs yet: label the baseline on the **Label** page, then apply its "
               "taxonomy to the candidate on the **Review** page.")
else:
    st.dataframe(pd.DataFrame(types), hide_index=True, column_order=[
        "name", "severity", "base", "fixed", "still_failing", "candidate", "candidate_suggested", "delta"],
        column_config={"name": "Error type", "severity": "Severity", "base": "Baseline failures",
                       "fixed": "Fixed", "still_failing": "Still failing",
                       "candidate": "Candidate (accepted)", "candidate_suggested": "Candidate (suggested)",
                       "delta": st.column_config.NumberColumn("Δ failures", format="%+d")})
    if types[0]["candidate"] is None:
        st.caption(f"{ui.md(comp['candidate'])} has no labels yet: apply the baseline's taxonomy to it on the "
                   "**Review** page to count its failures per error type.")

cl = comp["clusters"]
st.subheader("Clusters", anchor=False)
if not cl["available"]:
    st.caption(f"Not compared: {ui.md(cl['reason'])}.")
else:
    st.caption(f"{len(cl['persisted'])} persisted · {len(cl['vanished'])} vanished · {len(cl['appeared'])} appeared "
               f"(matched by shared still-failing members, overlap ≥ {cl['min_overlap']}).")
    a, b = st.columns(2, gap="large")
    with a:
        st.markdown("**Vanished** (baseline clusters with no match)")
        if cl["vanished"]:
            st.dataframe(pd.DataFrame(cl["vanished"])[["cluster_id", "name", "size", "share_fixed"]], hide_index=True,
                         column_config={"share_fixed": st.column_config.ProgressColumn("Fixed", format="percent",
                                                                                       min_value=0, max_value=1)})
        else:
            st.caption("None.")
    with b:
        st.markdown("**Appeared** (candidate clusters with no match)")
        if cl["appeared"]:
            st.dataframe(pd.DataFrame(cl["appeared"])[["cluster_id", "name", "size", "share_broken"]],
                         hide_index=True,
                         column_config={"share_broken": st.column_config.ProgressColumn(
                             "Newly broken", format="percent", min_value=0, max_value=1)})
        else:
            st.caption("None.")
    if cl["persisted"]:
        with st.expander(f"Persisted ({len(cl['persisted'])})"):
            st.dataframe(pd.DataFrame(cl["persisted"]), hide_index=True)

st.subheader("Examples", anchor=False)
if state.get(state.CMP_STATUS) not in state.CMP_STATUSES:
    st.session_state[state.CMP_STATUS] = state.CMP_STATUSES[0]
counts = comp["counts"]
status = st.segmented_control("Examples", list(state.CMP_STATUSES), key=state.CMP_STATUS, required=True,
                              label_visibility="collapsed",
                              format_func=lambda s: f"{s} ({counts[s.lower().replace(' ', '_')]:,})")
examples = report.examples
rows = examples[(examples["candidate"] == comp["candidate"])
                & (examples["status"] == status.lower().replace(" ", "_"))]
query = st.text_input("Search", key=state.CMP_SEARCH, placeholder="filter by words in the text or example id",
                      label_visibility="collapsed")
rows = tables.search(rows, query)
st.dataframe(rows.head(tables.MAX_ROWS), hide_index=True, height=420, column_order=[
    "example_id", "text", "label", "base_pred", "candidate_pred", "base_confidence", "candidate_confidence",
    "base_error_type", "candidate_error_type"], column_config={
    "example_id": st.column_config.TextColumn("Example", width="small"),
    "text": st.column_config.TextColumn("Text", width=420),
    "label": "True",
    "base_pred": "Baseline predicted",
    "candidate_pred": "Candidate predicted",
    "base_confidence": st.column_config.NumberColumn("Baseline confidence", format="%.2f"),
    "candidate_confidence": st.column_config.NumberColumn("Candidate confidence", format="%.2f"),
    "base_error_type": "Error type (baseline)",
    "candidate_error_type": "Error type (candidate)",
})
st.caption(f"{len(rows):,} examples" + (" match the search" if query else "")
           + (f"; showing the first {tables.MAX_ROWS:,}" if len(rows) > tables.MAX_ROWS else ""))
st.download_button("Download the report (Markdown)", data=lambda: compare_report.to_markdown(doc),
                   file_name=f"compare-{base.replace('/', '_')}.md", mime="text/markdown",
                   icon=":material/description:", on_click="ignore")

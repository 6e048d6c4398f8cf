"""Taxonomy: the error types of this run with counts and share of failures, their examples, and the exports."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from erroranalysis.labels import FLAG_TITLES, taxonomy
from erroranalysis_ui.eaui import charts, labeled, state, tables
from erroranalysis_ui.eaui import components as ui

current = ui.current_run()
store = ui.labels()
ui.header("Taxonomy", current, "the error types you labeled, ready to export")

with ui.guard("The taxonomy needs predictions.parquet; re-run the inference stage."):
    doc = labeled.taxonomy_doc(current.path, store)
    table = labeled.examples(current.path, store)

summary, run = doc["summary"], doc["run"]
c = st.columns(4)
c[0].metric("Error types", f"{summary['n_error_types']:,}", border=True)
c[1].metric("Failures labeled", ui.pct(summary["share_of_failures_labeled"], 0), border=True)
c[1].caption(f"{summary['n_labeled_failures']:,} of {run['n_failures']:,}")
c[2].metric("Unlabeled failures", f"{summary['n_unlabeled_failures']:,}", border=True)
c[3].metric("Flagged", f"{sum(summary['flags'].values()):,}", border=True)
c[3].caption(" · ".join(f"{n:,} {FLAG_TITLES[f]}" for f, n in summary["flags"].items()))

st.subheader("Export", anchor=False)
row = st.container(horizontal=True, gap="small")
stem = f"{current.key.replace('/', '_')}-taxonomy"
for fmt, label, icon in (("json", "JSON", ":material/data_object:"), ("csv", "CSV", ":material/table:"),
                         ("markdown", "Markdown report", ":material/description:")):
    export = current.config.workspace.bind(lambda fmt=fmt: labeled.export_text(fmt, current.path, store))
    row.download_button(label, data=export,  # called when clicked, outside the page's run: confined by bind
                        file_name=stem + taxonomy.EXTENSIONS[fmt], mime=taxonomy.MIME[fmt], icon=icon,
                        key=state.DOWNLOAD + fmt, on_click="ignore", type="primary" if fmt == "json" else "secondary")
st.caption("JSON follows the versioned schema in docs/taxonomy.md; CSV has one row per labeled example; the Markdown "
           "report reads well in a pull request. `erroranalysis export` writes the same files.")

types = doc["error_types"]
if not types:
    st.info("No error types yet. Create them on the **Label** page and assign clusters or examples to them.",
            icon=":material/sell:")
    st.page_link("views/label.py", label="Go to Label", icon=":material/sell:")
    st.stop()

st.subheader("Error types", anchor=False)
frame = pd.DataFrame([{
    "name": t["name"], "severity": t["severity"], "count": t["count"], "share": t["share_of_failures"],
    "top_confusion": (f"{t['per_class']['confusions'][0]['label']} → {t['per_class']['confusions'][0]['pred']}"
                      if t["per_class"]["confusions"] else ""),
    "suggested": t["suggested"], "definition": t["definition"],
} for t in types])
st.dataframe(frame, hide_index=True, column_config={
    "name": st.column_config.TextColumn("Error type", width="medium"),
    "severity": "Severity",
    "count": st.column_config.NumberColumn("Examples", format="localized"),
    "share": st.column_config.ProgressColumn("Share of failures", format="percent", min_value=0,
                                             max_value=max(0.01, float(frame["share"].max()))),
    "top_confusion": "Top confusion",
    "suggested": st.column_config.NumberColumn("Suggested", help="Suggestions awaiting review"),
    "definition": st.column_config.TextColumn("Definition", width="large"),
})
if len(types) > 1:
    st.plotly_chart(charts.error_type_bars(types), config={"displayModeBar": False},
                    alt="Examples per error type, coloured by severity")

st.subheader("Examples by error type", anchor=False)
ids = [t["id"] for t in types]
by_id = {t["id"]: t for t in types}
if state.get(state.TAXONOMY_TYPE) not in ids:
    st.session_state[state.TAXONOMY_TYPE] = ids[0]
tid = st.selectbox("Error type", ids, key=state.TAXONOMY_TYPE,
                   format_func=lambda i: f"{by_id[i]['name']} ({by_id[i]['count']:,})")
t = by_id[tid]
a, b = st.columns([1, 2], gap="large")
with a:
    with st.container(border=True):
        st.markdown(f"**{ui.md(t['name'])}** · {t['severity']} severity")
        st.caption(ui.md(t["definition"]) if t["definition"] else "No definition yet (edit it on the Label page).")
        by_label = t["per_class"]["by_label"]
        if by_label:
            st.markdown("**True label**")
            st.bar_chart(pd.Series(by_label, name="examples"), horizontal=True, height=40 + 28 * len(by_label),
                         color="#4F46E5")
        if t["per_class"]["confusions"]:
            st.markdown("**Confusions**")
            for conf in t["per_class"]["confusions"][:5]:
                st.markdown(f"{ui.md(conf['label'])} → {ui.md(conf['pred'])} · **{conf['count']:,}**")
        if t["clusters"]:
            st.markdown("**Now in clusters**")
            for cl in t["clusters"][:5]:
                st.markdown(f"#{cl['cluster_id']} {ui.md(charts.snippet(cl['name'], 60))} · **{cl['count']:,}**")
with b:
    rows = table[table["error_type_id"] == tid]
    tables.examples_table(rows.sort_values("confidence", ascending=False, na_position="last"), height=460,
                          hide=("error_type",))

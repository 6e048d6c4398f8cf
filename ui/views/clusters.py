"""Clusters: the 2-D map of failures coloured by cluster, the clusters by impact, and one cluster in detail."""

from __future__ import annotations

import numpy as np
import streamlit as st

from erroranalysis.report import summaries
from erroranalysis_ui.eaui import charts, data, labeled, state, tables, task_views, tokens
from erroranalysis_ui.eaui import components as ui

current = ui.current_run()
ui.header("Clusters", current, "failing examples grouped into candidate error types")

with ui.guard("Re-run `erroranalysis cluster RUN`; the other pages and runs still work."):
    clusters = data.clusters(current.path)
    if clusters is None:
        st.info(f"This run has no clusters yet. Run `erroranalysis cluster {current.path}` to group its failures; "
                "the Label page works meanwhile, by confusion pair.", icon=":material/bubble_chart:")
        st.stop()
    table = labeled.examples(current.path, ui.labels())

# masks over the whole table; rows copied only for the cluster shown (a 1M-row table filtered whole, texts
# included, costs more than a rerun may)
failed = ~table["correct"].to_numpy(bool)
cluster_of = table["cluster_id"].to_numpy()
n_fail = int(failed.sum())
n_clustered = int((failed & (cluster_of >= 0)).sum())
summary = labeled.cluster_summary(current.path, ui.labels())
if summary.empty:
    st.info("The clustering found no clusters among the failures.", icon=":material/bubble_chart:")
    st.stop()

ids = summary["cluster_id"].tolist()
if state.get(state.CLUSTER) not in ids:
    st.session_state[state.CLUSTER] = ids[0]

c = st.columns(4)
c[0].metric("Clusters", f"{len(summary):,}", border=True)
c[1].metric("Failures clustered", ui.pct(n_clustered / n_fail if n_fail else 0, 0), border=True)
c[2].metric("Unclustered failures", f"{n_fail - n_clustered:,}", border=True)
n_labeled = int((failed & (table["error_type_id"].to_numpy() >= 0)).sum())
c[3].metric("Failures labeled", ui.pct(n_labeled / n_fail if n_fail else 0, 0), border=True)


st.subheader("Clusters by impact", anchor=False)
listed = st.dataframe(
    summary, key=state.CLUSTER_LIST, on_select="rerun", selection_mode="single-row", hide_index=True,
    height=min(400, 35 * (len(summary) + 1) + 3),
    selection_default={"selection": {"rows": [ids.index(state.get(state.CLUSTER))]}},
    column_order=["cluster_id", "name", "parent", "size", "share", "top_confusion", "keywords", "labeled",
                  "main_type"],
    column_config={
        "cluster_id": st.column_config.NumberColumn("#", width=40),
        "name": st.column_config.TextColumn("Cluster", width="large"),
        "parent": st.column_config.TextColumn("Part of", help="The coarser error type this cluster belongs to"),
        "size": st.column_config.NumberColumn("Failures", format="localized", width="small"),
        "share": st.column_config.ProgressColumn("Share of failures", format="percent", min_value=0,
                                                 max_value=max(0.01, float(summary["share"].max()))),
        "top_confusion": st.column_config.TextColumn("Top confusion"),
        "keywords": st.column_config.ListColumn("Keywords", width="medium"),
        "labeled": st.column_config.ProgressColumn("Labeled", format="percent", min_value=0, max_value=1,
                                                   width="small"),
        "main_type": st.column_config.TextColumn("Error type"),
    },
)
st.caption("Largest first. Select a row to open the cluster.")
picked_rows = list(listed.selection.rows)
if picked_rows and picked_rows != state.get(state.CLUSTER_LIST_SEEN):  # a new pick in the list opens that cluster
    st.session_state[state.CLUSTER] = ids[picked_rows[0]]
st.session_state[state.CLUSTER_LIST_SEEN] = picked_rows

names = dict(zip(summary["cluster_id"], summary["name"]))
sizes = dict(zip(summary["cluster_id"], summary["size"]))
map_col, detail_col = st.columns([1, 1], gap="large")

with detail_col:
    cid = st.selectbox("Cluster", ids, key=state.CLUSTER,
                       format_func=lambda i: f"#{i} · {names.get(i, '')} ({sizes.get(i, 0):,})")
    info = clusters[clusters["cluster_id"] == cid].iloc[0]
    rows = table.iloc[np.flatnonzero(cluster_of == cid)]
    fail_rows = rows[~rows["correct"].to_numpy(bool)]
    st.subheader(str(info["name"]) or f"Cluster {cid}", anchor=False)
    about = summary.set_index("cluster_id").loc[cid]
    if about["summary"]:
        st.caption(ui.md(about["summary"]))
    family = summary[(summary["parent_id"] == about["parent_id"]) & (summary["parent_id"] >= 0)]
    if len(family):
        others = [f"#{int(i)}" for i in family["cluster_id"] if i != cid]
        st.caption(f"Part of **{ui.md(about['parent'])}**" + (f", with {', '.join(others)}" if others else "")
                   + f": {int(family['size'].sum()):,} failures in all.")
    keywords = [str(k) for k in info["keywords"]][:12]
    if keywords:
        with st.container(horizontal=True, gap="small"):
            for kw in keywords:
                st.badge(kw, color="violet")
    m = st.columns(4)
    m[0].metric("Failures", f"{len(fail_rows):,}", border=True)
    m[1].metric("Of failures", ui.pct(len(fail_rows) / n_fail if n_fail else 0, 0), border=True)
    m[2].metric("Mean conf.", f"{rows['confidence'].mean():.2f}" if rows["confidence"].notna().any() else "–",
                border=True)
    m[3].metric("Mean loss", f"{rows['loss'].mean():.2f}" if rows["loss"].notna().any() else "–", border=True)
    a, b = st.columns(2)
    with a.container(border=True, height="stretch"):
        st.markdown("**Confusions**")
        pairs = summaries.confusion_pairs(rows)
        for (t, p), n in pairs.head(4).items():
            st.markdown(f"{ui.md(t)} → {ui.md(p)} · **{n:,}**")
        if pairs.empty:
            st.caption("None (correct examples only).")
    with b.container(border=True, height="stretch"):
        st.markdown("**Error types here**")
        here = rows[rows["error_type_id"] >= 0]["error_type"].value_counts()
        for name, n in here.head(4).items():
            st.markdown(f":material/sell: {ui.md(name)} · **{n:,}**")
        if here.empty:
            st.caption("Nothing labeled here yet.")
        was_here = (table["labeled_cluster_id"] == cid).to_numpy(dtype=bool, na_value=False)
        moved = table.loc[was_here & (cluster_of != cid), ["cluster_id"]]
        if len(moved):
            went = moved["cluster_id"].map(lambda c: names.get(c, "unclustered") if c >= 0 else "unclustered")
            st.caption(f"{len(moved):,} examples labeled while in this cluster are now elsewhere: "
                       + ", ".join(f"{ui.md(k)} ({v})" for k, v in went.value_counts().head(4).items()))
        came = rows[(rows["labeled_cluster_id"].notna()) & (rows["labeled_cluster_id"] != cid)
                    & (rows["error_type_id"] >= 0)]
        if len(came):
            st.caption(f"{len(came):,} labeled examples came here from other clusters after re-clustering.")

    defined_by = info.get("slice")
    if isinstance(defined_by, str) and defined_by:
        st.caption(f"Defined by the error slice {ui.md(defined_by)}: the embedding had scattered these failures "
                   "over other clusters, so they were grouped by what they share.")
    overlaps = [] if info.get("slices") is None else [str(x) for x in info["slices"]]
    if overlaps:
        st.caption("Error slices holding most of this cluster: " + "; ".join(ui.md(x) for x in overlaps))
    if bool(info.get("probably_mislabeled", False)):
        st.warning(f"{info['label_issue_share']:.0%} of these failures look mislabeled (confident learning): check "
                   "the gold labels before blaming the model.", icon=":material/report:")

    def _go_label() -> None:
        st.session_state[state.LABEL_SOURCE] = "Cluster"
        st.session_state[state.LABEL_CLUSTER] = int(cid)

    def _go_label_family() -> None:
        st.session_state[state.LABEL_SOURCE] = "Cluster family"
        st.session_state[state.LABEL_FAMILY] = int(about["parent_id"])

    go = st.container(horizontal=True, gap="small")
    if go.button("Label this cluster", icon=":material/sell:", type="primary", on_click=_go_label):
        ui.switch("views/label.py")
    if len(family) > 1 and go.button(f"Label its family ({len(family)} clusters)", icon=":material/account_tree:",
                                     on_click=_go_label_family):
        ui.switch("views/label.py")

    st.markdown("**Exemplars**")
    exemplar_ids = [str(x) for x in info["exemplar_ids"]][:3]
    exemplars = rows.set_index("example_id").reindex(exemplar_ids).dropna(subset=["label"]) if exemplar_ids \
        else rows.head(0).set_index("example_id")
    if exemplars.empty:
        exemplars = fail_rows.sort_values("membership", ascending=False).head(3).set_index("example_id")
    for ex_id, ex in exemplars.iterrows():
        with st.container(border=True):
            conf = f" · confidence {ex['confidence']:.2f}" if charts.finite(ex["confidence"]) else ""
            st.caption(f"{ui.md(ex_id)} · true **{ui.md(ex['label'])}** → predicted **{ui.md(ex['pred'])}**{conf}"
                       + ui.md(task_views.example_errors(ex)))
            if tokens.is_token_run(current.path):  # a span: its sentence, gold and predicted spans marked
                st.markdown(tokens.span_markup(current.path, ex))
            else:
                st.markdown(ui.md(charts.snippet(ex["text"], 400)))

with map_col:
    st.markdown("**Map of failures**")
    if table["x"].isna().all():
        st.caption("This clustering wrote no 2-D layout (x, y), so there is no map.")
    else:
        show_correct = st.toggle("Show correct examples", key=state.MAP_SHOW_CORRECT,
                                 help=f"Draw the correct examples faintly behind the failures (up to {labeled.MAP_BACKGROUND:,}).")
        fig = labeled.cluster_map_figure(current.path, ui.labels(), highlight=int(cid), show_correct=bool(show_correct))
        placed = int((table["x"].notna() & ~table["correct"].astype(bool)).sum())
        if placed > labeled.MAP_FAILURES:
            st.caption(f"Showing a sample of {labeled.MAP_FAILURES:,} of {placed:,} failures, every cluster in it; "
                       "the tables and the Label page use them all.")
        event = st.plotly_chart(fig, key=state.MAP_CHART, on_select="rerun",
                                selection_mode=("points", "lasso", "box"),
                                config={"displaylogo": False, "modeBarButtonsToRemove": ["toImage"]},
                                alt="2-D map of failing examples coloured by cluster")
        map_ids = charts.ids_from_selection(event)
        if map_ids and map_ids != state.get(state.MAP_SEEN):  # a new lasso replaces the picked examples
            st.session_state[state.MAP_SELECTION] = map_ids
        st.session_state[state.MAP_SEEN] = map_ids
        picked = state.get(state.MAP_SELECTION) or []
        if picked:
            def _label_picked() -> None:
                st.session_state[state.LABEL_SOURCE] = "Map selection"

            if st.button(f"Label the {len(picked):,} examples selected on the map", icon=":material/sell:",
                         on_click=_label_picked):
                ui.switch("views/label.py")
        else:
            st.caption("Lasso or box-select points to label them together; hover a point to read it.")

st.subheader("All examples in this cluster", anchor=False)
if (wrong := task_views.errors_line(rows)) is not None:
    st.caption(ui.md(wrong))
f1, f2, f3 = st.columns([2, 1, 1])
query = f1.text_input("Search", key=state.CLUSTER_SEARCH, placeholder="words in the text or example id")
true_pick = f2.multiselect("True label", sorted(rows["label"].unique()), key=state.CLUSTER_LABELS)
pred_pick = f3.multiselect("Predicted", sorted(rows["pred"].unique()), key=state.CLUSTER_PREDS)
shown = tables.search(rows, query)
if true_pick:
    shown = shown[shown["label"].isin(true_pick)]
if pred_pick:
    shown = shown[shown["pred"].isin(pred_pick)]
st.caption(f"{len(shown):,} of {len(rows):,} examples, least confident first")
tables.examples_table(shown.sort_values("confidence", na_position="last"), hide=("cluster_name",), height=420)

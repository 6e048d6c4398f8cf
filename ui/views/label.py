"""Label: create error types; assign clusters or selected examples to them; merge clusters; move examples out;
flag wrong gold labels and acceptable predictions; notes; undo. Every change is saved at once in the labels
database, with who made it."""

from __future__ import annotations

import numpy as np
import streamlit as st

from erroranalysis.core.errors import UserError
from erroranalysis.labels import SEVERITIES
from erroranalysis_ui.eaui import actions, charts, data, labeled, state, tables, tokens
from erroranalysis_ui.eaui import components as ui

current = ui.current_run()
store = ui.labels()
run_key = labeled.run_key(store, current.path)
can_write = store.can_write  # the store refuses writes itself (--read-only, --viewers); here they are hidden
ui.header("Label", current, f"labeling as **{ui.md(store.user)}** · every change is saved at once" if can_write
          else f"**{ui.md(store.user)}** · read only")
if not can_write:
    ui.read_only_note(store)

with ui.guard("Labeling needs predictions.parquet; re-run the inference stage."):
    table = labeled.examples(current.path, store)
    types = labeled.error_types(store)
    clusters = data.clusters(current.path)
    summary = labeled.cluster_summary(current.path, store) if clusters is not None else None

type_names = {t.id: t.name for t in types}
# Masks over the whole table, and the few rows shown taken from it: at 1M examples a filtered copy of the table
# (texts included) costs more than the rest of the page.
failed = ~table["correct"].to_numpy(bool)
type_of = table["error_type_id"].to_numpy()
cluster_of = table["cluster_id"].to_numpy()
counts = table.loc[(type_of >= 0) & (table["status"] == "accepted").to_numpy(bool), "error_type_id"].value_counts()

# -- undo ---------------------------------------------------------------------------------------------------------
last = store.last_undoable()
bar = st.container(horizontal=True, vertical_alignment="center")
if can_write:
    bar.button("Undo", icon=":material/undo:", on_click=actions.undo, disabled=last is None,
               help=f"Undo your last change: {last.summary}" if last else "Nothing of yours to undo.")
n_labeled, n_failed = int((failed & (type_of >= 0)).sum()), int(failed.sum())
bar.caption((f"Last change: {ui.md(last.summary)} · " if last else "")
            + f"{n_labeled:,} of {n_failed:,} failures labeled ({ui.pct(n_labeled / max(1, n_failed), 0)})")

types_col, examples_col = st.columns([1, 2.3], gap="large")

# -- error types --------------------------------------------------------------------------------------------------
with types_col:
    st.subheader("Error types", anchor=False)
    if not types:
        st.caption("None yet. Name the first pattern you see in the failures.")
    for t, depth in tables.type_tree(types, counts):
        with st.container(border=True):
            row = st.container(horizontal=True, vertical_alignment="center", gap="small")
            row.markdown(("↳ " * depth) + f"**{ui.md(t.name)}**")
            row.badge(t.severity, color={"low": "gray", "medium": "orange", "high": "red",
                                         "critical": "violet"}.get(t.severity, "gray"))
            row.caption(f"{int(counts.get(t.id, 0)):,} here")
            if t.definition:
                st.caption(ui.md(t.definition))

    if can_write:
        with st.expander("New error type", expanded=not types, icon=":material/add:"):
            with st.form(state.NEW_TYPE_FORM, clear_on_submit=True, border=False):
                st.text_input("Name", key=state.NEW_TYPE_NAME, placeholder="e.g. Sarcasm read literally", max_chars=80)
                st.text_area("Definition", key=state.NEW_TYPE_DEFINITION, height=80,
                             placeholder="When does an example belong here?")
                st.segmented_control("Severity", list(SEVERITIES), key=state.NEW_TYPE_SEVERITY, default="medium")
                if types:
                    st.selectbox("Under", [None, *[t.id for t in types]], key=state.NEW_TYPE_PARENT,
                                 format_func=lambda i: "(top level)" if i is None else type_names[i],
                                 help="A sub-type of a broader error type (two levels, e.g. Weather > Snow).")
                st.form_submit_button("Create error type", type="primary", on_click=actions.create_type,
                                      icon=":material/add:")

        if types:
            with st.expander("Edit, merge or delete", icon=":material/edit:"):
                ids = [t.id for t in types]
                if state.get(state.EDIT_TYPE) not in ids:
                    st.session_state[state.EDIT_TYPE] = ids[0]

                def _load_edit() -> None:
                    t = next(t for t in types if t.id == st.session_state[state.EDIT_TYPE])
                    st.session_state[state.EDIT_NAME] = t.name
                    st.session_state[state.EDIT_DEFINITION] = t.definition
                    st.session_state[state.EDIT_SEVERITY] = t.severity
                    st.session_state[state.EDIT_PARENT] = t.parent_id

                if state.EDIT_NAME not in st.session_state:
                    _load_edit()
                st.selectbox("Error type", ids, key=state.EDIT_TYPE, format_func=type_names.get, on_change=_load_edit)
                st.text_input("Name", key=state.EDIT_NAME, max_chars=80)
                st.text_area("Definition", key=state.EDIT_DEFINITION, height=80)
                st.selectbox("Severity", list(SEVERITIES), key=state.EDIT_SEVERITY)
                st.selectbox("Under", [None, *[i for i in ids if i != state.get(state.EDIT_TYPE)]],
                             key=state.EDIT_PARENT, format_func=lambda i: "(top level)" if i is None else type_names[i])
                st.button("Save", on_click=actions.update_type, icon=":material/save:")
                others = [i for i in ids if i != state.get(state.EDIT_TYPE)]
                if others:
                    st.multiselect("Merge these into it", others, key=state.MERGE_TYPES, format_func=type_names.get)
                    st.button("Merge into it", on_click=actions.merge_types, icon=":material/merge:",
                              disabled=not state.get(state.MERGE_TYPES), key=state.MERGE_TYPES_BUTTON)
                st.button("Delete this error type", on_click=actions.delete_type, icon=":material/delete:",
                          help="Its examples become unlabeled. Undo restores both.")

# -- examples -----------------------------------------------------------------------------------------------------
with examples_col:
    st.subheader("Examples", anchor=False)
    sources = list(state.LABEL_SOURCES)
    if state.get(state.LABEL_SOURCE) not in sources:
        st.session_state[state.LABEL_SOURCE] = "Cluster" if summary is not None and not summary.empty \
            else "Unlabeled failures"
    source = st.segmented_control("From", sources, key=state.LABEL_SOURCE, required=True,
                                  on_change=state.reset_label_selection, label_visibility="collapsed")

    pick = np.zeros(len(table), dtype=bool)
    whole_cluster = None
    if source == "Cluster":
        if summary is None or summary.empty:
            st.caption("This run has no clusters; label by confusion pair or from the unlabeled failures.")
        else:
            cids = summary["cluster_id"].tolist()
            if state.get(state.LABEL_CLUSTER) not in cids:
                st.session_state[state.LABEL_CLUSTER] = cids[0]
            info = summary.set_index("cluster_id")
            cid = st.selectbox("Cluster", cids, key=state.LABEL_CLUSTER, on_change=state.reset_label_selection,
                               format_func=lambda i: f"#{i} · {info.at[i, 'name']} ({int(info.at[i, 'size']):,})")
            pick = cluster_of == cid
            whole_cluster = [cid]
    elif source == "Cluster family":
        families = summary[summary["parent_id"] >= 0].groupby("parent_id") if summary is not None else None
        if families is None or not len(families):
            st.caption("No cluster families in this run: its clusters have no parent (re-cluster to group them).")
        else:
            fams = {int(p): g for p, g in families}
            if state.get(state.LABEL_FAMILY) not in fams:
                st.session_state[state.LABEL_FAMILY] = next(iter(fams))
            fid = st.selectbox("Family", list(fams), key=state.LABEL_FAMILY, on_change=state.reset_label_selection,
                               format_func=lambda p: f"{fams[p]['parent'].iloc[0]} ({len(fams[p])} clusters, "
                                                     f"{int(fams[p]['size'].sum()):,})")
            whole_cluster = [int(c) for c in fams[fid]["cluster_id"]]
            pick = np.isin(cluster_of, whole_cluster)
            st.caption("Labeling the family labels every one of its clusters.")
    elif source == "Confusion":
        pairs = labeled.confusion_pairs(current.path)
        options = [state.pair_key(t, p) for t, p in pairs.index]
        if not options:
            st.caption("No failures in this run.")
        else:
            if state.get(state.LABEL_PAIR) not in options:
                st.session_state[state.LABEL_PAIR] = options[0]
            pair = st.selectbox("True → predicted", options, key=state.LABEL_PAIR,
                                on_change=state.reset_label_selection,
                                format_func=lambda k: "{} → {} ({:,})".format(*state.split_pair(k),
                                                                               int(pairs[state.split_pair(k)])))
            t, p = state.split_pair(pair)
            pick = failed & (table["label"] == t).to_numpy(bool) & (table["pred"] == p).to_numpy(bool)
    elif source == "Map selection":
        picked = state.get(state.MAP_SELECTION) or []
        if not picked:
            st.caption("Nothing selected on the map: lasso some points on the Clusters page.")
        pick = table["example_id"].isin(picked).to_numpy(bool)
    elif source == "Error type":
        if not types:
            st.caption("No error types yet.")
        else:
            ids = [t.id for t in types]
            if state.get(state.LABEL_FROM_TYPE) not in ids:
                st.session_state[state.LABEL_FROM_TYPE] = ids[0]
            tid = st.selectbox("Error type", ids, key=state.LABEL_FROM_TYPE, format_func=type_names.get,
                               on_change=state.reset_label_selection)
            pick = type_of == tid
            st.caption("Select examples that do not belong and move them out, or assign them to another type.")
    elif source == "Unlabeled failures":
        pick = failed & (type_of < 0) & ~table["label_wrong"].to_numpy(bool) & ~table["not_error"].to_numpy(bool)
    else:
        pick = failed

    query = st.text_input("Search", key=state.LABEL_SEARCH, placeholder="filter by words in the text or example id",
                          on_change=state.reset_label_selection, label_visibility="collapsed")
    shown, matching = tables.top_rows(table, pick, query)
    st.session_state[state.LABEL_ROWS] = list(zip(shown["example_id"].tolist(),
                                                  shown["cluster_id"].astype(int).tolist()))
    event = tables.examples_table(shown, key=state.label_table_key(), selectable=True, height=400, text_width=330,
                                  hide=("loss", "cluster_name") if source == "Cluster" else ("loss",),
                                  total=len(matching))
    selected_rows = list(event.selection.rows) if event is not None else []
    selected = [shown.iloc[i]["example_id"] for i in selected_rows if i < len(shown)]
    st.caption(f"**{len(selected):,}** selected of {len(shown):,} shown, most confident first"
               + (f" ({int(pick.sum()):,} before search)" if query else ""))

    type_ids = [t.id for t in types]
    if state.get(state.LABEL_TARGET) not in type_ids:
        st.session_state[state.LABEL_TARGET] = type_ids[0] if type_ids else None
    with st.container(border=bool(can_write or len(selected) == 1)):
        if can_write:
            act = st.container(horizontal=True, vertical_alignment="bottom", gap="small")
            act.selectbox("Error type", type_ids, key=state.LABEL_TARGET, format_func=type_names.get,
                          placeholder="create an error type first", width=260)
            act.button(f"Assign {len(selected):,} selected", on_click=actions.assign_selected, args=(run_key,),
                       disabled=not selected or not types, type="primary", icon=":material/sell:")
            if whole_cluster is not None and not query:
                members = np.flatnonzero(pick)  # pick: the cluster or family
                what = f"cluster #{whole_cluster[0]}" if len(whole_cluster) == 1 else \
                    f"clusters {', '.join(f'#{c}' for c in whole_cluster)}"
                act.button(f"Assign whole {'cluster' if len(whole_cluster) == 1 else 'family'} ({len(members):,})",
                           on_click=actions.assign_rows,
                           args=(run_key, table, members, f"assigned {what} ({len(members):,} examples) to {{type}}"),
                           disabled=not types, icon=":material/select_all:")
            elif len(matching):
                act.button(f"Assign all {len(matching):,} matching", on_click=actions.assign_rows,
                           args=(run_key, table, matching), disabled=not types, icon=":material/select_all:",
                           help="Every example that matches, not only the rows shown.")
            flags = st.container(horizontal=True, gap="small")
            flags.button("Move out of error type", on_click=actions.unassign_selected, args=(run_key,),
                         disabled=not selected, icon=":material/call_split:",
                         help="Split: the selected examples leave their error type (they become unlabeled).")
            flags.button("Label is wrong", on_click=actions.flag_selected, args=(run_key, "label_wrong"),
                         disabled=not selected, icon=":material/report:",
                         help="The gold label is wrong, not the model.")
            flags.button("Not an error", on_click=actions.flag_selected, args=(run_key, "not_error"),
                         disabled=not selected, icon=":material/thumb_up:",
                         help="The prediction is acceptable (ambiguous example, both labels fit).")
            if selected and shown.set_index("example_id").loc[selected, ["label_wrong", "not_error"]].any().any():
                flags.button("Clear flags", on_click=lambda: (actions.flag_selected(run_key, "label_wrong", False),
                                                              actions.flag_selected(run_key, "not_error", False)),
                             icon=":material/flag:")
        if len(selected) == 1:
            ex = shown.set_index("example_id").loc[selected[0]]
            st.markdown(f"**{ui.md(selected[0])}** · true {ui.md(ex['label'])} → predicted {ui.md(ex['pred'])}")
            if tokens.is_token_run(current.path):  # a span: its sentence, gold and predicted spans marked
                st.markdown(tokens.span_markup(current.path, ex))
            else:
                st.text(str(ex["text"])[:4000])
            if st.session_state.get(state.LABEL_NOTE_FOR) != selected[0]:
                st.session_state[state.LABEL_NOTE] = ex["note"]
                st.session_state[state.LABEL_NOTE_FOR] = selected[0]
            if can_write:
                st.text_area("Note", key=state.LABEL_NOTE, height=70, placeholder="Why does the model fail here?")
                st.button("Save note", on_click=actions.save_note, args=(run_key, selected[0]), icon=":material/save:")
            elif ex["note"]:
                st.caption(f"Note: {ui.md(ex['note'])}")

# -- merge clusters -----------------------------------------------------------------------------------------------
if can_write and summary is not None and not summary.empty:
    with st.container(border=True):
        st.markdown("**:material/merge: Merge clusters into one error type**")
        cids = summary["cluster_id"].tolist()
        info = summary.set_index("cluster_id")
        row = st.container(horizontal=True, vertical_alignment="bottom", gap="small")
        row.multiselect("Clusters", cids, key=state.MERGE_CLUSTERS, width=520,
                        format_func=lambda i: f"#{i} · {charts.snippet(info.at[i, 'name'], 50)}")
        if state.get(state.MERGE_TARGET) not in type_names:
            st.session_state[state.MERGE_TARGET] = type_ids[0] if type_ids else None
        row.selectbox("Into", type_ids, key=state.MERGE_TARGET, format_func=type_names.get, width=260,
                      placeholder="create an error type first")
        members = {int(c): list(zip(g["example_id"], g["cluster_id"].astype(int)))
                   for c, g in table.loc[np.isin(cluster_of, state.get(state.MERGE_CLUSTERS) or []),
                                         ["example_id", "cluster_id"]].groupby("cluster_id")}
        row.button("Merge clusters", on_click=actions.merge_clusters, args=(run_key, members),
                   icon=":material/merge:", disabled=not types or not state.get(state.MERGE_CLUSTERS),
                   key=state.MERGE_CLUSTERS_BUTTON)

# -- history ------------------------------------------------------------------------------------------------------
with st.expander("History", icon=":material/history:"):
    try:
        events = store.events(run=run_key, limit=100)
    except UserError as exc:
        ui.problem(exc)
        events = []
    if not events:
        st.caption("No changes yet.")
    else:
        st.dataframe([{"when (UTC)": e.ts[:19].replace("T", " "), "who": e.user, "what": e.summary,
                       "undone": "yes" if e.undone_by else ""} for e in events], hide_index=True,
                     column_config={"what": st.column_config.TextColumn("what", width="large")})

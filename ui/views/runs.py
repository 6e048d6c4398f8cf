"""Runs: every run in the workspace, and the selected run's manifest at a glance."""

from __future__ import annotations

import streamlit as st

from erroranalysis.core.errors import UserError
from erroranalysis_ui.eaui import components as ui
from erroranalysis_ui.eaui import data, state

cfg = ui.config()
st.title("Runs")
st.caption(f"Workspace `{cfg.runs_root}` · labels in `{cfg.labels_db}`")

runs = data.list_runs(cfg.workspace)
if runs.empty:
    st.info("No runs here yet. Make one with `erroranalysis run --model CHECKPOINT --data EVAL.jsonl --out "
            f"{cfg.runs_root}/NAME`, or `erroranalysis analyze` on your own predictions.",
            icon=":material/info:")
    st.stop()

try:
    labeled = ui.labeled_counts(runs["run"])
except UserError as exc:
    labeled = {}
    ui.problem(exc)
table = runs.assign(labeled=[labeled.get(k, 0) for k in runs["run"]],
                    status=["✓ ok" if not p else f"⚠ {p}" for p in runs["problem"]])


current_key = state.get(state.RUN)
default_rows = [int(i) for i in table.index[table["run"] == current_key]]
picked = st.dataframe(
    table, key=state.RUNS_TABLE, on_select="rerun", selection_mode="single-row", hide_index=True, placeholder="–",
    selection_default={"selection": {"rows": default_rows}} if default_rows else None,
    column_order=["run", "status", "examples", "accuracy", "failures", "labeled", "clustered", "model", "created",
                  "stages"],
    column_config={
        "run": st.column_config.TextColumn("Run", width="small"),
        "model": st.column_config.TextColumn("Model / data", width="medium"),
        "task": "Task",
        "created": "Created (UTC)",
        "examples": st.column_config.NumberColumn("Examples", format="localized"),
        "accuracy": st.column_config.ProgressColumn("Accuracy", format="percent", min_value=0, max_value=1),
        "failures": st.column_config.NumberColumn("Failures", format="localized"),
        "labeled": st.column_config.NumberColumn("Labeled", format="localized", help="Examples with an error type"),
        "clustered": st.column_config.CheckboxColumn("Clusters"),
        "stages": "Stages",
        "status": st.column_config.TextColumn("Status", width="medium"),
    },
)
st.caption("Select a row to open that run; the other pages follow.")
rows = list(picked.selection.rows)
if rows and rows != state.get(state.RUNS_TABLE_SEEN):
    state.put(state.RUNS_TABLE_SEEN, rows)
    if table.iloc[rows[0]]["run"] != current_key:
        state.put(state.PENDING_RUN, table.iloc[rows[0]]["run"])
        st.rerun()  # the sidebar's run picker, drawn before this choice, takes it on the rerun
state.put(state.RUNS_TABLE_SEEN, rows)

current = ui.current_run(required=False)
if current is None:
    st.stop()

st.subheader(current.key)
try:
    manifest = data.manifest(current.path)
except UserError as exc:
    ui.problem(exc, "The other runs still work: pick one above.")
    st.stop()

model = manifest.get("model") or {}
dataset = manifest.get("data") or {}
stages = manifest.get("stages") or {}
row = table[table["run"] == current.key].iloc[0]

c1, c2, c3, c4 = st.columns(4)
c1.metric("Examples", ui.count(row["examples"]), border=True)
c2.metric("Accuracy", ui.pct(row["accuracy"]), border=True)
c3.metric("Failures", ui.count(row["failures"]), border=True)
c4.metric("Labeled", f"{int(row['labeled']):,}", border=True)

left, right = st.columns([3, 2], gap="large")
with left:
    with st.container(border=True):
        st.markdown("**:material/model_training: Model**")
        st.markdown(f"`{model.get('path', '–')}`" if model else "Predictions loaded with `analyze` (no checkpoint).")
        facts = []
        if model.get("weights_sha256"):
            facts.append(f"weights `{str(model['weights_sha256'])[:12]}`")
        for k in ("max_length", "precision", "batch_size"):
            if model.get(k) is not None:
                facts.append(f"{k.replace('_', ' ')} {model[k]}")
        if manifest.get("device"):
            facts.append(f"device {manifest['device']}")
        if manifest.get("seed") is not None:
            facts.append(f"seed {manifest['seed']}")
        if facts:
            st.caption(" · ".join(facts))
    with st.container(border=True):
        st.markdown("**:material/dataset: Data**")
        st.markdown(f"`{dataset.get('path', '–')}`")
        facts = []
        if dataset.get("rows") is not None:
            facts.append(f"{int(dataset['rows']):,} rows")
        if dataset.get("format"):
            facts.append(str(dataset["format"]))
        if dataset.get("sha256"):
            facts.append(f"sha256 `{str(dataset['sha256'])[:12]}`")
        meta = dataset.get("metadata_columns") or []
        if meta:
            facts.append("metadata: " + ", ".join(ui.md(m) for m in meta))
        if facts:
            st.caption(" · ".join(facts))
        labels = manifest.get("labels") or []
        if labels:
            st.caption(f"{len(labels)} classes: " + ", ".join(ui.md(x) for x in labels[:30])
                       + (" …" if len(labels) > 30 else ""))
    tool = manifest.get("tool") or {}
    st.caption(f"Created {str(manifest.get('created', '–')).replace('T', ' ')} by erroranalysis "
               f"{tool.get('version', '?')} · task {manifest.get('task', '–')}")
with right:
    with st.container(border=True):
        st.markdown("**:material/checklist: Stages**")
        if not stages:
            st.caption("No stage has run yet.")
        for name in stages:
            info = current.run.state(name, manifest) or {}
            status = info.get("status", "?")
            icon = {"done": ":green[:material/check_circle:]", "failed": ":red[:material/cancel:]",
                    "running": ":orange[:material/pending:]", "committing": ":orange[:material/pending:]",
                    "interrupted": ":orange[:material/pause_circle:]"}.get(status, ":material/help:")
            secs = info.get("seconds")
            if status in ("done", "failed"):
                timing = f" · {secs:.1f} s" if isinstance(secs, (int, float)) else ""
            else:  # a stage that has not ended: its seconds, if any, are those of its previous run
                timing = f" · started {str(info.get('started', '?')).replace('T', ' ')[:19]}"
            st.markdown(f"{icon} **{ui.md(name)}** {status}{timing}")
            if status != "done":
                st.caption(ui.md(current.run.explain(name, manifest) or info.get("error") or ""))

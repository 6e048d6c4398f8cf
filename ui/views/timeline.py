"""Timeline: a training run step by step. Per-class F1 and the size of each error type (matched across steps by
erroranalysis.timeline) beside loss, validation loss, learning rate and grad norm, the training-signal findings
marked; what happened in words; click a step for what it fixed and broke against the step before (the compare
stage), an error type for its examples at each step."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from erroranalysis.report import compare_markdown as compare_report
from erroranalysis_ui.eaui import components as ui
from erroranalysis_ui.eaui import data, labeled, state
from erroranalysis_ui.eaui import timeline as tdata

cfg = ui.config()
st.title("Timeline")
st.caption("Error types across a training run: one run per analyzed step (the Trainer callback or "
           "`erroranalysis watch`), `erroranalysis timeline` prints the same.")

keys = tdata.experiments(cfg.runs_root)
if not keys:
    st.info("No training run here yet: the runs of one are folders `step-000500/`, `step-001000/`, … of an "
            "experiment folder. Make them with `erroranalysis.integrations.attach(trainer, EVAL, "
            f"out=\"{cfg.runs_root}/NAME\")` during training, or `erroranalysis watch OUTPUT_DIR --data EVAL --out "
            f"{cfg.runs_root}/NAME` for checkpoints saved elsewhere.", icon=":material/timeline:")
    st.stop()

if state.get(tdata.EXPERIMENT) not in keys:
    mine = tdata.experiment_of(state.get(state.RUN))
    st.session_state[tdata.EXPERIMENT] = mine if mine in keys else keys[0]
experiment = st.selectbox("Training run", keys, key=tdata.EXPERIMENT,
                          format_func=lambda k: "(runs folder)" if k == tdata.ROOT else k,
                          help="A folder of step runs under the workspace.")
with ui.guard("Each step run must be readable; `erroranalysis timeline` names the one that is not."):
    store = labeled.store(str(cfg.labels_db_of(tdata.first_run(cfg.runs_root, experiment))))
    doc = tdata.timeline(cfg.runs_root, experiment, store)

rows = [r for r in doc["steps"] if "problem" not in r]
if not rows:
    st.warning("None of this training run's steps can be read yet; " + "; ".join(doc["notes"]),
               icon=":material/hourglass_top:")
    st.stop()
steps = [r["step"] for r in rows]
types = {t["type_id"]: t for t in doc["types"]}
last = rows[-1]
generation = doc["task"] == "generation"
c = st.columns(4)
c[0].metric("Steps analyzed", f"{len(rows):,}", border=True)
c[0].caption(f"{steps[0]:,} – {steps[-1]:,}")
c[1].metric("Error types", f"{len(types):,}", border=True)
c[1].caption(f"{sum(any(s['step'] == steps[-1] for s in t['steps']) for t in types.values()):,} at the last step")
if generation:
    c[2].metric("Pass rate", ui.pct(last.get("pass_rate")), border=True)
else:
    c[2].metric("Accuracy", ui.pct(last.get("accuracy")), border=True)
    c[3].metric("Macro F1", ui.pct(last.get("macro_f1")), border=True)
c[2].caption(f"at step {steps[-1]:,}")

# -- what happened --------------------------------------------------------------------------------------------------
st.subheader("What happened", anchor=False)
told = [t for t in doc["types"] if any(e["type_id"] == t["type_id"] for e in doc["events"])]
others = [e for e in doc["events"] if not e["type_id"]]
if not told and not others:
    st.caption("No error type appeared, grew, came back or was fixed between the analyzed steps.")
for t in told:
    st.markdown(f"- {ui.md(t['story'])}")
for e in others:
    st.markdown(f"- {ui.md(e['text'])}.")
steady = len(types) - len(told)
if steady and (told or others):
    st.caption(f"{steady:,} other error type{'s' if steady != 1 else ''} stayed without a notable change.")
for note in doc["notes"]:
    st.caption(f"Note: {ui.md(note)}.")

# -- the chart ------------------------------------------------------------------------------------------------------
if state.get(tdata.STEP) not in steps:
    st.session_state[tdata.STEP] = steps[-1]
if state.get(tdata.TYPE) not in types:
    st.session_state[tdata.TYPE] = next(iter(sorted(types.values(), key=lambda t: -max(
        s["size"] for s in t["steps"]))), {}).get("type_id")
event = st.plotly_chart(tdata.figure(doc, step=state.get(tdata.STEP), type_id=state.get(tdata.TYPE)),
                        key=tdata.CHART, on_select="rerun", selection_mode="points",
                        config={"displaylogo": False, "modeBarButtonsToRemove": ["toImage"]},
                        alt="Per-class F1, failures per error type, loss, learning rate and grad norm against step")
picked_step, picked_type = tdata.selection(event)
if picked_step is not None and (picked_step, picked_type) != state.get(tdata.CHART_SEEN):
    state.put(tdata.CHART_SEEN, (picked_step, picked_type))
    if picked_step in steps:
        st.session_state[tdata.STEP] = picked_step
    if picked_type in types:
        st.session_state[tdata.TYPE] = picked_type
    st.rerun()
st.caption("Click a point: its step opens below with what it fixed and broke; a point on an error type's line "
           "opens that type. ▲ a type appeared or came back, ✕ it was fixed; dotted lines mark the training log's "
           "errors and warnings.")

# -- one step against the one before -------------------------------------------------------------------------------
left, right = st.columns(2, gap="large")
with left:
    step = st.selectbox("Step", steps, key=tdata.STEP, format_func=lambda s: f"{s:,}")
    st.subheader(f"Step {step:,}", anchor=False)
    for e in doc["events"]:
        if e["step"] == step:
            st.markdown(f"- {ui.md(e['text'])}")
    i = steps.index(step)
    if i == 0:
        st.caption("The first analyzed step: nothing to compare it with.")
    else:
        prev = steps[i - 1]
        with ui.guard():
            report = data.comparison(cfg.runs_root, tdata.step_key(experiment, rows[i - 1]["run"]),
                                     [tdata.step_key(experiment, rows[i]["run"])], store)
        comp = report.doc["comparisons"][0]
        st.caption(f"Against step {prev:,}: {compare_report.headline(comp)}")
        m = st.columns(3)
        m[0].metric("Fixed", f"{comp['counts']['fixed']:,}", border=True)
        m[1].metric("Broken", f"{comp['counts']['broken']:,}", border=True)
        acc = comp["overall"]["accuracy"]
        m[2].metric("Accuracy", ui.pct(acc["candidate"]), delta=f"{acc['delta'] * 100:+.1f} pts", border=True)
        f1 = pd.DataFrame([{"class": r["label"], "before": r["f1"]["base"], "after": r["f1"]["candidate"],
                            "change": r["f1"]["delta"], "significant": r["f1"]["significant"]}
                           for r in comp["per_class"]])
        st.dataframe(f1, hide_index=True, column_config={
            "before": st.column_config.NumberColumn(f"F1 at {prev:,}", format="%.3f"),
            "after": st.column_config.NumberColumn(f"F1 at {step:,}", format="%.3f"),
            "change": st.column_config.NumberColumn("Change", format="%+.3f"),
            "significant": st.column_config.CheckboxColumn("95% CI excludes 0")})
        for status in ("fixed", "broken"):
            items = comp["examples"][status]
            if items:
                with st.expander(f"{status.capitalize()} examples ({len(items):,})", expanded=status == "broken"):
                    st.dataframe(pd.DataFrame(items)[["example_id", "label", "base_pred", "candidate_pred", "text"]],
                                 hide_index=True, column_config={
                                     "base_pred": f"Predicted at {prev:,}", "candidate_pred": f"Predicted at {step:,}"})

# -- one error type across steps ------------------------------------------------------------------------------------
with right:
    if not types:
        st.caption("No error types: no step's failures were clustered.")
    else:
        type_id = st.selectbox("Error type", list(types), key=tdata.TYPE,
                               format_func=lambda k: f"{k} · {types[k]['name'][:70]}")
        t = types[type_id]
        st.subheader(f"{t['type_id']} · {t['name']}", anchor=False)
        st.caption(ui.md(t["story"]))
        for occurrence, examples in tdata.type_examples(cfg.runs_root, experiment, t):
            link = occurrence.get("link") or {}
            how = ", ".join(link.get("basis") or []) or "first seen"
            with st.expander(f"Step {occurrence['step']:,} · {occurrence['size']:,} failures · cluster "
                             f"#{occurrence['cluster_id']} · {how}", expanded=occurrence["step"] == step):
                st.caption(ui.md(occurrence["name"]))
                st.dataframe(examples, hide_index=True, column_config={"text": st.column_config.TextColumn(
                    "Text", width="large")})

if doc["findings"]:
    st.subheader("Training signals", anchor=False)
    for f in doc["findings"]:
        st.markdown(f"- **{ui.md(f['severity'])}** {ui.md(f['message'])}")

"""Training: is training loss healthy, is validation loss healthy? The training log of the run's checkpoint (or one
typed in), the findings of erroranalysis.checklist.training (severity, steps, message, advice) and the curves with the
findings marked on them."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from erroranalysis.checklist.training_log import SIGNAL_NAMES
from erroranalysis.core.errors import UserError
from erroranalysis_ui.eaui import charts, data, state
from erroranalysis_ui.eaui import components as ui


def _code(text) -> str:
    """A path as inline code: nothing inside a code span is interpreted, except a backtick."""
    return "`" + str(text).replace("`", "'") + "`"


current = ui.current_run()
ui.header("Training", current, "is training loss healthy? is validation loss healthy?")
ws = current.config.workspace

with ui.guard():
    manifest = data.manifest(current.path)
    copied = data.trainer_state(current.path)  # the checkpoint's log, copied into the run by `erroranalysis run`
# The checkpoint folder the manifest names is read only when it lies inside the app's folders (--allow-path).
model_dir = ws.named_folder(current.path, (manifest.get("model") or {}).get("path"))
where = ", ".join(_code(p) for p in (ws.runs_root, *ws.allowed))

typed = st.text_input(
    "Training log", key=state.TRAINING_LOG,
    placeholder=("the run's copy of its checkpoint's log" if copied else "the checkpoint folder's log" if model_dir
                 else "path to a log") + " · trainer_state.json, a checkpoint or output folder, TensorBoard events, "
                "or a CSV/JSONL log with step and loss",
    help="Leave empty to read the training log the run keeps (or its checkpoint folder's, when the app may read "
         "that folder). A path typed here is read only inside the runs folder or a folder the app was started "
         "with (--allow-path); a relative path is read from the runs folder.")
text = (typed or "").strip()

if text:
    try:
        file, kind = ws.training_log(ws.typed_path(text))
    except UserError as exc:
        ui.problem(exc, f"Logs are read only inside {where}.")
        st.stop()
elif copied is not None:
    file, kind = copied, "trainer_state"
elif model_dir is not None:
    try:
        file, kind = ws.training_log(model_dir)
    except UserError:
        st.info(f"No training log in the checkpoint folder {_code(model_dir)}: no `trainer_state.json`, "
                "`checkpoint-*/trainer_state.json` or TensorBoard events there. Type the path of a log above, or "
                "check one on the command line: `erroranalysis training LOG_OR_CHECKPOINT`.",
                icon=":material/monitor_heart:")
        st.stop()
else:
    reason = ("its checkpoint had no `trainer_state.json` to copy, or the run predates the copy, and the app reads "
              "no checkpoint folder outside its own folders" if (manifest.get("model") or {}).get("path")
              else "its predictions were analyzed without a checkpoint")
    st.info(f"No training log for this run: {reason}. Type the path of a log above (inside {where}), start the app "
            "with `--allow-path CHECKPOINT_DIR`, or check a log anywhere on the command line: "
            "`erroranalysis training LOG_OR_CHECKPOINT`.", icon=":material/monitor_heart:")
    st.stop()

with ui.guard("Fix the log or type another one; `erroranalysis training LOG` says the same on the command line."):
    log, findings, summaries = data.training_log(file, kind)

st.caption(f"Read from {_code(file)} ({kind.replace('_', ' ')})")

# -- findings -------------------------------------------------------------------------------------------------------
counts = {s: sum(f.severity == s for f in findings) for s in ("error", "warning", "info")}
c = st.columns(4)
c[0].metric("Errors", counts["error"], border=True)
c[1].metric("Warnings", counts["warning"], border=True)
c[2].metric("Notes", counts["info"], border=True)
last = max((s["last_step"] for s in summaries.values()), default=None)
c[3].metric("Steps logged", ui.count(last), border=True)

st.subheader("Findings", anchor=False)
if not findings:
    logged = ", ".join(SIGNAL_NAMES.get(name, name) for name in log.signals)
    st.success(f"No problems found in the logged signals ({logged}).", icon=":material/check_circle:")
BADGE = {"error": ("error", "red", ":material/error:"), "warning": ("warning", "orange", ":material/warning:"),
         "info": ("note", "blue", ":material/info:")}


def _steps_text(steps) -> str:
    steps = list(steps)
    if not steps:
        return ""
    shown = ", ".join(f"{s:,}" for s in steps[:8])
    more = f", … ({len(steps):,} steps)" if len(steps) > 8 else ""
    return f"step{'s' if len(steps) > 1 else ''} {shown}{more}"


for f in findings:
    label, color, icon = BADGE.get(f.severity, ("note", "gray", ":material/info:"))
    with st.container(border=True):
        head = st.container(horizontal=True, vertical_alignment="center", gap="small")
        head.badge(label, color=color, icon=icon)
        head.caption(ui.md(_steps_text(f.steps)))
        st.markdown(f"**{ui.md(f.message[:1].upper() + f.message[1:])}**")
        st.caption(f"What to do: {ui.md(f.advice)}")

# -- curves ---------------------------------------------------------------------------------------------------------
st.subheader("Signals", anchor=False)
signals = {name: (s.steps, s.values) for name, s in log.signals.items()}
st.plotly_chart(charts.training_figure(signals, [f.to_dict() for f in findings]),
                config={"displaylogo": False, "modeBarButtonsToRemove": ["toImage"]},
                alt="Training loss, validation loss, grad norm and learning rate against step, findings marked")
st.caption("Markers show the steps each finding names (an × at the top of a panel where the value is NaN or inf); "
           "dotted lines mark the first step of each error or warning. The batch logged at a step is where to look.")

rows = [{"signal": SIGNAL_NAMES.get(name, name), "points": s["points"], "non_finite": s["non_finite"],
         "steps": f"{s['first_step']:,}–{s['last_step']:,}", "first": s["first"], "last": s["last"], "min": s["min"],
         "min_step": s["min_step"]} for name, s in summaries.items()]
st.dataframe(pd.DataFrame(rows), hide_index=True,
             column_config={"signal": "Signal", "points": st.column_config.NumberColumn("Points", format="localized"),
                            "non_finite": st.column_config.NumberColumn("NaN / inf"),
                            "steps": "Steps", "first": st.column_config.NumberColumn("First", format="%.4g"),
                            "last": st.column_config.NumberColumn("Last", format="%.4g"),
                            "min": st.column_config.NumberColumn("Min", format="%.4g"),
                            "min_step": st.column_config.NumberColumn("Min at step", format="localized")})

"""The erroranalysis app: `erroranalysis ui runs/` or `streamlit run ui/app.py -- runs/ [--user NAME] [--open RUN]`.

This file is the router (st.navigation) and the frame around every page: who is using the app (eaui.identity: no
page without an identity), the run picker, and the rule of which files may be read (eaui.workspace: every page
runs confined to it).
Pages under views/ only render; data comes from erroranalysis_ui.eaui.data and .labeled, work from the erroranalysis
library through eaui.actions. (Not pages/: Streamlit would also serve a pages/ folder beside this file as standalone
pages, bypassing this router.)
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

_HERE = Path(__file__).resolve().parent

st.set_page_config(page_title="erroranalysis", page_icon=":material/troubleshoot:", layout="wide",
                   initial_sidebar_state="expanded")

from erroranalysis_ui.eaui import (  # noqa: E402  (after set_page_config)
    components,
    config,
    data,
    identity,
    memory,
    state,
)

if state.CONFIG not in st.session_state:
    st.session_state[state.CONFIG] = config.parse()
cfg = st.session_state[state.CONFIG]
components.style()
st.logo(str(_HERE / "logo.svg"), icon_image=str(_HERE / "icon.svg"), size="large")

who = identity.current(cfg, st.session_state.get(state.USER))
st.session_state[state.IDENTITY] = who
if who.user is None:
    components.sign_in(who)  # the reason, a sign-in button for OIDC; no page, no run names

runs_page = st.Page("views/runs.py", title="Runs", icon=":material/folder_open:", default=True)
pages = {
    "Workspace": [runs_page],
    "Analyze": [
        st.Page("views/overview.py", title="Overview", icon=":material/monitoring:"),
        st.Page("views/confusion.py", title="Confusion matrix", icon=":material/grid_on:"),
        st.Page("views/clusters.py", title="Clusters", icon=":material/bubble_chart:"),
        st.Page("views/slices.py", title="Slices", icon=":material/filter_alt:"),
        st.Page("views/compare.py", title="Compare", icon=":material/compare_arrows:"),
        st.Page("views/timeline.py", title="Timeline", icon=":material/timeline:"),
    ],
    "Labeling": [
        st.Page("views/label.py", title="Label", icon=":material/sell:"),
        st.Page("views/taxonomy.py", title="Taxonomy", icon=":material/account_tree:"),
        st.Page("views/review.py", title="Review", icon=":material/fact_check:"),
    ],
    "Checklist": [
        st.Page("views/training.py", title="Training", icon=":material/monitor_heart:"),
        st.Page("views/data_checks.py", title="Data checks", icon=":material/fact_check:"),
        st.Page("views/training_data.py", title="Training data", icon=":material/dataset:"),
    ],
}
page = st.navigation(pages, expanded=True)  # 13 pages: folded, Streamlit hides the checklist behind "View 3 more"

with st.sidebar:
    if cfg.problem:
        st.error(cfg.problem)
    keys = data.discover(cfg.workspace)
    if state.RUN not in st.session_state:
        wanted = st.query_params.get(state.RUN) or cfg.open_run
        st.session_state[state.RUN] = wanted if wanted in keys else (keys[0] if keys else None)
    if state.PENDING_RUN in st.session_state:
        st.session_state[state.RUN] = st.session_state.pop(state.PENDING_RUN)
    if st.session_state.get(state.RUN) not in keys:
        st.session_state[state.RUN] = keys[0] if keys else None
    st.selectbox("Run", keys, key=state.RUN, placeholder="No runs in this folder", help=f"Runs under {cfg.runs_root}")
    if st.session_state.get(state.RUN) and st.query_params.get(state.RUN) != st.session_state[state.RUN]:
        st.query_params[state.RUN] = st.session_state[state.RUN]  # so the address names the run (shareable)
    components.who_box(who)
    st.caption(f"Workspace `{cfg.runs_root}`  \nLabels `{cfg.labels_db.name}`")

components.show_flash()
with cfg.workspace.confined():
    page.run()
memory.freeze_after_imports()

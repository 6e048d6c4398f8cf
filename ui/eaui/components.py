"""Small rendering helpers shared by the pages: the current run, error boxes, headers, flash messages, styling.

User text is never passed to st.markdown with unsafe_allow_html; `md` escapes Markdown in user text for the places
that render Markdown (labels, captions)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from erroranalysis.core.errors import UserError
from erroranalysis.labels import LabelStore
from erroranalysis_ui.eaui import data, labeled, state
from erroranalysis_ui.eaui.config import AppConfig

# Static CSS only (no user text is ever interpolated here).
_CSS = """
<style>
.block-container {padding-top: 2.2rem; padding-bottom: 3rem; max-width: 1480px;}
h1 {font-weight: 700; letter-spacing: -0.02em;}
h2, h3 {letter-spacing: -0.01em;}
[data-testid="stMetric"] {background: var(--secondary-background-color, #F8FAFC);}
[data-testid="stMetricValue"] {font-weight: 650;}
[data-testid="stSidebarNav"] a span {font-weight: 500;}
.stCaption {color: #64748B;}
</style>
"""


def style() -> None:
    st.markdown(_CSS, unsafe_allow_html=True)


def md(text: object) -> str:
    """Escape user text for st.markdown / labels: no markup, links, HTML or math."""
    s = " ".join(str("" if text is None else text).split())
    for ch in "\\`*_{}[]()#+-.!|~<>$":
        s = s.replace(ch, "\\" + ch)
    return s


@dataclass(frozen=True)
class Current:
    """The run a page works on."""

    config: AppConfig
    key: str
    path: Path

    @property
    def name(self) -> str:
        return self.key

    @property
    def run(self):
        from erroranalysis.rundir import Run

        return Run(self.path)


def config() -> AppConfig:
    return st.session_state[state.CONFIG]


def user() -> str:
    """Who this session is: the identity app.py established (eaui.identity), never a name the page sent."""
    who = state.get(state.IDENTITY)
    if who is None or who.user is None:  # app.py shows no page without one; a callback cannot get here either
        raise UserError("no identity for this session; reload the page.")
    return who.user


def _store_at(db: Path) -> LabelStore:
    cfg = config()
    cfg.workspace.check(db)  # a labels.sqlite that is a symlink out is refused like any file
    return labeled.store(str(db), cfg.read_only, tuple(sorted(cfg.viewers)))


def open_labels() -> LabelStore:
    """The labels store of the current run (the workspace rule picks it: AppConfig.labels_db_of), recording
    changes under this session's identity, with the app's roles (--read-only, --viewers). Raises UserError
    (a damaged database: DamagedError); button callbacks use this, pages use `labels`."""
    cfg = config()
    key = state.get(state.RUN)
    return _store_at(cfg.labels_db_of(cfg.runs_root / key if key else None)).with_user(user())


def labels() -> LabelStore:
    """open_labels for a page: a database that cannot be opened (damaged, refused) is one message, and the page
    stops there."""
    with guard():
        return open_labels()


def labeled_counts(keys) -> dict[str, int]:
    """Accepted labels per run key, each run counted in the database its labels live in."""
    cfg = config()
    out: dict[str, int] = {}
    for key in keys:
        store = _store_at(cfg.labels_db_of(cfg.runs_root / key))
        out[key] = labeled.labeled_per_run(store).get(labeled.run_key(store, cfg.runs_root / key), 0)
    return out


def sign_in(who) -> None:
    """The page a session without an identity sees (eaui.identity): why, and for OIDC a sign-in button per
    provider configured in secrets.toml. Nothing of the workspace is shown. Stops the script."""
    st.title("erroranalysis")
    if who.source == "oidc" and who.refusal and who.refusal.startswith("Sign in"):
        st.info("Sign in to browse the runs and label failures: labels are recorded under your account.",
                icon=":material/login:")
        row = st.container(horizontal=True, gap="small")
        for provider in _oidc_providers():
            label = "Sign in" if provider is None else f"Sign in with {provider}"
            row.button(label, on_click=st.login, args=(provider,) if provider else (), type="primary",
                       icon=":material/login:", key=f"ea_login_{provider or 'default'}")
    else:
        st.error(who.refusal or "No identity for this request.", icon=":material/lock:")
    st.stop()


def _oidc_providers() -> list[str | None]:
    """The providers of secrets.toml's [auth] (named sub-sections), or [None] for the one given at its top."""
    try:
        section = st.secrets["auth"]
        named = [k for k, v in section.items() if hasattr(v, "keys")]
    except Exception:
        named = []
    return named or [None]


def who_box(who) -> None:
    """The sidebar's identity: the "Labeling as" box for a single local user, else the signed-in name (not
    editable), and the role when it forbids writing."""
    from erroranalysis.labels.roles import Access

    cfg = config()
    if who.editable:
        if state.USER not in st.session_state:
            st.session_state[state.USER] = cfg.user
        st.text_input("Labeling as", key=state.USER, help="Every label you make is recorded under this name.")
    else:
        how = "through the login proxy" if who.source == "proxy" else "with your identity provider"
        st.markdown(f":material/account_circle: **{md(who.user)}**")
        st.caption(f"Signed in {how}; every label you make is recorded under this name.")
        if who.source == "oidc":
            st.button("Sign out", on_click=st.logout, icon=":material/logout:", key="ea_logout")
    refusal = Access.of(cfg.read_only, cfg.viewers).refusal(who.user, "the labels")
    if refusal:
        st.caption(":material/visibility: " + ("Read-only: labels can be read here, not changed." if cfg.read_only
                                               else "Viewer: you may read labels, not change them."))


def read_only_note(store: LabelStore) -> None:
    """Say why the write controls are not shown (the store refuses writes itself)."""
    st.caption(f":material/visibility: {md(store.read_only_reason or '')}")


def current_run(required: bool = True) -> Current | None:
    """The selected run; on pages that need one, explain how to pick one and stop when there is none or it is
    unusable."""
    cfg = config()
    key = state.get(state.RUN)
    if not key:
        if required:
            st.info("Pick a run in the sidebar, or on the **Runs** page, to start.", icon=":material/arrow_back:")
            st.page_link("views/runs.py", label="Go to Runs", icon=":material/folder_open:")
            st.stop()
        return None
    try:
        return Current(cfg, key, data.run_dir(cfg.workspace, key))
    except UserError as exc:
        if required:
            problem(exc)
            st.stop()
        return None


def switch(page: str) -> None:
    """Go to another page, keeping the run in the address."""
    run = state.get(state.RUN)
    st.switch_page(page, query_params={state.RUN: run} if run else {})


def problem(exc: BaseException, hint: str | None = None) -> None:
    """Show a library error as one clear message (never a traceback)."""
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    st.error(message, icon=":material/error:")
    if hint:
        st.caption(hint)


@contextmanager
def guard(hint: str | None = None) -> Iterator[None]:
    """Show a UserError raised inside the block as a message and stop the page there."""
    try:
        yield
    except UserError as exc:
        problem(exc, hint)
        st.stop()


def header(title: str, current: Current | None = None, caption: str | None = None) -> None:
    st.title(title)
    bits = []
    if current is not None:
        bits.append(f"Run **{md(current.key)}**")
    if caption:
        bits.append(caption)
    if bits:
        st.caption(" · ".join(bits))
    if current is not None:
        stage_notice(current)


def stage_notice(current: Current) -> None:
    """A warning above the page when a stage of the run is not done: what the page shows may be missing, or from
    before the stage last started; rundir's message says which and the command that resumes it."""
    try:
        messages = data.stage_messages(current.path)
    except UserError:
        return  # the page shows the manifest's own problem
    for message in messages:
        st.warning(md(message[:1].upper() + message[1:]) + ". The Runs page lists every stage.",
                   icon=":material/warning:")


def show_flash() -> None:
    """Messages queued by the last action: successes as a toast, problems inline where they are read."""
    for kind, text in state.pop_flash():
        if kind == "success":
            st.toast(text, icon=":material/check_circle:")
        elif kind == "error":
            st.error(text, icon=":material/error:")
        else:
            {"info": st.info, "warning": st.warning}.get(kind, st.info)(text)


def pct(value, digits: int = 1) -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "–"
    return "–" if v != v else f"{v:.{digits}%}"


def count(value) -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "–"
    return "–" if v != v else f"{int(v):,}"


def ci_text(ci) -> str | None:
    try:
        lo, hi = ci
        return f"95% CI {float(lo):.1%} – {float(hi):.1%}"
    except (TypeError, ValueError):
        return None

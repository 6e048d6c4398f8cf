"""What the headless page tests share (streamlit.testing's AppTest; the real-browser tests share tests/browser.py):
the app's settings for a test, a session of ui/app.py opened on a run and a page, and what a page shows as text.

    app_env(monkeypatch, workspace, tmp_path / "labels.sqlite")     # ERRORANALYSIS_* as `erroranalysis ui` sets them
    at = open_app("label", run="news")                              # the Runs page, then views/label.py
    assert "Error types" in texts(at)
"""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from erroranalysis_ui.eaui import state

APP = Path(__file__).resolve().parent.parent / "ui" / "app.py"
TIMEOUT = 120  # seconds one script run may take: a page reads and caches the run on its first render
SETTINGS = ("RUNS", "LABELS_DB", "USER", "OPEN", "ALLOW_PATHS", "TRUSTED_USER_HEADER", "PROXY_SECRET_FILE",
            "READ_ONLY", "VIEWERS")  # the ERRORANALYSIS_* variables the app reads (eaui.config)


def app_env(monkeypatch, runs, labels_db=None, *, user: str | None = "tester", **settings) -> None:
    """The app's settings, as `erroranalysis ui` passes them: the runs folder `runs`, the labels database
    `labels_db` (None: the workspace's own), `user` (None: none given) and each of `settings` (allow_paths=...,
    read_only="1"); every other setting is cleared, so nothing leaks from the environment or another test."""
    given = {"RUNS": runs, "LABELS_DB": labels_db, "USER": user, **{k.upper(): v for k, v in settings.items()}}
    for name in SETTINGS:
        if given.get(name) is None:
            monkeypatch.delenv(f"ERRORANALYSIS_{name}", raising=False)
        else:
            monkeypatch.setenv(f"ERRORANALYSIS_{name}", str(given[name]))


def open_app(page: str | None = None, run: str | None = None, *, session: dict | None = None, setup=None) -> AppTest:
    """A new session of the app: `run` picked (None: the app's own choice) and `session` set (eaui.state names ->
    values), `setup(at)` for anything else (secrets, st.user), the first page rendered, then views/<page>.py. An
    exception in any of it fails the test."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    if run is not None:
        at.session_state[state.RUN] = run
    for key, value in (session or {}).items():
        at.session_state[getattr(state, key)] = value
    if setup is not None:
        setup(at)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at if page is None else go(at, page)


def go(at: AppTest, page: str) -> AppTest:
    """`at` switched to views/<page>.py and rendered, without an exception."""
    at.switch_page(f"views/{page}.py").run()
    assert not at.exception, (page, [e.value for e in at.exception])
    return at


TEXT_ELEMENTS = ("title", "header", "subheader", "markdown", "caption", "text", "error", "warning", "info",
                 "success", "toast")


def texts(at: AppTest, *, plain: bool = False) -> str:
    """Everything the page shows as text, one element a line: titles, headings, Markdown, captions, messages and
    toasts, each table as CSV, and the Markdown inside expanders; as the page wrote it (user text with Markdown's
    escapes), or `plain`, the escaping backslashes removed."""
    parts = [str(e.value) for kind in TEXT_ELEMENTS for e in getattr(at, kind)]
    parts += [f.value.to_csv() if hasattr(f.value, "to_csv") else str(f.value) for f in at.dataframe]
    parts += [str(m.value) for exp in at.expander for m in exp.markdown]
    text = "\n".join(parts)
    return text.replace("\\", "") if plain else text

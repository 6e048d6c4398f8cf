"""The Checks page (issue 7): the checks stage's findings, the probable label issues, the doctor's report."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_runs import commit
from streamlit.testing.v1 import AppTest
from ui_fixtures import make_run

from erroranalysis.rundir import Run
from erroranalysis.stages import checks_run
from erroranalysis_ui.eaui import state

UI = Path(__file__).resolve().parent.parent / "ui"



@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("ws")
    make_run(root / "checked", n=120, n_failures=30)
    checks_run(root / "checked", embedder="none")
    commit(Run.open(root / "checked"), "doctor", doctor_md="# Doctor\n\nThe training loss is still falling.\n",
           doctor_json={})
    make_run(root / "unchecked", n=60, n_failures=10, seed=1, with_clusters=False)
    return root


def open_page(workspace, tmp_path, monkeypatch, run: str) -> AppTest:
    monkeypatch.setenv("ERRORANALYSIS_RUNS", str(workspace))
    monkeypatch.setenv("ERRORANALYSIS_LABELS_DB", str(tmp_path / "labels.sqlite"))
    monkeypatch.delenv("ERRORANALYSIS_OPEN", raising=False)
    at = AppTest.from_file(str(UI / "app.py"), default_timeout=120)
    at.session_state[state.RUN] = run
    at.run()
    return at.switch_page("views/checks.py").run()


def test_findings_suspects_and_doctor_report(workspace, tmp_path, monkeypatch):
    at = open_page(workspace, tmp_path, monkeypatch, "checked")
    assert not at.exception, [e.value for e in at.exception]
    markdown = " ".join(m.value for m in at.markdown)
    assert "label\\_issues" in markdown or "label_issues" in markdown
    assert any("probably wrong" in c.value for c in at.caption)
    assert "The training loss is still falling." in markdown


def test_a_run_without_checks_says_how_to_compute_them(workspace, tmp_path, monkeypatch):
    at = open_page(workspace, tmp_path, monkeypatch, "unchecked")
    assert not at.exception
    assert any("erroranalysis checks" in i.value for i in at.info)

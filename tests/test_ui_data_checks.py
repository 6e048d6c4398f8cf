"""The Data checks page (issue 7): the checks stage's findings, the probable label issues, the doctor's report."""

from __future__ import annotations

import pytest
from app_session import app_env, open_app
from conftest import eval_rows, write_jsonl
from streamlit.testing.v1 import AppTest
from ui_fixtures import FAKE, make_run

from erroranalysis.rundir import Run
from erroranalysis.rundir.readers import read_checks_report
from erroranalysis.sources.table import DataOptions
from erroranalysis.stages import run_doctor


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tiny_checkpoint):
    """checked: `erroranalysis doctor` on the tiny checkpoint (no overfit step), which writes the checks and
    doctor.md into its run; unchecked: a run whose checks stage never ran."""
    root = tmp_path_factory.mktemp("ws")
    data = write_jsonl(tmp_path_factory.mktemp("data") / "eval.jsonl", eval_rows())
    run_doctor(tiny_checkpoint, data, root / "checked", data_opts=DataOptions(id_column="id"), overfit=None,
               embed=FAKE)
    make_run(root / "unchecked", n=60, n_failures=10, seed=1, with_checks=False, with_clusters=False)
    return root


def open_page(workspace, tmp_path, monkeypatch, run: str) -> AppTest:
    app_env(monkeypatch, workspace, tmp_path / "labels.sqlite", user=None)
    return open_app("data_checks", run)


def test_findings_suspects_and_doctor_report(workspace, tmp_path, monkeypatch):
    at = open_page(workspace, tmp_path, monkeypatch, "checked")
    assert not at.exception, [e.value for e in at.exception]
    markdown = " ".join(m.value.replace("\\", "") for m in at.markdown)
    report = read_checks_report(Run.open(workspace / "checked"))
    assert report["findings"]
    for finding in report["findings"]:
        assert f"{finding['check']}: {finding['message']}" in markdown.replace("**", "")
    assert any("probably wrong" in c.value for c in at.caption)
    doctor = (workspace / "checked" / "doctor.md").read_text(encoding="utf-8")
    assert at.expander[0].label == "Doctor's report (doctor.md)"
    assert doctor.strip() in [m.value.strip() for m in at.markdown]


def test_a_run_without_checks_says_how_to_compute_them(workspace, tmp_path, monkeypatch):
    at = open_page(workspace, tmp_path, monkeypatch, "unchecked")
    assert not at.exception
    assert any("erroranalysis data-checks" in i.value for i in at.info)


def test_a_generation_run_shows_contamination_split_metrics(tmp_path, monkeypatch):
    """A generation run checked against SFT rows: the page shows the clean/contaminated metrics and the matched rows."""
    from typer.testing import CliRunner

    from erroranalysis.cli.app import app
    from erroranalysis.stages import checks_run
    from erroranalysis.stages.data_checks import CheckParams

    root = tmp_path / "ws"
    words = [f"w{i}" for i in range(400)]
    train = [{"prompt": " ".join(words[i:i + 20]), "completion": "yes"} for i in range(0, 200, 20)]
    rows = [{"id": f"q{i}", "prompt": train[i]["prompt"] if i < 3 else " ".join(words[200 + i * 15:215 + i * 15]),
             "output": "yes" if i < 3 else "no", "reference": "yes"} for i in range(10)]
    made = CliRunner().invoke(app, ["analyze", "--task", "generation", "--predictions",
                                    str(write_jsonl(tmp_path / "o.jsonl", rows)), "--out", str(root / "gen"),
                                    "--id-column", "id", "--output-checks", "exact", "--no-data-checks",
                                    "--no-cluster", "--no-slices"])
    assert made.exit_code == 0, made.output
    checks_run(root / "gen", CheckParams(train=str(write_jsonl(tmp_path / "sft.jsonl", train)), embedder="none"))
    app_env(monkeypatch, root, tmp_path / "labels.sqlite", user=None)
    at = open_app("data_checks", "gen")
    assert not at.exception, [e.value for e in at.exception]
    assert any("3 of 10 eval examples share a 13-gram" in c.value for c in at.caption)
    split = at.dataframe[0].value
    assert split["examples"].tolist() == ["all", "clean", "contaminated"]
    assert split["pass rate"].tolist() == ["30.0%", "0.0%", "100.0%"]
    assert at.dataframe[1].value["train_row"].tolist() == [0, 1, 2]

"""The Timeline page: headless (AppTest) on step runs made by the real stages with planted error types, and in a real
browser on the runs a real Trainer fine-tune wrote through the callback (click a step on the chart)."""

from __future__ import annotations

from pathlib import Path

import pytest
from app_session import app_env, open_app, texts
from streamlit.testing.v1 import AppTest
from timeline_fixtures import eval_frame, planted_experiment, predictions_at

from erroranalysis import stages
from erroranalysis_ui.eaui import timeline as tdata


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("tl_ws")
    planted_experiment(root)
    return root


@pytest.fixture()
def start(workspace, monkeypatch, tmp_path):
    app_env(monkeypatch, workspace)

    def _start() -> AppTest:
        return open_app("timeline")

    return _start


def changed(before: int, after: int, kind: str) -> int:
    frame = eval_frame()
    a, b = predictions_at(frame, before)["correct"], predictions_at(frame, after)["correct"]
    return int((~a & b).sum()) if kind == "fixed" else int((a & ~b).sum())


def select(at, label: str):
    return next(s for s in at.selectbox if s.label == label)


def test_the_page_tells_what_happened_and_opens_the_last_step(start):
    at = start()
    assert at.title[0].value == "Timeline"
    body = texts(at)
    assert "was fixed at step 300" in body and "appeared at step 200" in body
    assert "the learning rate dropped at 250" in body
    assert select(at, "Training run").value == "exp" and select(at, "Step").value == 300
    assert "Step 300" in [s.value for s in at.subheader]
    assert any("Against step 200" in c.value for c in at.caption)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Steps analyzed"] == "3" and metrics["Error types"] == "3"
    assert metrics["Fixed"] == str(changed(200, 300, "fixed"))  # the weather group (48) and scattered ones


def test_picking_a_step_and_an_error_type(start, workspace):
    at = start()
    select(at, "Step").set_value(200).run()
    assert not at.exception
    assert "Step 200" in [s.value for s in at.subheader]
    assert {m.label: m.value for m in at.metric}["Broken"] == str(changed(100, 200, "broken"))  # cooking, and a few
    doc = stages.build_timeline(workspace / "exp")
    cooking = next(t for t in doc["types"] if t["steps"][0]["step"] == 200)
    select(at, "Error type").set_value(cooking["type_id"]).run()
    assert not at.exception
    assert any(s.value.startswith(f"{cooking['type_id']} · ") for s in at.subheader)
    labels = [e.label for e in at.expander]
    assert any(label.startswith("Step 200 · 48 failures") for label in labels)
    assert any(label.startswith("Step 300 · 48 failures") and "shared failures" in label for label in labels)
    frames = [df.value for df in at.dataframe]
    assert any("cooking-00" in set(f.get("example_id", [])) for f in frames)


def test_a_workspace_without_step_runs_says_how_to_make_them(tmp_path, monkeypatch):
    from ui_fixtures import make_run

    make_run(tmp_path / "plain", n=60, n_failures=12)
    app_env(monkeypatch, tmp_path)
    at = open_app("timeline")
    assert "No training run here yet" in at.info[0].value and "erroranalysis watch" in at.info[0].value


def test_the_figure_is_clickable_by_step_and_type(workspace):
    doc = stages.build_timeline(workspace / "exp")
    fig = tdata.figure(doc, step=200, type_id=doc["types"][0]["type_id"])
    titles = [a.text for a in fig.layout.annotations]
    assert titles[:2] == ["F1 per class", "failures per error type"] and "learning rate" in titles
    typed = [t for t in fig.data if t.customdata is not None and len(t.customdata) and t.customdata[0][1]]
    assert {tuple(c) for t in typed for c in t.customdata} >= {(300, doc["types"][0]["type_id"])}
    event = {"selection": {"points": [{"customdata": [200, "T2"]}]}}
    assert tdata.selection(event) == (200, "T2") and tdata.selection({}) == (None, None)
    assert tdata.experiments(workspace) == ["exp"] and tdata.experiment_of("exp/step-000100") == "exp"
    assert tdata.experiment_of("exp/other") is None


# -- a real browser on a real callback run --------------------------------------------------------------------------


@pytest.mark.slow
def test_timeline_page_in_a_real_browser_on_a_real_callback_run(tmp_path):
    pytest.importorskip("playwright")
    from browser import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, free_port, settle, start_app, stop
    from test_trainer_callback import FAST, make_trainer
    from test_ui_browser import _shot

    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (make browsers)")
    from conftest import eval_rows, write_jsonl
    from playwright.sync_api import sync_playwright

    from erroranalysis.integrations import attach
    from erroranalysis.sources.table import DataOptions

    data = write_jsonl(tmp_path / "eval.jsonl", eval_rows(60))
    trainer = make_trainer(tmp_path)
    attach(trainer, data, out=tmp_path / "runs" / "exp", data=DataOptions(id_column="id"), after=FAST,
           infer=stages.InferParams(max_length=32))
    trainer.train()

    proc = start_app(tmp_path / "runs", "--user", "e2e", port=free_port())
    try:
        address = proc.stdout.readline().strip().split(": ", 1)[1]
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_context(viewport={"width": 1500, "height": 1500}).new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(address)
            page.get_by_role("heading", name="Runs", level=1).wait_for()
            settle(page)
            page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name="Timeline", exact=True).click()
            page.get_by_role("heading", name="Timeline", level=1).wait_for()
            page.wait_for_selector('[data-testid="stPlotlyChart"] .main-svg')
            settle(page)
            page.get_by_role("heading", name="Step 6").wait_for()
            # click the first error type's point at step 4 on the chart: the step below follows
            point = page.evaluate(
                """() => {
                    const gd = document.querySelector('[data-testid="stPlotlyChart"] .js-plotly-plot');
                    const i = gd.data.findIndex(t => t.customdata && t.customdata.length && t.customdata[0][1]);
                    const trace = gd.data[i], j = trace.x.indexOf(4);
                    const xa = gd._fullLayout[trace.xaxis.replace('x', 'xaxis')];
                    const ya = gd._fullLayout[trace.yaxis.replace('y', 'yaxis')];
                    const box = gd.getBoundingClientRect();
                    return [box.left + xa._offset + xa.d2p(trace.x[j]), box.top + ya._offset + ya.d2p(trace.y[j])];
                }""")
            page.mouse.move(point[0], point[1])
            page.wait_for_timeout(300)
            page.mouse.click(point[0], point[1])
            page.get_by_role("heading", name="Step 4").wait_for()
            settle(page)
            assert page.get_by_text("Against step 2:").first.is_visible()
            _shot(page, "9-timeline")
            browser.close()
    finally:
        stop(proc)

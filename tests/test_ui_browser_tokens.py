"""One real-browser pass (Debian's Chromium through playwright) over a token-classification run: every page opens
without a traceback, and the Clusters page draws the exemplar spans highlighted in their sentences."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, free_port, settle, start_app, stop
from token_fixtures import build_tiny_token_classifier, write_sentences

pytestmark = pytest.mark.slow

PAGES = {"Runs": "Runs", "Overview": "Overview", "Confusion matrix": "Confusion matrix", "Clusters": "Clusters",
         "Slices": "Slices", "Compare": "Compare", "Label": "Label", "Taxonomy": "Taxonomy",
         "Review": "Review suggestions", "Training": "Training", "Data checks": "Data checks"}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    from erroranalysis import stages
    from erroranalysis.sources.table import DataOptions

    pytest.importorskip("playwright")
    folder = tmp_path_factory.mktemp("tokbrowser")
    model = build_tiny_token_classifier(folder / "model")
    data = write_sentences(folder / "eval.jsonl", n=40)
    stages.run_token_classification(model, data, folder / "runs" / "ner", data_opts=DataOptions(id_column="id"),
                                    after=stages.AfterParams(cluster=stages.ClusterParams(layout="pca")))
    return folder / "runs"


def test_every_page_of_a_token_run_opens_in_chromium(workspace, tmp_path):
    from playwright.sync_api import sync_playwright

    port = free_port()
    proc = start_app(workspace, "--user", "e2e", "--labels-db", tmp_path / "labels.sqlite", port=port)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1500})
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(f"http://localhost:{port}/?run=ner")
            page.get_by_role("heading", name="Runs", level=1).wait_for()
            settle(page)
            crashes = {}
            for link, heading in PAGES.items():
                if link != "Runs":
                    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=link, exact=True).click()
                    page.get_by_role("heading", name=heading, level=1).wait_for()
                    settle(page, 300)
                boxes = [b.inner_text()[:300] for b in page.locator('[data-testid="stException"]').all()]
                body = page.locator("body").inner_text()
                if boxes or "Traceback" in body:
                    crashes[link] = boxes or [body[body.index("Traceback"):][:300]]
                if link == "Clusters":
                    main = page.locator('[data-testid="stMain"]').inner_text()
                    assert "gold" in main and "predicted" in main, main[:2000]
            browser.close()
    finally:
        stop(proc)
    assert not crashes, crashes

"""Every app page on a real multi-label run and a real regression run (tiny checkpoints from real configs, the real
stages): headless with AppTest, then once in Chromium. The Overview shows each task's own view."""

from __future__ import annotations

from pathlib import Path

import pytest
from app_session import app_env, go, open_app, texts
from task_fixtures import ML_LABELS, build_head, multilabel_rows, regression_rows

PAGES = {"runs": "Runs", "overview": "Overview", "confusion": "Confusion matrix", "clusters": "Clusters",
         "slices": "Slices", "compare": "Compare", "label": "Label", "taxonomy": "Taxonomy",
         "review": "Review suggestions", "training": "Training", "data_checks": "Data checks"}
SAYS = {("multilabel", "overview"): ["Subset accuracy", "Hamming loss", "Most missed labels", "Per label"],
        ("multilabel", "confusion"): ["Missed (FN)", "rows are gold labels missed"],
        ("multilabel", "label"): ["missed", "spurious"],
        ("multilabel", "clusters"): ["Missed: ", "Spurious: "],
        ("regression", "clusters"): ["Mean error (prediction - gold)"],
        ("regression", "overview"): ["MAE", "Residuals", "worst decile of |error|", "By gold range"],
        ("regression", "data_checks"): ["regression"]}


def task_workspace(root: Path) -> Path:
    """runs/multilabel and runs/regression, made by `ea.run` with every stage (PCA in place of UMAP)."""
    import erroranalysis as ea

    runs = root / "runs"
    cluster = {"reducer": "pca", "layout": "pca", "min_cluster_size": 3}
    ml = build_head(root / "ml", labels=ML_LABELS, problem_type="multi_label_classification", seed=3)
    ea.run(ml, multilabel_rows(60), out=runs / "multilabel", id="id", infer={"max_length": 64}, cluster=cluster)
    rg = build_head(root / "rg", num_labels=1, problem_type="regression", seed=5)
    ea.run(rg, regression_rows(60), out=runs / "regression", id="id", infer={"max_length": 64}, cluster=cluster)
    return runs


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return task_workspace(tmp_path_factory.mktemp("tasks"))


@pytest.mark.parametrize("kind", ["multilabel", "regression"])
def test_every_page_opens_on_each_task(workspace, kind, tmp_path, monkeypatch):
    app_env(monkeypatch, workspace, tmp_path / "labels.sqlite")
    at = open_app(run=kind)
    for page, title in PAGES.items():
        go(at, page)
        shown = texts(at, plain=True) + "\n" + "\n".join(f"{m.label} {m.value}" for m in at.metric)
        assert "Traceback" not in shown, page
        assert at.title and at.title[0].value == title, page
        for words in SAYS.get((kind, page), []):
            assert words in shown, (kind, page, words)


@pytest.mark.slow
def test_every_page_in_chromium(workspace, tmp_path):
    from browser import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, free_port, settle, start_app, stop

    pytest.importorskip("playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (make browsers)")
    from playwright.sync_api import sync_playwright

    links = {"Runs": "Runs", "Overview": "Overview", "Confusion matrix": "Confusion matrix", "Clusters": "Clusters",
             "Slices": "Slices", "Compare": "Compare", "Label": "Label", "Taxonomy": "Taxonomy",
             "Review": "Review suggestions", "Training": "Training", "Data checks": "Data checks"}
    port = free_port()
    proc = start_app(workspace, "--user", "e2e", "--labels-db", tmp_path / "labels.sqlite", port=port)
    crashes = {}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1400})
            page.set_default_timeout(TIMEOUT_MS)
            for run in ("multilabel", "regression"):
                page.goto(f"http://localhost:{port}/?run={run}")
                page.get_by_role("heading", name="Runs", level=1).wait_for()
                settle(page)
                for link, title in links.items():
                    if link != "Runs":
                        page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=link,
                                                                                 exact=True).click()
                        page.get_by_role("heading", name=title, level=1).wait_for()
                        settle(page, 300)
                    found = [b.inner_text()[:300] for b in page.locator('[data-testid="stException"]').all()]
                    if "Traceback" in page.locator("body").inner_text():
                        found.append("Traceback")
                    if found:
                        crashes[(run, link)] = found
                page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name="Overview", exact=True).click()
                page.wait_for_selector('[data-testid="stPlotlyChart"] .main-svg')
                body = page.locator("body").inner_text()
                assert ("Hamming loss" if run == "multilabel" else "Residuals") in body
            browser.close()
    finally:
        stop(proc)
    assert not crashes, crashes

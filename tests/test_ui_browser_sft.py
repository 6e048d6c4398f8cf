"""The Training data page in a real browser (Debian chromium through playwright) on a real sft-check run: it opens
without a traceback, shows the findings, and paints the trained spans with a background; every other page opens
on that run (which has no predictions) with a message, not a crash."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, free_port, settle, start_app, stop
from sft_fixtures import CLEAN_MESSAGES, conversation, save_tokenizer, write_jsonl

pytestmark = pytest.mark.slow

SCREENSHOTS = Path(__file__).parent / "screenshots"
OTHER_PAGES = {"Overview": "Overview", "Confusion matrix": "Confusion matrix", "Clusters": "Clusters",
               "Slices": "Slices", "Label": "Label", "Training": "Training", "Data checks": "Data checks"}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from erroranalysis import stages
    from erroranalysis.sft import SftParams

    pytest.importorskip("playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (make browsers)")
    root = tmp_path_factory.mktemp("ws") / "runs"
    inputs = tmp_path_factory.mktemp("inputs")
    rows = CLEAN_MESSAGES + [{"messages": conversation(a="")}, {"messages": conversation(a="Paris. " * 30)}]
    stages.sft_check(save_tokenizer(inputs / "tok", generation=True), write_jsonl(inputs / "train.jsonl", rows),
                     root / "sft", SftParams(mode="assistant-only", max_length=60))
    port = free_port()
    proc = start_app(root, "--user", "e2e", "--labels-db", inputs / "labels.sqlite", "--open", "sft", port=port)
    yield f"http://localhost:{port}"
    stop(proc)


@pytest.fixture(scope="module")
def page(app):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1600})
        pg = context.new_page()
        pg.set_default_timeout(TIMEOUT_MS)
        yield pg
        context.close()
        browser.close()


def _goto(page, link: str, heading: str) -> None:
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=link, exact=True).click()
    page.get_by_role("heading", name=heading, level=1).wait_for()
    settle(page, 400)


def _problems(page) -> list[str]:
    found = [box.inner_text()[:300] for box in page.locator('[data-testid="stException"]').all()]
    body = page.locator("body").inner_text()
    return found + ([body[body.index("Traceback"):][:300]] if "Traceback" in body else [])


def test_training_data_page_highlights_trained_spans(app, page):
    page.goto(f"{app}/?run=sft")
    page.get_by_role("heading", name="Runs", level=1).wait_for()
    settle(page)
    _goto(page, "Training data", "Training data")
    assert not _problems(page)
    body = page.locator("body").inner_text()
    assert "Findings by kind" in body and "empty_answer" in body and "answer_truncated" in body
    trained = page.get_by_text("The capital of France is Paris.<|im_end|>", exact=True).first
    trained.wait_for()
    colour = trained.evaluate("e => getComputedStyle(e).backgroundColor")
    assert colour not in ("rgba(0, 0, 0, 0)", "transparent"), colour
    struck = page.locator("del, s").first  # text cut by max_length, struck through
    assert struck.count() and "Paris." in struck.inner_text()
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "training-data.png"), full_page=True)


def test_other_pages_on_an_sft_run_say_what_is_missing(app, page):
    page.goto(f"{app}/?run=sft")
    page.get_by_role("heading", name="Runs", level=1).wait_for()
    settle(page)
    crashes = {}
    for link, heading in OTHER_PAGES.items():
        _goto(page, link, heading)
        if _problems(page):
            crashes[link] = _problems(page)
    assert not crashes, crashes

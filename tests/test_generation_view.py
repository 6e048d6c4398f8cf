"""Generation runs presented as generation runs (issue 33, section 2): `show`, `show --json`, the HTML report and
the app lead with each check's pass rate, the failure modes with an exemplar, per task or filter, stop reasons and
lengths against the limit; a confusion matrix only with a label column; and they say why a run has no clusters.

The runs are made by the real stages: outputs made elsewhere through `stages.analyze("generation", ...)` (a JSONL of
prompts and outputs with planted failure modes, as a vLLM dump of JSON extraction is), and a generation run of the
tiny causal LM of tests/test_generation.py over JSON-label prompts (a label column, max_new_tokens 8). Only the
embedder is faked (tests/ui_fixtures.py's FakeEmbedder, saved as a vectors file), with PCA in place of UMAP."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import write_jsonl
from typer.testing import CliRunner

from erroranalysis import stages
from erroranalysis.cli.app import app
from erroranalysis.report import GENERATION_SECTIONS
from erroranalysis.rundir import Run
from erroranalysis.sources.table import DataOptions

SCHEMA = json.dumps({"type": "object", "properties": {"name": {"type": "string"}, "total": {"type": "number"}},
                     "required": ["name", "total"], "additionalProperties": False})
TOPICS = ("invoice", "order", "refund", "receipt")
NO_STAGES = stages.AfterParams(checks=None, slices=None, cluster=None)


def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def extraction_rows(n: int = 60) -> list[dict]:
    """JSON extraction outputs as a serving stack dumps them: every sixth prefixed with prose, every sixth cut off at
    the token limit (stop_reason length), every sixth with a renamed key; the rest right. Two tasks."""
    rows = []
    for i in range(n):
        name, total = f"Customer {i}", i * 10
        right = json.dumps({"name": name, "total": total})
        output, stop, tokens = {0: (f"Sure! Here is the JSON you asked for: {right}", "eos", 22),
                                1: (right[:14], "length", 16),
                                2: (json.dumps({"customer": name, "total": total}), "eos", 13)}.get(
                                    i % 6, (right, "eos", 12))
        rows.append({"id": f"r{i:02d}", "prompt": f"Extract the {TOPICS[i % 4]} as JSON: {name} paid {total}.",
                     "output": output, "schema": SCHEMA, "stop_reason": stop, "n_output_tokens": tokens,
                     "task": "extract" if i < 40 else "extract-long"})
    return rows


def cluster(run_dir: Path, **params) -> dict:
    from ui_fixtures import embeddings_file

    return stages.cluster_run(run_dir, embedder=str(embeddings_file(run_dir)), reducer="pca", layout="pca", **params)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """runs/extraction (clustered), runs/refusals (every failing output the same sentence; clustered by embedding alone,
    none found),
    runs/filters (one document per filter, two filters; not clustered), runs/labels (the tiny LM's run, a label
    column)."""
    from ui_fixtures import make_generation_run, tiny_causal_lm

    root = tmp_path_factory.mktemp("genview")
    runs = root / "runs"
    inputs = root / "inputs"
    inputs.mkdir()
    opts = DataOptions(id_column="id")
    made = {}
    made["extraction"] = stages.analyze("generation", write_jsonl(inputs / "extraction.jsonl", extraction_rows()),
                                        runs / "extraction",
                                        stages.Reading(data=opts), after=NO_STAGES).path
    cluster(made["extraction"], min_cluster_size=3, error_aware=False)
    refusals = [{"id": f"q{i}", "prompt": f"Give the {TOPICS[i % 4]} {i} as JSON.", "schema": SCHEMA,
                 "output": "I can't help with that." if i < 25 else json.dumps({"name": "x", "total": i})}
                for i in range(30)]
    made["refusals"] = stages.analyze("generation", write_jsonl(inputs / "refusals.jsonl", refusals), runs / "refusals",
                                        stages.Reading(data=opts), after=NO_STAGES).path
    cluster(made["refusals"], error_aware=False, failure_modes=False)  # by embedding alone: identical, none found
    docs = [{"id": f"d{i}:{f}", "prompt": f"What is {i} + {i}?", "output": f"{2 * i}" if f == "flexible" or i % 3
             else "[invalid]", "reference": str(2 * i), "filter": f, "task": "sums"}
            for i in range(20) for f in ("strict", "flexible")]
    made["filters"] = stages.analyze("generation", write_jsonl(inputs / "filters.jsonl", docs), runs / "filters",
                                        stages.Reading(data=opts), after=NO_STAGES).path
    made["labels"] = make_generation_run(runs / "labels", tiny_causal_lm(root / "lm")).path
    return made


# -- metrics.json: what is added, what stays --------------------------------------------------------------------


def test_metrics_add_failure_modes_lengths_and_groups_and_keep_the_old_keys(runs):
    checks = Run.open(runs["extraction"]).metrics()["output_checks"]
    for key in ("n", "n_passed", "n_failed", "pass_rate", "per_check", "per_label", "per_stop_reason",
                "failure_reasons", "loss"):  # what other code reads stays
        assert key in checks
    assert checks["n_failed"] == 30 and checks["label_column"] is False
    modes = {m["reason"]: m for m in checks["failure_reasons"]}
    assert set(modes) == {"json: text before the JSON", "json: cut off at max_new_tokens",
                          "json_schema: required"}  # not "json_schema: no JSON to validate" or "length: cut off" again
    preds = Run.open(runs["extraction"]).predictions()
    assert preds["failure_reason"].str.contains("no JSON to validate").sum() == 10  # the row still says it
    assert all(m["count"] == 10 and m["share_of_failures"] == pytest.approx(1 / 3) for m in modes.values())
    cut = modes["json: cut off at max_new_tokens"]["exemplar"]
    assert cut["example_id"] == "r01" and cut["output"] == '{"name": "Cust'
    assert modes["json: text before the JSON"]["exemplar"]["output"].startswith("Sure! Here is")
    length = checks["output_length"]
    assert length["limit"] is None and length["stopped_by_length"] == 10 and length["max"] == 22
    assert {r["stop_reason"]: r["mean_output_tokens"] for r in checks["per_stop_reason"]} == {"eos": 14.2,
                                                                                               "length": 16.0}
    groups = {r["group"]["task"]: r for r in checks["per_group"]}
    assert checks["group_columns"] == ["task"] and groups["extract"]["n"] == 40
    assert groups["extract-long"]["pass_rate"] == 11 / 20


def test_a_run_made_here_measures_lengths_against_max_new_tokens(runs):
    checks = Run.open(runs["labels"]).metrics()["output_checks"]
    length = checks["output_length"]
    preds = Run.open(runs["labels"]).predictions()
    assert length["limit"] == 8 and length["at_limit"] == int((preds["n_output_tokens"] >= 8).sum())
    assert checks["label_column"] is True


# -- show -------------------------------------------------------------------------------------------------------


def test_show_leads_a_generation_run_with_its_checks_and_failure_modes(runs):
    shown = cli("show", runs["extraction"])
    assert shown.exit_code == 0, shown.output
    text = shown.output
    assert "passed every check: 30 of 60 (50.0%)" in text
    assert re.search(r"json_schema\s*│\s*60\s*│\s*40\s*│\s*66\.7%", text)  # applied, passed, pass rate
    assert "Failure modes" in text and "r01: {\"name\": \"Cust" in text and "33.3%" in text
    assert "no JSON to validate" not in text
    assert "Per task" in text and "extract-long" in text
    assert "Stop reasons" in text and "limit unknown (10 stopped for length)" in text
    for classifier_only in ("Confusion", "Per class", "macro F1", "accuracy"):
        assert classifier_only not in text
    assert text.index("Output checks") < text.index("Failure modes") < text.index("Error clusters")
    assert re.search(r"│\s*\d+\s*│\s*\d+\s*│\s*\d+\.\d%\s*│", text)  # clusters: size and share of failures


def test_show_json_keeps_full_precision_and_says_why_there_are_no_clusters(runs):
    doc = json.loads(cli("show", runs["extraction"], "--json").output)
    per_check = {c["check"]: c for c in doc["metrics"]["output_checks"]["per_check"]}
    assert per_check["json_schema"]["pass_rate"] == 40 / 60 and per_check["json"]["failed"] == 20
    assert doc["why_no_clusters"] is None and doc["clusters"][0]["share"] > 0
    assert doc["clusters"][0]["exemplar"]["output"]
    refusals = json.loads(cli("show", runs["refusals"], "--json").output)
    assert refusals["clusters"] == [] and refusals["why_no_clusters"].startswith(
        "all 25 failing outputs are identical (\"I can't help with that.\")")
    filters = json.loads(cli("show", runs["filters"], "--json").output)
    assert filters["why_no_clusters"].startswith("stage 'cluster' was not run; run: erroranalysis cluster")


def test_show_says_why_a_run_has_no_clusters(runs):
    text = cli("show", runs["refusals"]).output
    assert "No error clusters: all 25 failing outputs are identical" in text
    assert "Error clusters (top" not in text


def test_show_reports_each_filter_and_no_pooled_rate(runs):
    text = cli("show", runs["filters"]).output
    assert "2 filters: each document is a row per filter" in text and "passed every check" not in text
    assert re.search(r"sums\s*│\s*flexible\s*│\s*20\s*│\s*20\s*│\s*100\.0%", text)
    assert re.search(r"sums\s*│\s*strict\s*│\s*20\s*│\s*13\s*│\s*65\.0%", text)


def test_show_has_a_confusion_matrix_only_with_a_label_column(runs):
    text = cli("show", runs["labels"]).output
    assert "Output checks" in text and "label extracted from the output" in text and "Confusion" in text
    assert "pass │ fail" not in text
    assert text.index("Output checks") < text.index("Confusion")
    assert "limit 8:" in text


# -- the why, on its own ---------------------------------------------------------------------------------------


def test_why_no_clusters_in_words():
    from erroranalysis.report.summaries import why_no_clusters

    assert why_no_clusters({"n_failures": 0}) == "no failing examples: nothing to cluster"
    assert why_no_clusters({"n_failures": 4, "resolved": {"min_cluster_size": 5}}) == \
        "only 4 failures, fewer than the minimum cluster size 5 (--min-cluster-size)"
    tiers = {"n_failures": 30, "resolved": {"min_cluster_size": 5, "systematic_share": 0.4667,
                                            "tier_min_cluster_size": {"systematic": 5, "scattered": 5}}}
    why = why_no_clusters(tiers, ["a", "b"])
    assert why.startswith("no group of at least 5 similar failures among 30") and "14 systematic and 16 scattered" \
        in why and why.endswith("try --min-cluster-size 3 or --no-error-aware")


# -- the HTML report --------------------------------------------------------------------------------------------


def sections(html: str) -> list[str]:
    return re.findall(r'<section id="([^"]+)"', html)


def test_the_report_leads_with_checks_and_failure_modes(runs, tmp_path):
    out = tmp_path / "report.html"
    assert cli("report", runs["extraction"], "--out", out).exit_code == 0
    html = out.read_text(encoding="utf-8")
    assert sections(html) == list(GENERATION_SECTIONS)
    body = html[html.index('<section id="output-checks"'):html.index('<section id="clusters"')]
    assert "Failure modes" in body and "r01" in body and "&quot;name&quot;: &quot;Cust" in body
    assert "66.7%" in body and "no JSON to validate" not in body and "Per task" in body
    overview = html[html.index('<section id="overview"'):html.index('<section id="output-checks"')]
    assert "passed every check" in overview and "macro F1" not in overview and "accuracy" not in overview
    clusters = html[html.index('<section id="clusters"'):html.index('<section id="slices"')]
    assert "of all)" in clusters and "<details><summary>prompt</summary>" in clusters


def test_the_report_of_a_run_without_clusters_says_why(runs, tmp_path):
    out = tmp_path / "report.html"
    assert cli("report", runs["refusals"], "--out", out).exit_code == 0
    assert "No error clusters: all 25 failing outputs are identical" in out.read_text(encoding="utf-8")


def test_the_report_has_a_confusion_matrix_only_with_a_label_column(runs, tmp_path):
    out = tmp_path / "report.html"
    assert cli("report", runs["labels"], "--out", out).exit_code == 0
    assert sections(out.read_text(encoding="utf-8")) == ["overview", "output-checks", "per-class", "confusion",
                                                         "clusters", "slices", "checks", "taxonomy"]


# -- the app (AppTest) ------------------------------------------------------------------------------------------


def _app(monkeypatch, runs, tmp_path, run: str, page: str):
    from app_session import app_env, open_app

    app_env(monkeypatch, runs["extraction"].parent, tmp_path / "labels.sqlite")
    return open_app(page, run=run)


def test_the_overview_of_a_generation_run(runs, monkeypatch, tmp_path):
    from app_session import texts

    at = _app(monkeypatch, runs, tmp_path, "extraction", "overview")
    shown = texts(at, plain=True)
    cards = {m.label: m.value for m in at.metric}
    assert cards["Passed every check"] == "50.0%" and cards["Failing outputs"] == "30"
    assert cards["Cut off at the limit"] == "10"
    for words in ("Output checks", "Failure modes", "Per task", "Stop reasons and length", 'r01: {""name"": ""Cust'):
        assert words in shown, words
    for words in ("Per class", "Top confusions", "Accuracy", "Calibration"):
        assert words not in shown + " ".join(cards), words
    assert "no JSON to validate" not in shown


def test_the_overview_with_a_label_column_adds_the_classes(runs, monkeypatch, tmp_path):
    from app_session import texts

    at = _app(monkeypatch, runs, tmp_path, "labels", "overview")
    shown = texts(at, plain=True)
    assert "Output checks" in shown and "The label extracted from the output" in shown and "Per class" in shown


def test_the_clusters_page_shows_a_generation_exemplar_output_first(runs, monkeypatch, tmp_path):
    from erroranalysis.rundir import readers
    from erroranalysis_ui.eaui import state

    at = _app(monkeypatch, runs, tmp_path, "extraction", "clusters")
    markdown = "\n".join(m.value for m in at.markdown)
    assert "**Failing checks**" in markdown and "pass → fail" not in markdown  # not the made-up confusion
    assert "json: text before the JSON · **" in markdown
    assert [e.label for e in at.expander][:1] == ["Prompt"]
    assert not at.expander[0].proto.expanded  # the prompt folded
    outputs = [c.value for c in at.code]
    assert outputs and all("Extract the" not in o for o in outputs)  # the code blocks are outputs, not prompts
    every = []
    for cid in readers.read_clusters(Run.open(runs["extraction"]))["cluster_id"]:  # each cluster's exemplars
        at.selectbox(key=state.CLUSTER).select(int(cid)).run()
        every += [m.value.replace("\\", "") for m in at.markdown]
    assert any(m.endswith("] json: cut off at max_new_tokens (Unterminated string starting at character 9)")
               for m in every)  # an exemplar's failing check
    assert not any("no JSON to validate" in m for m in every)  # the cut-off JSON's repeat is not listed


def test_the_clusters_page_says_why_there_are_none(runs, monkeypatch, tmp_path):
    from app_session import texts

    at = _app(monkeypatch, runs, tmp_path, "refusals", "clusters")
    assert "The clustering found no clusters: all 25 failing outputs are identical" in texts(at, plain=True)
    at = _app(monkeypatch, runs, tmp_path, "filters", "clusters")
    assert "This run has no clusters yet: stage 'cluster' was not run" in texts(at, plain=True)


# -- Chromium: the figure cards show their numbers ---------------------------------------------------------------

CARDS_JS = """() => [...document.querySelectorAll('[data-testid="stMetric"]')].map(card => {
    const value = card.querySelector('[data-testid="stMetricValue"]');
    const inner = value.querySelector('div') || value;
    return {label: card.querySelector('[data-testid="stMetricLabel"]').innerText, text: value.innerText,
            clipped: value.scrollWidth > value.clientWidth + 1 || inner.scrollWidth > inner.clientWidth + 1};
})"""


@pytest.mark.slow
def test_figure_cards_are_not_cut_short_at_1400_px(runs, tmp_path):
    from browser import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, free_port, settle, start_app, stop

    pytest.importorskip("playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (make browsers)")
    from playwright.sync_api import sync_playwright

    port = free_port()
    proc = start_app(runs["extraction"].parent, "--user", "e2e", "--labels-db", tmp_path / "labels.sqlite", port=port)
    seen = {}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(f"http://localhost:{port}/?run=extraction")
            page.get_by_role("heading", name="Runs", level=1).wait_for()
            settle(page)
            for link in ("Overview", "Clusters"):
                page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=link, exact=True).click()
                page.get_by_role("heading", name=link, level=1).wait_for()
                page.wait_for_selector('[data-testid="stMetric"]')
                settle(page)
                seen[link] = page.evaluate(CARDS_JS)
            browser.close()
    finally:
        stop(proc)
    labels = {link: [c["label"] for c in cards] for link, cards in seen.items()}
    assert "Passed every check" in labels["Overview"] and "Mean loss" in labels["Clusters"], labels
    for link, cards in seen.items():
        for card in cards:
            assert "…" not in card["text"] and not card["clipped"], (link, card)


# -- the Python API -----------------------------------------------------------------------------------------------


def test_the_notebook_summary_of_a_generation_run(runs):
    import erroranalysis as ea

    run = ea.open(runs["refusals"])
    assert run.why_no_clusters.startswith("all 25 failing outputs are identical")
    html = run._repr_html_()
    assert "passed every check 16.7%" in html and "Failure modes" in html and "macro F1" not in html
    assert "No error clusters</b>: all 25 failing outputs are identical" in html
    assert ea.open(runs["extraction"]).why_no_clusters is None

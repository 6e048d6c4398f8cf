"""`erroranalysis report RUN --out report.html` and `compare --html`: one self-contained file with every section,
made from runs of the real stages; opened in Chromium with the network cut (no console error, no request
leaves the file, every section present and drawn); bounded in size at a million examples."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import eval_rows, write_jsonl
from fake_runs import commit, inferred_run
from typer.testing import CliRunner

from erroranalysis import rundir, stages
from erroranalysis.cli.app import app
from erroranalysis.report import COMPARE_SECTIONS, RUN_SECTIONS
from erroranalysis.report.page import plotly_js
from erroranalysis.rundir import Run

RUN = ["--id-column", "id", "--max-length", "32", "--check-embedder", "none", "--no-merge", "--embedder", "hidden",
       "--reducer", "pca", "--layout", "none", "--min-failures", "2"]


def cli(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def sections(html: str) -> list[str]:
    return re.findall(r'<section id="([^"]+)" data-section=', html)


@pytest.fixture(scope="module")
def runs(tiny_checkpoint, tmp_path_factory):
    """A run of the tiny checkpoint with every stage, a labeled error type, and a second run to compare with."""
    from erroranalysis.labels import LabelStore, labels_db_for

    root = tmp_path_factory.mktemp("report")
    data = write_jsonl(root / "eval.jsonl", eval_rows(60))
    base = root / "runs" / "base"
    cli("run", "--model", tiny_checkpoint, "--data", data, "--out", base, *RUN)
    frame = pd.read_parquet(base / "predictions.parquet")
    preds = root / "fixed.csv"
    frame[["example_id", "text", "label", "pred"]].assign(pred=frame["label"]).to_csv(preds, index=False)
    cand = root / "runs" / "cand"
    cli("analyze", "--predictions", preds, "--out", cand, "--id-column", "example_id", "--no-data-checks",
        "--no-cluster", "--no-slices")
    failures = frame.loc[~frame["correct"], "example_id"].astype(str).tolist()
    store = LabelStore(labels_db_for(base), user="ann")
    store.create_error_type("Sarcasm <b>", "reviews that say the opposite & mean it")
    store.assign(store.run_key(base), failures[:4], "Sarcasm <b>")
    return {"root": root, "base": base, "cand": cand, "n_failures": len(failures)}


def test_the_report_has_every_section_of_the_run(runs):
    out = runs["root"] / "report.html"
    cli("report", runs["base"], "--out", out)
    html = out.read_text(encoding="utf-8")
    assert sections(html) == list(RUN_SECTIONS)
    assert plotly_js()[:2000] in html and "<script src=" not in html and "cdn" not in html.split("<script>")[0]
    # plotly.js's cartesian partial bundle (bar, heatmap, scatter), not the full one: a third of the size
    assert "plotly.js (cartesian - minified) v" in html[:3000] and len(html.encode()) < 2 * 2**20
    doc = stages.run_document(runs["base"])
    for c in doc["clusters"]["rows"]:
        assert f"#{c['cluster_id']} " in html and f"{c['size']:,} failures" in html
        for ex in c["exemplars"]:
            assert ex["example_id"] in html
    assert doc["clusters"]["n"] >= 1 and doc["slices"]["available"] and doc["checks"]["available"]
    taxonomy = html.split('id="taxonomy"')[1]
    assert "Sarcasm &lt;b&gt;" in taxonomy and "&amp; mean it" in taxonomy and "Sarcasm <b>" not in html
    assert "4 failures" in taxonomy


def test_sections_without_data_say_why(runs, tmp_path):
    out = tmp_path / "cand.html"
    cli("report", runs["cand"], "--out", out)
    html = out.read_text(encoding="utf-8")
    assert sections(html) == list(RUN_SECTIONS)
    assert "No clusters: stage &#x27;cluster&#x27; was not run" in html
    assert "No calibration: the run has no class probabilities" in html


def test_compare_html(runs, tmp_path):
    out = tmp_path / "compare.html"
    cli("compare", runs["base"], runs["cand"], "--html", out, "--resamples", "50")
    html = out.read_text(encoding="utf-8")
    assert sections(html) == list(COMPARE_SECTIONS)
    assert f"{runs['n_failures']:,} fixed" in html and "F1 change per class" in html


def test_a_folder_as_out_is_refused(runs, tmp_path):
    result = CliRunner().invoke(app, ["report", str(runs["base"]), "--out", str(tmp_path)])
    assert result.exit_code == 2 and "is a folder; name the HTML file" in result.output


@pytest.mark.slow
def test_the_report_opens_in_chromium_with_no_network(runs, tmp_path):
    from browser import CHROMIUM, CHROMIUM_ARGS

    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (make browsers)")
    pages = {"run": runs["root"] / "report.html", "compare": tmp_path / "compare.html"}
    cli("report", runs["base"], "--out", pages["run"])
    cli("compare", runs["base"], runs["cand"], "--html", pages["compare"], "--resamples", "50")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for kind, file in pages.items():
                page = browser.new_page()
                errors, requests = [], []
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.route("**/*", lambda route: (requests.append(route.request.url), route.continue_()
                                                  if route.request.url.startswith("file:") else route.abort()))
                page.goto(file.as_uri())
                page.wait_for_load_state("load")
                expected = RUN_SECTIONS if kind == "run" else COMPARE_SECTIONS
                for key in expected:
                    assert page.locator(f'section[data-section="{key}"] h2').is_visible(), (kind, key)
                drawn = page.locator(".js-plotly-plot .main-svg").count()
                assert drawn >= (3 if kind == "run" else 1), (kind, drawn)
                # every trace of every chart is drawn by the partial bundle as the type the figure asked for
                asked, done = page.evaluate("""() => { const divs = [...document.querySelectorAll('.plotly-graph-div')];
                    return [divs.flatMap(d => d.data.map(t => t.type || 'scatter')),
                            divs.flatMap(d => (d._fullData || []).map(t => t.type))]; }""")
                assert asked == done and asked, (kind, asked, done)
                if kind == "run":
                    assert {"bar", "heatmap"} <= set(asked), asked
                assert errors == [], (kind, errors)
                assert all(u.startswith("file:") for u in requests), (kind, requests)
                page.screenshot(path=str(tmp_path / f"{kind}.png"), full_page=True)
        finally:
            browser.close()


@pytest.mark.slow
def test_the_report_of_a_million_examples_stays_small(tmp_path):
    """A run of 1,000,000 examples (predictions committed through the real protocol, metrics by the real stage)
    gives a report the size of a small run's: exemplars, not rows."""
    sizes = {}
    for n in (1_000, 1_000_000):
        rng = np.random.default_rng(0)
        labels = np.array(["a", "b", "c", "d"])
        gold = labels[rng.integers(0, 4, n)]
        pred = np.where(rng.random(n) < 0.2, labels[rng.integers(0, 4, n)], gold)
        frame = pd.DataFrame({"example_id": np.char.add("e", np.arange(n).astype(str)).astype(object),
                              "text": np.char.add("a short text number ", np.arange(n).astype(str)).astype(object),
                              "label": gold, "pred": pred, "source": np.where(np.arange(n) % 3, "web", "app")})
        run = inferred_run(tmp_path / f"r{n}", frame, labels=list(labels))
        stages.compute_run_metrics(run, stages.MetricsParams(n_resamples=0))
        failing = frame.loc[frame["label"] != frame["pred"], "example_id"].to_numpy()
        clusters = pd.DataFrame({"cluster_id": np.arange(60), "size": np.arange(60, 0, -1) * (n // 1000),
                                 "name": [f"cluster {i}" for i in range(60)], "kind": "systematic",
                                 "keywords": [["word"] * 5] * 60,
                                 "exemplar_ids": [list(failing[i * 5:i * 5 + 5]) for i in range(60)]})
        assignments = pd.DataFrame({"example_id": frame["example_id"], "cluster_id": np.int32(-1)})
        commit(run, "cluster", clusters_parquet=clusters, assignments_parquet=assignments)
        slices = pd.DataFrame({"slice_id": np.arange(100), "description": [f"text contains \"w{i}\"" for i in
                                                                           range(100)],
                               "support": 1000, "failures": 500, "error_rate": 0.5, "lift": 1.5, "p_value": 1e-5})
        commit(run, "slices", slices_parquet=slices,
               slice_members_parquet=pd.DataFrame({"example_id": frame["example_id"].head(1000), "slice_id": 0}))
        out = stages.write_run_report(run.path, tmp_path / f"r{n}.html")
        sizes[n] = out.stat().st_size
        assert sections(out.read_text(encoding="utf-8")) == list(RUN_SECTIONS)
        assert Run.open(run.path).has(rundir.CLUSTERS)
    js = len(plotly_js().encode("utf-8"))
    assert sizes[1_000_000] - js < 1_000_000  # under a megabyte beside Plotly's own script
    assert sizes[1_000_000] < sizes[1_000] * 1.05  # the same page: only the numbers differ

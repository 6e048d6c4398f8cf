"""The app on a token-classification run (streamlit.testing.v1.AppTest, no browser): every page opens without a
traceback, and the Label and Clusters pages show sentences with their gold and predicted spans marked."""

from __future__ import annotations

from pathlib import Path

import pytest
from app_session import app_env, go, open_app, texts
from token_fixtures import build_tiny_token_classifier, write_sentences

PAGES = ("runs", "overview", "confusion", "clusters", "slices", "compare", "label", "taxonomy", "review", "training",
         "data_checks")


@pytest.fixture(scope="module")
def token_run(tmp_path_factory) -> Path:
    from erroranalysis import stages
    from erroranalysis.sources.table import DataOptions

    folder = tmp_path_factory.mktemp("tokui")
    model = build_tiny_token_classifier(folder / "model")
    data = write_sentences(folder / "eval.jsonl", n=40)
    stages.run_token_classification(model, data, folder / "runs" / "ner", data_opts=DataOptions(id_column="id"),
                                    after=stages.AfterParams(cluster=stages.ClusterParams(layout="pca")))
    return folder / "runs" / "ner"


@pytest.fixture()
def app(token_run, tmp_path, monkeypatch):
    app_env(monkeypatch, token_run.parent, tmp_path / "labels.sqlite")
    return open_app(run="ner")


def test_every_page_opens(app):
    for page in PAGES:
        go(app, page)
        shown = texts(app)
        assert "Traceback" not in shown, page
        assert app.title, page



def _select_rows(at, rows: list[int]):
    from erroranalysis_ui.eaui import state

    nonce = at.session_state[state.LABEL_NONCE] if state.LABEL_NONCE in at.session_state else 0
    at.session_state[f"{state.LABEL_TABLE}_{nonce}"] = {"selection": {"rows": rows, "columns": [], "cells": []}}
    return at.run()


def test_label_page_lists_error_spans_and_marks_the_sentence(app, token_run):
    from erroranalysis.rundir import Run, readers
    from erroranalysis_ui.eaui import state

    spans = readers.read_spans(Run.open(token_run))
    go(app, "label")
    app.segmented_control(key=state.LABEL_SOURCE).set_value("All failures").run()
    listed = app.dataframe[0].value
    assert set(listed["example_id"]) <= set(spans.loc[~spans["correct"], "example_id"])
    first = spans.set_index("example_id").loc[listed["example_id"].iloc[0]]
    _select_rows(app, [0])
    shown = texts(app, plain=True)
    assert "**gold**" in shown and "**predicted**" in shown, shown
    assert "-background[" in shown and first["kind"].replace("_", " ") in shown
    assert f"**{first['text']}**" in shown or first["kind"] == "spurious"


def test_clusters_page_shows_exemplar_spans_in_their_sentences(app):
    go(app, "clusters")
    shown = texts(app, plain=True)
    assert "All examples in this cluster" in shown and "**gold**" in shown and "**predicted**" in shown
    assert "0 of 0 examples" not in shown


def test_overview_shows_entity_scores_and_error_kinds(app, token_run):
    from erroranalysis.rundir import Run

    go(app, "overview")
    shown = texts(app, plain=True)
    assert "Per entity type" in shown and "Error spans by kind" in shown and "gold type × predicted type" in shown
    labels = [m.label for m in app.metric]
    assert "Entity micro F1" in labels and "Token accuracy" in labels
    kinds = Run.open(token_run).metrics()["error_kinds"]
    table = next(f.value for f in app.dataframe if "kind" in getattr(f.value, "columns", []))
    assert dict(zip(table["kind"], table["spans"])) == {k.replace("_", " "): v for k, v in kinds.items()}

"""Taxonomy exports: the joined example table, the JSON document and its schema, CSV neutralizing, Markdown, CLI."""

from __future__ import annotations

import csv
import io
import json

import pytest
from fake_runs import commit
from typer.testing import CliRunner
from ui_fixtures import make_run

from erroranalysis import stages
from erroranalysis.core.errors import DataError, ParameterError, RunError, UserError
from erroranalysis.labels import LabelStore, taxonomy
from erroranalysis.rundir import Run, readers
from erroranalysis.stages import export as export_stage


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("ws")
    make_run(root / "news", n=300, n_failures=60)
    return root


@pytest.fixture()
def labeled(workspace, tmp_path):
    """The run and a store (in a fresh db) with two error types, assignments, flags and a note."""
    run = Run.open(workspace / "news")
    store = LabelStore(tmp_path / "labels.sqlite", user="alice")
    key = store.run_key(run)
    table = stages.example_table(run, store)
    failures = table[~table["correct"]]
    c0 = failures[failures["cluster_id"] == 0]["example_id"].tolist()
    c1 = failures[failures["cluster_id"] == 1]["example_id"].tolist()
    store.create_error_type("Vocabulary overlap", "Words of another class dominate", "high")
    store.create_error_type("=HYPERLINK(\"http://x\")", "-2+3", "low")
    store.assign(key, c0, "Vocabulary overlap", cluster_ids={i: 0 for i in c0})
    store.assign(key, c1[:3], "=HYPERLINK(\"http://x\")")
    store.assign(key, c1[3:5], "Vocabulary overlap", source="suggested")
    store.set_flag(key, c1[:1], "label_wrong")
    store.set_note(key, c0[0], "@SUM(A1:A9) looks like a formula")
    return run, store, {"c0": c0, "c1": c1}


def test_base_table_joins_clusters_and_layout(workspace):
    table = export_stage.base_table(Run.open(workspace / "news"))
    assert len(table) == 300
    assert {"cluster_id", "cluster_name", "membership", "x", "y"} <= set(table.columns)
    clustered = table[table["cluster_id"] >= 0]
    assert not clustered.empty and (clustered["cluster_name"] != "").all()
    assert (table.loc[table["cluster_id"] < 0, "cluster_name"] == "").all()


def test_base_table_without_clusters(tmp_path):
    run = make_run(tmp_path / "plain", n=40, n_failures=8, with_clusters=False)
    table = export_stage.base_table(run)
    assert (table["cluster_id"] == -1).all() and table["x"].isna().all()
    assert readers.read_clusters(run, optional=True) is None


def test_clusters_missing_a_column_is_a_run_error(tmp_path):
    import pandas as pd

    run = make_run(tmp_path / "r", n=40, n_failures=8)
    commit(run, "cluster_names", clusters_parquet=pd.DataFrame({"cluster_id": [0], "size": [3]}))
    with pytest.raises(RunError, match=r"clusters.parquet: missing column\(s\) 'name'; run the stage"):
        readers.read_clusters(run)


def test_example_table_attaches_labels(labeled):
    run, store, ids = labeled
    table = stages.example_table(run, store).set_index("example_id")
    assert (table.loc[ids["c0"], "error_type"] == "Vocabulary overlap").all()
    assert (table.loc[ids["c0"], "labeled_cluster_id"] == 0).all()
    assert table.loc[ids["c1"][0], "label_wrong"] and not table.loc[ids["c1"][0], "not_error"]
    assert table.loc[ids["c0"][0], "note"].startswith("@SUM")
    assert table.loc[ids["c1"][3], "status"] == "pending"


def test_json_document_validates_and_counts(labeled):
    run, store, ids = labeled
    doc = stages.build_taxonomy(run, store)
    taxonomy.validate(doc)
    assert doc["format"] == "erroranalysis.taxonomy" and doc["schema_version"] == taxonomy.SCHEMA_VERSION == 2
    types = {t["name"]: t for t in doc["error_types"]}
    vocab = types["Vocabulary overlap"]
    assert vocab["count"] == len(ids["c0"]) and vocab["suggested"] == 2
    assert vocab["share_of_failures"] == pytest.approx(len(ids["c0"]) / doc["run"]["n_failures"], abs=1e-6)
    assert sum(vocab["per_class"]["by_label"].values()) == vocab["count"]
    assert vocab["per_class"]["confusions"][0]["count"] <= vocab["count"]
    assert vocab["clusters"][0]["cluster_id"] == 0
    assert 0 < len(vocab["exemplars"]) <= 3 and all("text" in e for e in vocab["exemplars"])
    assert doc["summary"]["n_labeled_failures"] == len(ids["c0"]) + 3
    assert doc["summary"]["flags"] == {"label_wrong": 1, "not_error": 0}
    assigned = {a["example_id"]: a for a in doc["assignments"]}
    assert len(assigned) == len(ids["c0"]) + 5
    assert assigned[ids["c1"][0]]["flags"] == ["label_wrong"]
    assert assigned[ids["c1"][3]]["status"] == "pending"
    json.loads(taxonomy.to_json(doc))  # plain JSON, no NaN


def test_json_schema_rejects_broken_documents(labeled):
    run, store, _ = labeled
    doc = stages.build_taxonomy(run, store)
    doc["error_types"][0]["severity"] = "apocalyptic"
    with pytest.raises(DataError, match="error_types/0/severity"):
        taxonomy.validate(doc)
    doc = stages.build_taxonomy(run, store)
    del doc["assignments"][0]["example_id"]
    with pytest.raises(DataError, match="assignments/0"):
        taxonomy.validate(doc)


def test_load_round_trip_and_bad_files(labeled, tmp_path):
    run, store, _ = labeled
    path = tmp_path / "t.json"
    path.write_text(taxonomy.to_json(stages.build_taxonomy(run, store)))
    assert taxonomy.load(path)["run"]["name"] == "news"
    (tmp_path / "bad.json").write_text("{\n  \"format\": ")
    with pytest.raises(DataError, match="line 2: not valid JSON"):
        taxonomy.load(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"hello": 1}')
    with pytest.raises(DataError, match="not an erroranalysis taxonomy"):
        taxonomy.load(tmp_path / "other.json")
    (tmp_path / "v9.json").write_text('{"format": "erroranalysis.taxonomy", "schema_version": 9}')
    with pytest.raises(DataError, match="schema_version 9"):
        taxonomy.load(tmp_path / "v9.json")


def test_run_without_labels_exports_an_empty_taxonomy(workspace):
    doc = stages.build_taxonomy(Run.open(workspace / "news"), None)
    taxonomy.validate(doc)
    assert doc["error_types"] == [] and doc["assignments"] == []
    assert "No error types yet" in taxonomy.to_markdown(doc)


@pytest.mark.parametrize("value, expected", [
    ("=1+1", "'=1+1"), ("+cmd", "'+cmd"), ("-2", "'-2"), ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"),
    ("\rx", "'\rx"), ("plain", "plain"), ("a=b", "a=b"), ("", ""), (-1, -1), (0.5, 0.5), (None, None),
])
def test_neutralize(value, expected):
    assert taxonomy.neutralize(value) == expected


def test_csv_neutralizes_text_cells_and_keeps_numbers(labeled):
    run, store, ids = labeled
    text = taxonomy.to_csv(stages.example_table(run, store))
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == taxonomy.CSV_COLUMNS
    assert len(rows) == len(ids["c0"]) + 5
    by_id = {r["example_id"]: r for r in rows}
    assert by_id[ids["c1"][0]]["error_type"] == "'=HYPERLINK(\"http://x\")"
    assert by_id[ids["c0"][0]]["note"].startswith("'@SUM")
    for r in rows:  # no text cell starts with a formula character
        for col in ("error_type", "note", "text", "cluster_name", "label", "pred", "example_id"):
            assert not r[col].startswith(("=", "+", "-", "@"))
    assert {r["cluster_id"] for r in rows} <= {str(i) for i in range(-1, 20)}  # -1 stays a number


def test_markdown_report_escapes_user_text(labeled):
    run, store, _ = labeled
    store.update_error_type("Vocabulary overlap", definition="Uses <script>alert(1)</script> | pipes *bold*")
    md = taxonomy.to_markdown(stages.build_taxonomy(run, store))
    assert md.startswith("# Error taxonomy: news\n")
    assert "| Error type | Severity | Examples | Share of failures | Top confusion |" in md
    assert "<script>" not in md and "&lt;script&gt;" in md
    assert "\\| pipes \\*bold\\*" in md
    assert "## Vocabulary overlap" in md


def test_export_writes_each_format(labeled, tmp_path):
    run, store, _ = labeled
    for fmt, ext in (("json", ".json"), ("csv", ".csv"), ("markdown", ".md")):
        out = stages.export_taxonomy(run.path, fmt, tmp_path / f"out{ext}", labels_db=store.path)
        assert out.read_text().strip()
    assert taxonomy.load(tmp_path / "out.json")["summary"]["n_error_types"] == 2
    with pytest.raises(ParameterError, match="format='xml'"):
        stages.export_taxonomy(run.path, "xml", tmp_path / "x")
    with pytest.raises(UserError, match="is a directory"):
        stages.export_taxonomy(run.path, "json", tmp_path, labels_db=store.path)
    with pytest.raises(UserError, match="no labels database"):
        stages.export_taxonomy(run.path, "json", tmp_path / "y.json", labels_db=tmp_path / "nope.sqlite")


def test_cli_export(labeled, tmp_path):
    from erroranalysis.cli.app import app

    run, store, _ = labeled
    runner = CliRunner()
    out = tmp_path / "cli.json"
    result = runner.invoke(app, ["export", str(run.path), "--format", "json", "--out", str(out),
                                 "--labels-db", str(store.path)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output
    assert taxonomy.load(out)["error_types"]
    result = runner.invoke(app, ["export", str(run.path), "-f", "md", "-o", str(tmp_path / "r.md"),
                                 "--labels-db", str(store.path)])
    assert result.exit_code == 0 and (tmp_path / "r.md").read_text().startswith("# Error taxonomy")
    result = runner.invoke(app, ["export", str(run.path), "--format", "xml", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "--format 'xml' is invalid" in result.output
    result = runner.invoke(app, ["export", str(tmp_path / "missing"), "--out", str(tmp_path / "m.json")])
    assert result.exit_code == 2 and "no such run directory" in result.output


def test_cli_export_of_a_damaged_run_is_one_line(tmp_path):
    from erroranalysis.cli.app import app

    run = make_run(tmp_path / "broken", n=30, n_failures=5)
    run.file("predictions.parquet").write_bytes(b"garbage")
    result = CliRunner().invoke(app, ["export", str(run.path), "--out", str(tmp_path / "b.json")])
    assert result.exit_code == 2
    assert "predictions.parquet: " in result.output and "damaged or replaced since" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "b.json").exists()


def test_export_of_a_run_whose_cluster_stage_was_killed_says_what_it_lacks(tmp_path):
    """A cluster stage left running by a killed process (no one holds the lock): the export still writes, and says
    that the stage was interrupted and what the export therefore lacks, as `show` does."""
    import pandas as pd
    from fake_runs import inferred_run

    from erroranalysis import rundir
    from erroranalysis.cli.app import app
    from erroranalysis.core import files

    frame = pd.DataFrame({"example_id": [f"e{i}" for i in range(12)], "text": ["t"] * 12, "label": ["a", "b"] * 6,
                          "pred": ["a"] * 12})
    cases = {}
    for name, with_old in (("never", False), ("older", True)):
        run = inferred_run(tmp_path / name, frame, labels=["a", "b"])
        if with_old:  # an earlier cluster run committed; the latest one was killed
            commit(run, "cluster", assignments_parquet=frame[["example_id"]].assign(cluster_id=0),
                   clusters_parquet=pd.DataFrame({"cluster_id": [0], "size": [6], "name": ["x"]}))
        manifest = run.manifest
        manifest["stages"]["cluster"] = {"status": "running", "pid": 999999, "host": "gone",
                                         "started": "2026-01-01T00:00:00+00:00"}
        files.write_json(run.file(rundir.MANIFEST), manifest)
        out = tmp_path / f"{name}.json"
        result = CliRunner().invoke(app, ["export", str(run.path), "--out", str(out)])
        assert result.exit_code == 0 and out.is_file(), result.output
        cases[name] = result.output
    assert "cluster: stage 'cluster' was interrupted" in cases["never"]
    assert "so the export has no clusters" in cases["never"] and "resume with: erroranalysis cluster" in cases["never"]
    assert "its outputs shown are those of its last completed run" in cases["older"]

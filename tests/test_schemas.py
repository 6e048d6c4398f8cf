"""Each run-directory table is declared once (erroranalysis.core.schemas): the stages write no column it does not declare,
the readers hand back its list columns as lists, and the docs list the same columns."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ui_fixtures import make_run

from erroranalysis import rundir
from erroranalysis.core import schemas
from erroranalysis.rundir import readers

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("schemas") / "run", n=300, n_failures=70, n_clusters=4)


def test_every_table_a_run_holds_has_the_declared_columns(run):
    """The stages' own tables, read back column by column: nothing undeclared, the declared order kept."""
    import pyarrow.parquet as pq

    written = [name for name in rundir.TABLES if run.file(name).exists()]
    assert {rundir.CLUSTERS, rundir.ASSIGNMENTS, rundir.SLICES, rundir.SLICE_MEMBERS, rundir.CHECKS} <= set(written)
    for name in written:
        table = rundir.TABLES[name]
        columns = pq.ParquetFile(run.file(name)).schema_arrow.names
        assert set(table.required) <= set(columns), name
        if not table.open:
            assert columns == [c for c in table.columns if c in columns], f"{name}: {columns}"


def test_a_stage_cannot_write_a_column_the_schema_does_not_declare(tmp_path):
    clusters = readers.read_clusters(make_run(tmp_path / "run", n=200, n_failures=50, n_clusters=3,
                                              with_checks=False, with_slices=False))
    with rundir.create_run(tmp_path / "new", task="classification", labels=["a"]) as new:
        with pytest.raises(ValueError, match=r"clusters.parquet: columns \['colour'\] are not declared"):
            with new.stage("cluster") as staging:
                staging.write_parquet(rundir.CLUSTERS, clusters.assign(colour="red"))
        with new.stage("cluster") as staging:  # the declared columns go through
            staging.write_parquet(rundir.CLUSTERS, clusters)
    assert rundir.TABLES[rundir.PREDICTIONS].undeclared(["example_id", "source"]) == []  # metadata columns follow


def test_the_readers_hand_back_every_declared_list_column_as_lists(run):
    clusters = readers.read_clusters(run)
    assert len(clusters)
    for column in schemas.CLUSTERS.lists:
        assert all(isinstance(v, list) for v in clusters[column]), column
    assert all(isinstance(k, str) for v in clusters["keywords"] for k in v)


def _doc_columns(doc: str, heading: str, which: int = 0) -> list[str]:
    """The column names (backticked, first cell) of the `which`-th table under `heading` in a docs page."""
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    section = text.split(heading, 1)[1]
    section = section.split("\n## ", 1)[0] if heading.startswith("## ") else section
    tables = re.findall(r"((?:^\|.*\|\n)+)", section, flags=re.M)
    rows = tables[which].splitlines()[2:]
    return [name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])]


@pytest.mark.parametrize("table, doc, heading, which", [
    (schemas.PREDICTIONS, "run-directory.md", "## predictions.parquet", 0),
    (schemas.SLICES, "run-directory.md", "## slices.parquet and slice_members.parquet", 0),
    (schemas.SLICE_MEMBERS, "run-directory.md", "## slices.parquet and slice_members.parquet", 1),
    (schemas.CHECKS, "run-directory.md", "## checks.parquet and checks.json", 0),
    (schemas.CLUSTERS, "run-directory.md", "## clusters.parquet", 0),
    (schemas.ASSIGNMENTS, "run-directory.md", "## assignments.parquet", 0),
    (schemas.SPANS, "run-directory.md", "## spans.parquet", 0),
    (schemas.SUGGESTIONS, "compare.md", "`taxonomy_suggestions.parquet`, one row per failure", 0),
    (schemas.SFT_FINDINGS, "run-directory.md", "## sft_findings.parquet, sft_rows.parquet and sft_summary.json", 0),
    (schemas.SFT_ROWS, "run-directory.md", "## sft_findings.parquet, sft_rows.parquet and sft_summary.json", 1),
])
def test_the_docs_list_each_tables_declared_columns(table, doc, heading, which):
    assert sorted(_doc_columns(doc, heading, which)) == sorted(table.columns)

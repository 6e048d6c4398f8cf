"""Taxonomy schema 2: error types carry their parent; readers still accept schema 1 (a real 0.1 export); names
over MAX_NAME are refused naming the type; import creates parents before their sub-types."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner
from ui_fixtures import make_run

from erroranalysis import stages
from erroranalysis.cli.app import app
from erroranalysis.core.errors import DataError
from erroranalysis.labels import MAX_NAME, LabelStore, taxonomy
from erroranalysis.labels.importing import import_taxonomy, load_taxonomy
from erroranalysis.rundir import Run

V1 = Path(__file__).parent / "data" / "taxonomy-v1.json"  # made by 0.1's export: tests/data/make_taxonomy_v1.py


@pytest.fixture()
def doc(tmp_path):
    """A schema-2 export of a run labeled with a two-level taxonomy."""
    run = make_run(tmp_path / "news", n=80, n_failures=20)
    store = LabelStore(tmp_path / "labels.sqlite", user="alice")
    fails = run.predictions().loc[lambda p: ~p["correct"], "example_id"].tolist()
    store.create_error_type("Topic confusion", "the text is about two topics")
    store.create_error_type("Vocabulary overlap", "another class's words", "high", parent="Topic confusion")
    store.create_error_type("Named entities", parent="Topic confusion")
    store.assign(store.run_key(run), fails[:8], "Vocabulary overlap")
    store.assign(store.run_key(run), fails[8:12], "Named entities")
    return stages.build_taxonomy(Run.open(run.path), store)


def test_the_export_carries_each_types_parent(doc):
    taxonomy.validate(doc)
    parents = {t["name"]: t["parent"] for t in doc["error_types"]}
    assert parents == {"Topic confusion": None, "Vocabulary overlap": "Topic confusion",
                       "Named entities": "Topic confusion"}
    assert doc["schema_version"] == 2 and "parent" in taxonomy.JSON_SCHEMA["properties"]["error_types"]["items"][
        "required"]


def test_the_markdown_report_names_the_parent(doc):
    report = taxonomy.to_markdown(doc)
    assert "of failures · under Topic confusion*" in report and "taxonomy schema v2" in report


def test_the_schema_states_the_name_limit():
    item = taxonomy.JSON_SCHEMA["properties"]["error_types"]["items"]["properties"]
    assert item["name"]["maxLength"] == MAX_NAME == item["parent"]["maxLength"] == 80
    assert str(MAX_NAME) in item["name"]["description"]


def test_import_creates_parents_first_and_is_one_event(doc, tmp_path):
    shuffled = copy.deepcopy(doc)
    shuffled["error_types"].reverse()  # sub-types listed before their parent
    shuffled["error_types"].sort(key=lambda t: t["parent"] is None)
    store = LabelStore(tmp_path / "other.sqlite", user="dan")
    result = import_taxonomy(shuffled, store)
    assert sorted(result.created) == ["Named entities", "Topic confusion", "Vocabulary overlap"]
    assert [t.name for t in store.children("topic confusion")] == ["Named entities", "Vocabulary overlap"]
    (event,) = store.events(limit=None, with_payload=True)
    assert event.action == "import_taxonomy" and event.n_changes == 3
    assert import_taxonomy(doc, store).reused and store.version() == event.id  # idempotent: nothing logged


def test_a_different_parent_is_a_clash_like_definition(doc, tmp_path):
    store = LabelStore(tmp_path / "other.sqlite", user="dan")
    store.create_error_type("Named entities")  # top level here
    reused = import_taxonomy(doc, store)
    assert {"field": "parent", "ours": None, "theirs": "Topic confusion"}.items() <= next(
        c for c in reused.clashes if c["field"] == "parent").items()
    assert store.error_type("Named entities").parent_id is None
    import_taxonomy(doc, store, on_clash="update")
    assert store.error_type("Named entities").parent_id == store.error_type("Topic confusion").id


def test_schema_1_exports_of_0_1_are_still_read_and_imported(tmp_path):
    doc = load_taxonomy(V1)
    assert doc["schema_version"] == 1 and "parent" not in doc["error_types"][0]
    store = LabelStore(tmp_path / "w.sqlite")
    store.create_error_type("ZOË")  # the same name, other case: reused
    result = import_taxonomy(doc, store)
    assert result.created == ["Vocabulary overlap"] and result.reused == ["ZOË"]
    assert all(t.parent_id is None for t in store.error_types())
    v1 = json.loads(V1.read_text())
    v1["error_types"][0]["parent"] = None  # schema 1 has no such field
    with pytest.raises(DataError, match="unknown field 'error_types/0/parent'.*schema_version 1"):
        load_taxonomy(v1)


@pytest.mark.parametrize("edit, match", [
    (lambda d: d["error_types"][1].__setitem__("parent", "Nowhere"),
     r"error_types/1/parent: 'Nowhere' \(parent of 'Vocabulary overlap'\) is not one of the error types"),
    (lambda d: d["error_types"][0].__setitem__("parent", "Vocabulary overlap"), "its own ancestor"),
    (lambda d: d["error_types"][0].__setitem__("parent", 3), "error_types/0/parent: 3 is not of type"),
])
def test_bad_parents_are_refused_naming_the_place(doc, edit, match):
    by_name = sorted(doc["error_types"], key=lambda t: t["parent"] is not None)  # the parent first
    doc["error_types"] = by_name
    edit(doc)
    with pytest.raises(DataError, match=match):
        taxonomy.validate(doc)


def test_a_name_over_the_limit_is_refused_naming_the_type(doc, tmp_path):
    long_name = "type 000 " + "x" * 203
    doc["error_types"][0]["name"] = long_name
    path = tmp_path / "long.json"
    path.write_text(json.dumps(doc))
    result = CliRunner().invoke(app, ["import-taxonomy", str(path), "--labels-db", str(tmp_path / "w.sqlite")])
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert "error_types/0/name: error type name 'type 000 xxx" in result.output
    assert "212 characters long; names have at most 80" in result.output and "known: none yet" not in result.output
    assert not (tmp_path / "w.sqlite").exists()


def test_absurdly_deep_taxonomies_are_one_line_and_create_nothing(doc, tmp_path):
    """A document nested 200,000 deep, and a 1,200-type parent chain listed children first: exit 2, one line, no
    labels database left behind (they used to end in RecursionError, the second after creating one)."""
    deep = tmp_path / "deep.json"
    deep.write_text('{"format": "erroranalysis.taxonomy", "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    chain = copy.deepcopy(doc)
    template = chain["error_types"][0]
    chain["error_types"] = [{**template, "id": i + 1, "name": f"level {i}", "parent": f"level {i + 1}"
                             if i < 1199 else None} for i in range(1200)]
    chained = tmp_path / "chain.json"
    chained.write_text(json.dumps(chain))
    for path, said in ((deep, "nested deeper than 32 levels"), (chained, "lies more than 16 levels deep")):
        db = tmp_path / f"{path.stem}.sqlite"
        result = CliRunner().invoke(app, ["import-taxonomy", str(path), "--labels-db", str(db)])
        assert result.exit_code == 2, result.output
        assert said in result.output and len(result.output.strip().splitlines()) == 1, result.output
        assert not db.exists()
    shallow = copy.deepcopy(chain)
    shallow["error_types"] = shallow["error_types"][-16:]  # 16 levels, children listed first: imported whole
    store = LabelStore(tmp_path / "ok.sqlite")
    import_taxonomy(load_taxonomy(shallow), store)
    assert store.error_type("level 1184").parent_id == store.error_type("level 1185").id

"""One rule for where a run's labels live (labels.workspace.labels_db_for), used alike by the app, export, compare
and apply-taxonomy: nested runs land in one database whichever of the app and the CLI makes it first."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner
from ui_fixtures import make_run

from erroranalysis.cli.app import app
from erroranalysis.core.errors import UserError
from erroranalysis.labels import DEFAULT_DB_NAME, LabelStore, labels_db_for
from erroranalysis.labels.taxonomy import load
from erroranalysis.labels.workspace import MAX_LEVELS
from erroranalysis_ui.eaui import config


def _failures(run, n: int) -> list[str]:
    p = run.predictions()
    return p.loc[~p["correct"], "example_id"].astype(str).tolist()[:n]


def test_the_rule_without_any_database(tmp_path):
    run = tmp_path / "runs" / "exp" / "step-500"
    assert labels_db_for(run) == tmp_path / "runs" / "exp" / DEFAULT_DB_NAME
    assert labels_db_for(run, root=tmp_path / "runs") == tmp_path / "runs" / DEFAULT_DB_NAME


def test_the_nearest_existing_database_above_the_run_wins(tmp_path):
    run = tmp_path / "a" / "b" / "c" / "run"
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / DEFAULT_DB_NAME).write_bytes(b"")
    assert labels_db_for(run) == tmp_path / "a" / DEFAULT_DB_NAME  # three levels up: found
    (tmp_path / "a" / "b" / DEFAULT_DB_NAME).write_bytes(b"")
    assert labels_db_for(run) == tmp_path / "a" / "b" / DEFAULT_DB_NAME
    assert labels_db_for(run, root=tmp_path / "a" / "b" / "c") == tmp_path / "a" / "b" / "c" / DEFAULT_DB_NAME


def test_the_search_stops_at_the_root_or_after_a_few_levels(tmp_path):
    deep = tmp_path.joinpath(*[f"d{i}" for i in range(MAX_LEVELS + 1)], "run")
    (tmp_path / DEFAULT_DB_NAME).write_bytes(b"")
    assert labels_db_for(deep) == deep.parent / DEFAULT_DB_NAME  # too far above: not this run's workspace
    root = tmp_path / "d0"
    assert labels_db_for(deep, root=root) == root / DEFAULT_DB_NAME  # never above the app's runs folder
    with pytest.raises(UserError, match="not inside the runs folder"):
        labels_db_for(tmp_path / "elsewhere" / "run", root=root)


@pytest.fixture()
def nested(tmp_path):
    runs = tmp_path / "runs"
    run = make_run(runs / "exp" / "step-500", n=60, n_failures=12)
    make_run(runs / "top", n=40, n_failures=8)
    return runs, run


def test_app_first_then_cli_land_in_one_database(nested, tmp_path):
    runs, run = nested
    cfg = config.parse([str(runs)], env={})
    app_db = cfg.labels_db_of(run.path)
    assert app_db == runs.resolve() / DEFAULT_DB_NAME
    store = LabelStore(app_db, user="alice", writer="app")
    store.create_error_type("Sarcasm")
    ids = _failures(run, 4)
    store.assign(store.run_key(run), ids, "Sarcasm")
    assert store.run_key(run) == "exp/step-500"
    out = tmp_path / "t.json"
    result = CliRunner().invoke(app, ["export", str(run.path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = load(out)
    assert doc["run"]["key"] == "exp/step-500" and doc["summary"]["n_assigned"] == 4
    assert not (runs / "exp" / DEFAULT_DB_NAME).exists()


def test_cli_first_then_app_land_in_one_database(nested):
    runs, run = nested
    cli_db = labels_db_for(run.path)  # what apply-taxonomy creates for the run
    assert cli_db == run.path.parent / DEFAULT_DB_NAME
    store = LabelStore(cli_db, user="bob")
    store.create_error_type("Negation")
    store.assign(store.run_key(run), _failures(run, 3), "Negation")
    cfg = config.parse([str(runs)], env={})
    assert cfg.labels_db_of(run.path) == cli_db.resolve()
    app_store = LabelStore(cfg.labels_db_of(run.path))
    assert app_store.counts(app_store.run_key(run)) == {"Negation": 3}
    assert cfg.labels_db_of(runs / "top") == runs.resolve() / DEFAULT_DB_NAME  # a run outside it: the default


def test_an_explicit_labels_db_always_wins(nested, tmp_path):
    runs, run = nested
    LabelStore(labels_db_for(run.path)).create_error_type("Here")
    elsewhere = tmp_path / "local" / "labels.sqlite"
    LabelStore(elsewhere).create_error_type("Elsewhere")
    cfg = config.parse([str(runs), "--labels-db", str(elsewhere)], env={})
    assert cfg.labels_db_of(run.path) == elsewhere.resolve()
    out = tmp_path / "t.json"
    result = CliRunner().invoke(app, ["export", str(run.path), "--out", str(out), "--labels-db", str(elsewhere)])
    assert result.exit_code == 0 and [t["name"] for t in load(out)["error_types"]] == ["Elsewhere"]


def test_labels_where_prints_the_rule(nested):
    runs, run = nested
    result = CliRunner().invoke(app, ["labels", "where", str(run.path), "--root", str(runs)])
    assert result.exit_code == 0
    assert f"{runs.resolve() / DEFAULT_DB_NAME} (not made yet)" in result.output and "'exp/step-500'" in result.output

"""Names with terminal escape sequences, NUL, zero-width or bidi-override characters: printed by the CLI with those
characters made visible, never raw, and folded out of the key two error-type names are compared by."""

from __future__ import annotations

import json
import sqlite3

import pandas as pd
import pytest
from fake_runs import inferred_run
from typer.testing import CliRunner

from erroranalysis.cli.app import app
from erroranalysis.core.errors import UserError
from erroranalysis.core.terminal import visible
from erroranalysis.labels import LabelStore, NameClashError, fold_name

CLEAR = "\x1b[2J"
HOSTILE = ["ok" + CLEAR, "rtl\u202eevil", "nul\x00byte", "zero\u200bwidth"]


def raw_controls(text: str) -> list[str]:
    return [c for c in text if c in "\x1b\x00\u202e\u200b"]


def test_visible_writes_hidden_characters_as_escapes_and_keeps_the_rest():
    assert visible("a" + CLEAR + "b") == "a\\x1b[2Jb"
    assert visible("Zoë\u200b \u202e\x00") == "Zoë\\u200b \\u202e\\x00"
    assert visible("line one\nline\ttwo — ünïcode") == "line one\nline\ttwo — ünïcode"


def test_zero_width_and_compatibility_forms_are_one_name():
    assert fold_name("Zoe") == fold_name("Zoe\u200b") == fold_name("ＺＯＥ") == fold_name("Z\u202eoe")
    assert fold_name("Zoë") == fold_name("ZOE\u0308") != fold_name("Zoe")


def test_a_name_with_a_zero_width_space_is_the_existing_type(tmp_path):
    store = LabelStore(tmp_path / "labels.sqlite", user="alice")
    zoe = store.create_error_type("Zoe")
    with pytest.raises(UserError, match="already exists"):
        store.create_error_type("Zoe\u200b")
    assert store.find_error_type("ＺＯＥ").id == zoe.id and len(store.error_types()) == 1


def test_a_schema_2_database_whose_names_now_clash_waits_for_the_users_choice(tmp_path):
    db = tmp_path / "labels.sqlite"
    LabelStore(db, user="alice").create_error_type("Zoe")
    con = sqlite3.connect(db)  # what 0.2 could store: the zero-width space made another key
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.execute("INSERT INTO error_types (name, name_key, created, created_by, updated, updated_by) VALUES "
                "('Zoe\u200b', 'zoe\u200b', 't', 'bob', 't', 'bob')")
    con.commit()
    con.close()
    before = db.read_bytes()
    with pytest.raises(NameClashError, match=r"'Zoe' and 'Zoe\\u200b' are one name"):
        LabelStore(db)
    assert db.read_bytes() == before
    merged = LabelStore(db, user="alice", resolve_clashes="merge")
    assert [t.name for t in merged.error_types()] == ["Zoe"]


def test_import_taxonomy_and_show_print_hostile_names_visibly(tmp_path):
    doc = {"format": "erroranalysis.taxonomy", "schema_version": 2, "generated": "2026-01-01T00:00:00+00:00",
           "tool": {"name": "erroranalysis", "version": "0.2.0"},
           "run": {"name": "r", "key": "r", "task": "classification", "labels": ["a", "b"], "model": None,
                   "data": None, "n_examples": 0, "n_failures": 0, "accuracy": None},
           "summary": {"n_error_types": 4, "n_assigned": 0, "n_labeled_failures": 0, "n_unlabeled_failures": 0,
                       "share_of_failures_labeled": 0.0, "n_suggested": 0, "flags": {"label_wrong": 0,
                                                                                     "not_error": 0}},
           "error_types": [{"id": i + 1, "name": name, "definition": "", "severity": "medium", "parent": None,
                            "count": 0, "failures": 0, "suggested": 0, "share_of_failures": 0.0,
                            "per_class": {"by_label": {}, "by_pred": {}, "confusions": []}, "clusters": [],
                            "exemplars": [], "created": "2026-01-01T00:00:00+00:00", "created_by": "x"}
                           for i, name in enumerate(HOSTILE)],
           "assignments": []}
    path = tmp_path / "taxonomy.json"
    path.write_text(json.dumps(doc))
    result = CliRunner().invoke(app, ["import-taxonomy", str(path), "--labels-db", str(tmp_path / "l.sqlite")])
    assert result.exit_code == 0, result.output
    assert not raw_controls(result.output) and "ok\\x1b[2J" in result.output and "rtl\\u202eevil" in result.output

    frame = pd.DataFrame({"example_id": [f"e{i}" for i in range(8)], "text": ["t"] * 8,
                          "label": [HOSTILE[0], HOSTILE[1]] * 4, "pred": [HOSTILE[0]] * 8})
    run = inferred_run(tmp_path / "run", frame, labels=HOSTILE[:2])
    assert CliRunner().invoke(app, ["metrics", str(run.path)]).exit_code == 0
    shown = CliRunner().invoke(app, ["show", str(run.path)])
    assert shown.exit_code == 0, shown.output
    assert not raw_controls(shown.output) and "ok\\x1b[2J" in shown.output

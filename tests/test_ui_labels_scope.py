"""Two experiments, each with a run `sample`, sharing one labels database (`ui ... --labels-db team.sqlite`): every
"last change", history and undo on a run's page is scoped to that run (and the error types every run shares), and
names what it will change. Driven through the app (AppTest)."""

from __future__ import annotations

import pytest
from app_session import app_env, go, open_app, texts
from test_ui_apptest import button, select_rows
from ui_fixtures import label_key, make_run

from erroranalysis.core.errors import UserError
from erroranalysis.labels import LabelStore
from erroranalysis_ui.eaui import state


@pytest.fixture(scope="module")
def experiments(tmp_path_factory):
    root = tmp_path_factory.mktemp("experiments")
    for seed, name in enumerate(("exp-a", "exp-b")):
        make_run(root / name / "sample", n=120, n_failures=30, seed=seed, with_clusters=False, with_checks=False,
                 with_slices=False)
    return root


def _assign_first(at, store, type_name: str, row: int):
    at.segmented_control(key=state.LABEL_SOURCE).set_value("All failures").run()
    example = at.dataframe[0].value["example_id"].iat[row]
    select_rows(at, [row])
    at.selectbox(key=state.LABEL_TARGET).set_value(store.error_type(type_name).id)
    button(at, "Assign 1 selected").click().run()
    assert not at.exception
    return example


def _undo(at):
    return next(b for b in at.button if b.label == "Undo")


def test_undo_last_change_and_history_stay_with_the_run_on_screen(experiments, tmp_path, monkeypatch):
    db = tmp_path / "team.sqlite"
    app_env(monkeypatch, experiments, db)
    key_a, key_b = label_key(experiments / "exp-a" / "sample"), label_key(experiments / "exp-b" / "sample")
    assert key_a != key_b and key_a.startswith("sample@") and key_b.startswith("sample@")
    store = LabelStore(db, user="lead")
    store.create_error_type("Vocabulary overlap")  # a workspace change, by someone else

    a = go(open_app(run="exp-a/sample"), "label")
    labeled_a = _assign_first(a, store, "Vocabulary overlap", 0)
    assert f"Last change to run {key_a}: assigned 1 example" in texts(a, plain=True)
    assert _undo(a).help.startswith(f"Undo your last change to run {key_a}: assigned 1 example")

    b = go(open_app(run="exp-b/sample"), "label")  # the same user, the other experiment's `sample`
    shown = texts(b, plain=True)
    assert "Last change" not in shown and key_a not in shown  # A's change is neither shown nor offered
    assert _undo(b).disabled and _undo(b).help == f"Nothing of yours to undo in run {key_b} or the error types."
    labeled_b = _assign_first(b, store, "Vocabulary overlap", 1)
    assert f"Last change to run {key_b}: assigned 1 example" in texts(b, plain=True)
    _undo(b).click().run()  # B's undo reverts B's change, and A's stays
    assert store.assignments(key_b).empty
    assert store.assignments(key_a)["example_id"].tolist() == [labeled_a] != [labeled_b]
    assert "Last change" not in texts(b, plain=True) and _undo(b).disabled
    history_b = b.expander[-1].dataframe[0].value if b.expander[-1].dataframe else None
    assert history_b is not None and key_a not in history_b.to_csv()
    assert set(history_b["changed"]) == {f"run {key_b}", "the error types (every run)"}

    a.run()  # A's page still offers A's own change, named with its run
    assert _undo(a).help.startswith(f"Undo your last change to run {key_a}")
    _undo(a).click().run()
    assert store.assignments(key_a).empty


def test_the_store_refuses_to_undo_another_runs_event(experiments, tmp_path):
    from erroranalysis.rundir import Run

    store = LabelStore(tmp_path / "team.sqlite", user="tester")
    key_a, key_b = (store.run_key(Run.open(experiments / e / "sample")) for e in ("exp-a", "exp-b"))
    store.create_error_type("T")
    change = store.assign(key_a, ["x1"], store.error_type("T").id)
    event = store.last_undoable(run=key_a)
    assert event.run == key_a and event.scope == f"run {key_a}" and event.summary == change.summary
    assert store.last_undoable(run=key_b).scope == "the error types (every run)"  # the type T, not A's assignment
    with pytest.raises(UserError, match=rf"event {event.id} changed run {key_a}, not run {key_b}; undo it from that"):
        store.undo(event.id, run=key_b)
    assert store.undo(run=key_a).summary.startswith("undid: assigned")

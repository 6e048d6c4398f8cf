"""The Slices page (issue 8) without a browser: ranked slices, one slice in detail, a slice made an error type."""

from __future__ import annotations

import pandas as pd
import pytest
from app_session import app_env, open_app, texts
from streamlit.testing.v1 import AppTest
from ui_fixtures import make_run

from erroranalysis import stages
from erroranalysis.labels import LabelStore
from erroranalysis.rundir import Run
from erroranalysis.rundir.readers import read_slices
from erroranalysis.stages import slices_run
from erroranalysis_ui.eaui import actions, state


def planted_failure(words):
    raise RuntimeError("planted failure")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """news-a with slices, news-b without, calm with no failures, broken whose slices stage failed (its word
    merging raised)."""
    root = tmp_path_factory.mktemp("ws")
    make_run(root / "news-a", n=600, n_failures=120)
    make_run(root / "news-b", n=200, n_failures=30, seed=1, with_slices=False, with_clusters=False)
    make_run(root / "calm", n=100, n_failures=0, seed=3, with_clusters=False)
    broken = make_run(root / "broken", n=200, n_failures=40, seed=2, with_slices=False)
    with pytest.raises(RuntimeError, match="planted failure"):
        slices_run(broken.path, embed_fn=planted_failure)
    return root


@pytest.fixture()
def db(tmp_path):
    return tmp_path / "labels.sqlite"


@pytest.fixture()
def start(workspace, db, monkeypatch):
    app_env(monkeypatch, workspace, db)

    def _start(run: str = "news-a") -> AppTest:
        return open_app("slices", run)

    return _start


def button(at: AppTest, prefix: str):
    found = [b for b in at.button if b.label.startswith(prefix)]
    assert found, f"no button starting with {prefix!r}: {[b.label for b in at.button]}"
    return found[0]


def test_slices_are_ranked_with_their_definition_and_rates(start, workspace):
    at = start()
    assert at.title[0].value == "Slices"
    assert not at.error, [e.value for e in at.error]
    slices, _ = read_slices(Run.open(workspace / "news-a"))
    listed = at.dataframe[0].value
    assert list(listed["slice_id"]) == sorted(slices["slice_id"])
    assert list(listed["description"]) == list(slices.sort_values("slice_id")["description"])
    for col in ("support", "failures", "error_rate", "p_value"):
        assert list(listed[col]) == list(slices.sort_values("slice_id")[col])
    assert [m.label for m in at.metric][:4] == ["Slices", "Base error rate", "Failures in a slice", "Slices tested"]
    assert at.metric[1].value == "20.0%"  # 120 of 600
    assert len(at.get("plotly_chart")) == 1
    first = slices.sort_values("slice_id").iloc[0]
    assert at.session_state[state.SLICE] == int(first["slice_id"])
    # The detail lists the slice's failing members; the toggle adds its correct ones.
    examples = at.dataframe[-1].value
    assert len(examples) == int(first["failures"])
    at.toggle(key=state.SLICE_SHOW_CORRECT).set_value(True).run()
    assert len(at.dataframe[-1].value) == int(first["support"])


def test_a_run_without_slices_says_how_to_compute_them(start):
    at = start("news-b")
    assert not at.exception and not at.error
    message = at.info[0].value
    assert "has no slices yet" in message and "erroranalysis slices" in message and "news-b" in message


def test_a_run_where_no_slice_stands_out(start):
    at = start("calm")
    assert not at.exception and not at.error
    assert at.metric[0].value == "0"
    assert "No slice stands out" in at.info[0].value
    assert "no failures" in texts(at, plain=True).lower()  # the stage's message


def test_a_failed_slices_stage_shows_its_error(start):
    at = start("broken")
    assert not at.exception
    assert "planted failure" in at.error[0].value
    assert "erroranalysis slices" in at.info[0].value


def test_one_click_makes_a_slice_an_error_type(start, workspace, db):
    at = start()
    run = Run.open(workspace / "news-a")
    slices, members = read_slices(run)
    first = slices.sort_values("slice_id").iloc[0]
    table = stages.base_table(run)
    ids = set(members.loc[members["slice_id"] == first["slice_id"], "example_id"].astype(str))
    failing = table[table["example_id"].isin(ids) & ~table["correct"]]
    assert len(failing) == int(first["failures"]) > 0

    button(at, "Make an error type from this slice").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    store = LabelStore(db, create=False)
    types = store.error_types()
    assert [t.name for t in types] == [actions.slice_type_name(first["description"])]
    assert str(first["description"]) in types[0].definition
    assigned = store.assignments("news-a")
    assert sorted(assigned["example_id"]) == sorted(failing["example_id"])
    assert set(assigned["source"]) == {"human"} and set(assigned["status"]) == {"accepted"}
    assert set(assigned["updated_by"]) == {"tester"}
    expected = {ex: (int(c) if c >= 0 else None) for ex, c in zip(failing["example_id"], failing["cluster_id"])}
    got = {ex: (None if c is pd.NA else int(c)) for ex, c in zip(assigned["example_id"], assigned["cluster_id"])}
    assert got == expected and any(c is not None for c in got.values())
    assert "Created error type" in texts(at)
    # The slice now shows as labeled, and the button offers the existing type.
    assert at.dataframe[0].value["labeled"].iloc[0] == 1.0
    assert button(at, "Assign its failures to that error type")
    button(at, "Review on the Label page").click().run()
    assert at.title[0].value == "Label"
    assert at.session_state[state.LABEL_SOURCE] == "Error type"
    assert at.session_state[state.LABEL_FROM_TYPE] == types[0].id
    assert len(at.dataframe[0].value) == len(failing)


def test_failures_labeled_before_keep_their_type_unless_asked(start, workspace, db):
    run = Run.open(workspace / "news-a")
    slices, members = read_slices(run)
    first = slices.sort_values("slice_id").iloc[0]
    table = stages.base_table(run)
    ids = set(members.loc[members["slice_id"] == first["slice_id"], "example_id"].astype(str))
    failing = sorted(table[table["example_id"].isin(ids) & ~table["correct"]]["example_id"])
    store = LabelStore(db, user="someone")
    store.create_error_type("Earlier")
    store.assign("news-a", failing[:2], "Earlier")
    store.set_flag("news-a", failing[2:3], "not_error")

    at = start()
    button(at, "Make an error type from this slice").click().run()
    name = actions.slice_type_name(first["description"])
    got = store.assignments("news-a").set_index("example_id")["error_type"]
    assert list(got[failing[:2]]) == ["Earlier", "Earlier"]
    assert failing[2] not in got.index
    assert set(got[failing[3:]]) == {name}
    assert "3 that already had an error type or a flag kept it" in texts(at)

    # A second click, now moving them too, reuses the type: no duplicate, no error.
    at.checkbox(key=state.SLICE_OVERWRITE).check().run()
    button(at, "Assign its failures to that error type").click().run()
    assert not at.error, [e.value for e in at.error]
    assert [t.name for t in store.error_types()] == ["Earlier", name]
    got = store.assignments("news-a").set_index("example_id")["error_type"]
    assert set(got[failing]) == {name}


def test_slice_type_names_fit_the_store():
    assert actions.slice_type_name('text contains  "rain"') == 'text contains "rain"'
    long = actions.slice_type_name("x" * 200)
    assert len(long) == 80 and long.endswith("…")

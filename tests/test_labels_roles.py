"""Roles in the store itself: a read-only store and a viewer refuse every change, below any UI; every event names
the kind of writer that made it (app, cli, suggestion, callback)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from erroranalysis.cli.app import app
from erroranalysis.core.errors import ParameterError, UserError
from erroranalysis.labels import WRITERS, LabelStore, ReadOnlyError

WRITES = {
    "create_error_type": lambda s: s.create_error_type("New"),
    "update_error_type": lambda s: s.update_error_type("A", definition="changed"),
    "delete_error_type": lambda s: s.delete_error_type("A"),
    "merge_error_types": lambda s: s.merge_error_types(["A"], "B"),
    "assign": lambda s: s.assign("run", ["9"], "A"),
    "unassign": lambda s: s.unassign("run", ["1"]),
    "set_status": lambda s: s.set_status("run", ["1"], "rejected"),
    "set_flag": lambda s: s.set_flag("run", ["1"], "label_wrong"),
    "set_note": lambda s: s.set_note("run", "1", "hello"),
    "undo": lambda s: s.undo(),
    "batch": lambda s: s.batch().__enter__(),
    "archive": lambda s: s.archive(keep=1),
}


@pytest.fixture()
def db(tmp_path):
    path = tmp_path / "labels.sqlite"
    store = LabelStore(path, user="alice")
    store.create_error_type("A")
    store.create_error_type("B")
    store.assign("run", ["1", "2"], "A")
    return path


@pytest.mark.parametrize("write", list(WRITES), ids=list(WRITES))
def test_a_read_only_store_refuses_every_write_and_changes_nothing(db, write):
    store = LabelStore(db, user="alice", read_only=True)
    version = store.version()
    assert not store.can_write and "read-only" in store.read_only_reason
    with pytest.raises(ReadOnlyError, match="is open read-only"):
        WRITES[write](store)
    assert store.version() == version and store.counts("run") == {"A": 2, "B": 0}


@pytest.mark.parametrize("write", list(WRITES), ids=list(WRITES))
def test_a_viewer_may_read_but_not_write(db, write):
    team = LabelStore(db, user="alice", viewers=["Bob", "carol"])
    bob = team.with_user("bob")  # viewer names are compared ignoring case
    with pytest.raises(ReadOnlyError, match="'bob' is a viewer of .*labels.sqlite"):
        WRITES[write](bob)
    assert bob.counts("run") == {"A": 2, "B": 0} and not bob.can_write
    assert team.can_write and team.with_user("dave").can_write


def test_viewers_as_a_comma_separated_list_and_read_only_is_a_user_error(db):
    store = LabelStore(db, viewers="bob, carol")
    assert not store.with_user("carol").can_write and store.with_user("alice").can_write
    assert issubclass(ReadOnlyError, UserError)


def test_a_read_only_store_never_creates_a_database(tmp_path):
    with pytest.raises(UserError, match="no labels database here"):
        LabelStore(tmp_path / "labels.sqlite", read_only=True)
    assert not (tmp_path / "labels.sqlite").exists()


def test_every_event_records_its_kind_of_writer(db):
    LabelStore(db, user="alice", writer="app").set_flag("run", ["1"], "not_error")
    LabelStore(db, user="trainer", writer="callback").assign("run", ["3"], "B", source="suggested")
    LabelStore(db, user="alice").with_user("bob", writer="app").set_note("run", "2", "hm")
    events = LabelStore(db).events(limit=3)
    assert [(e.user, e.writer) for e in events] == [("bob", "app"), ("trainer", "callback"), ("alice", "app")]
    assert LabelStore(db).events(limit=None)[-1].writer == "cli"  # the default: a command or a script
    assert set(WRITERS) == {"app", "cli", "suggestion", "callback"}
    with pytest.raises(ParameterError, match="writer"):
        LabelStore(db, writer="robot")


def test_cli_log_names_user_and_writer(db):
    LabelStore(db, user="alice", writer="app").set_note("run", "1", "a note")
    result = CliRunner().invoke(app, ["labels", "log", "--labels-db", str(db), "-n", "2"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert "alice (app)  noted example '1'" in lines[0] and "alice (cli)" in lines[1]

"""Error types: one Unicode folding rule for names, and the optional parent type of a two-level taxonomy."""

from __future__ import annotations

import unicodedata

import pytest

from erroranalysis.core.errors import UserError
from erroranalysis.labels import KEEP, LabelStore, fold_name


@pytest.fixture()
def store(tmp_path):
    return LabelStore(tmp_path / "labels.sqlite", user="alice")


@pytest.mark.parametrize("first, second", [
    ("Zoë", "ZOË"),                                     # SQLite's NOCASE folds ASCII only: both got in before
    ("Zoë", unicodedata.normalize("NFD", "zoë")),       # the same letters, decomposed
    ("Straße", "STRASSE"),                              # full case folding, not lower()
    ("  Off   by one ", "off by ONE"),
])
def test_names_that_fold_to_one_are_one_type(store, first, second):
    t = store.create_error_type(first)
    with pytest.raises(UserError, match="already exists"):
        store.create_error_type(second)
    assert store.error_type(second).id == t.id and store.find_error_type(second).id == t.id
    assert fold_name(first) == fold_name(second)
    other = store.create_error_type("Other")
    with pytest.raises(UserError, match="already exists"):
        store.update_error_type(other.id, name=second)
    store.update_error_type(t.id, name=second)  # a type may change its own case
    assert store.error_type(t.id).name == " ".join(unicodedata.normalize("NFC", second).split())


def test_parents_make_a_tree_and_list_children(store):
    topic = store.create_error_type("Topic confusion")
    vocab = store.create_error_type("Vocabulary overlap", parent="topic confusion")
    names = store.create_error_type("Named entities", parent=topic.id)
    assert vocab.parent_id == topic.id and names.parent_id == topic.id and topic.parent_id is None
    assert [t.name for t in store.children("Topic confusion")] == ["Named entities", "Vocabulary overlap"]
    store.update_error_type(names.id, parent=None)
    assert store.error_type(names.id).parent_id is None
    store.update_error_type(names.id, definition="people and places", parent=KEEP)
    assert store.error_type(names.id).parent_id is None
    store.update_error_type(names.id, parent=vocab.id)
    assert store.events(limit=1)[0].summary == "edited error type 'Named entities' (parent)"
    with pytest.raises(UserError, match="no error type 'Nope'"):
        store.create_error_type("Orphan", parent="Nope")


@pytest.mark.parametrize("child, parent", [("A", "A"), ("A", "C"), ("B", "C")])
def test_cycles_are_refused(store, child, parent):
    store.create_error_type("A")
    store.create_error_type("B", parent="A")
    store.create_error_type("C", parent="B")
    version = store.version()
    with pytest.raises(UserError, match=f"cannot put error type '{child}' under '{parent}'"):
        store.update_error_type(child, parent=parent)
    assert store.version() == version


def test_deleting_a_parent_moves_its_children_up_and_undo_restores_the_tree(store):
    root = store.create_error_type("Root")
    mid = store.create_error_type("Mid", parent="Root")
    leaf = store.create_error_type("Leaf", parent="Mid")
    store.assign("run", ["1"], "Mid")
    change = store.delete_error_type("Mid")
    assert change.changed == 1 and store.error_type("Leaf").parent_id == root.id
    store.undo()
    assert store.error_type("Leaf").parent_id == mid.id and store.error_type("Mid").parent_id == root.id
    assert store.counts("run")["Mid"] == 1 and leaf.id == store.error_type("Leaf").id


def test_merging_moves_sub_types_under_the_target_without_a_cycle(store):
    store.create_error_type("S")
    store.create_error_type("C", parent="S")
    target = store.create_error_type("T", parent="C")  # S -> C -> T; merge S into T
    store.create_error_type("D", parent="S")
    store.merge_error_types(["S"], "T")
    parents = {t.name: t.parent_id for t in store.error_types()}
    assert parents["D"] == target.id and parents["C"] is None and parents["T"] == store.error_type("C").id
    store.undo()
    assert store.error_type("C").parent_id == store.error_type("S").id


def test_undo_of_a_parent_refuses_while_a_later_sub_type_uses_it(store):
    store.create_error_type("Parent")
    store.with_user("bob").create_error_type("Child", parent="Parent")
    with pytest.raises(UserError, match="other error types are now under error type 'Parent'"):
        store.undo()
    assert [t.name for t in store.error_types()] == ["Child", "Parent"]

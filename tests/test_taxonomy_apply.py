"""Applying a labeled taxonomy to another run, importing it into another workspace, and reviewing suggestions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_runs import commit, inferred_run
from test_compare import LABELS, write_run, wrong
from typer.testing import CliRunner

from erroranalysis import rundir, stages
from erroranalysis.cli.app import app
from erroranalysis.core import files, schemas
from erroranalysis.core.errors import DataError, ParameterError, RunError, UserError
from erroranalysis.labels import LabelStore, matching
from erroranalysis.stages import suggestions as suggestions_stage

N, N_TYPES, DIM = 240, 4, 12


@pytest.fixture()
def world(tmp_path):
    """Two runs of one eval set whose failures have a known error type (0-3 known, 4 = a type nobody labeled),
    vectors in a precomputed file both runs were 'clustered' with, run A labeled by that truth, and its taxonomy."""
    rng = np.random.default_rng(7)
    ws = tmp_path / "ws"
    ws.mkdir()
    truth = rng.integers(0, N_TYPES + 1, N)
    centers = rng.normal(size=(N_TYPES + 1, DIM)) * 3
    vectors = (centers[truth] + rng.normal(size=(N, DIM))).astype(np.float32)
    ids = [f"ex{i:03d}" for i in range(N)]
    np.save(ws / "vectors.npy", vectors)
    (ws / "vectors.json").write_text(json.dumps({"example_ids": ids}))
    gold = np.array(LABELS, dtype=object)[rng.integers(0, 3, N)]
    fail_a = rng.random(N) < 0.45
    fail_b = np.where(rng.random(N) < 0.5, fail_a, rng.random(N) < 0.45)

    def frame(fail):
        pred = np.array([wrong(g) if f else g for g, f in zip(gold, fail)], dtype=object)
        return pd.DataFrame({"example_id": ids, "text": [f"example {i} of kind {t}" for i, t in enumerate(truth)],
                             "label": gold, "pred": pred})

    a = write_run(ws / "a", frame(fail_a), vectors=ws / "vectors.npy")
    b = write_run(ws / "b", frame(fail_b), vectors=ws / "vectors.npy",
                  clusters={ids[i]: int(truth[i]) for i in np.flatnonzero(fail_b)})
    store = LabelStore(ws / "labels.sqlite", user="alice")
    for t in range(N_TYPES):
        store.create_error_type(f"Kind {t}", f"failures of kind {t}", severity="high" if t == 0 else "medium")
        store.assign("a", [ids[i] for i in np.flatnonzero(fail_a & (truth == t))], f"Kind {t}")
    path = stages.export_taxonomy(a.path, "json", tmp_path / "taxonomy.json")
    known = {ids[i]: (f"Kind {truth[i]}" if truth[i] < N_TYPES else None) for i in np.flatnonzero(fail_b)}
    return {"ws": ws, "a": a.path, "b": b.path, "taxonomy": path, "truth": known, "ids": ids, "fail_a": fail_a,
            "fail_b": fail_b, "tmp": tmp_path}


# -- carry-over -----------------------------------------------------------------------------------------------------


def test_carry_over_on_a_small_case_agrees_with_the_truth(world):
    other = world["tmp"] / "other" / "labels.sqlite"
    result = stages.apply_taxonomy(world["taxonomy"], world["b"], labels_db=other)
    score = matching.agreement(result.suggestions, world["truth"])
    print("carry-over (small case):", score)
    assert score["n"] == int(world["fail_b"].sum())
    assert score["accuracy_known"] >= 0.9 and score["precision"] >= 0.9
    assert score["unmatched_recall"] >= 0.8 and score["agreement"] >= 0.9
    assert result.by_basis["same example"] > 0 and result.by_basis["centroid"] > 0
    assert "own embedder (file)" in result.notes[0]
    knn = stages.suggest(world["taxonomy"], world["b"], method="knn")
    assert matching.agreement(knn.suggestions, world["truth"])["accuracy_known"] >= 0.9


def test_suggestions_are_pending_until_reviewed(world):
    other = world["tmp"] / "other" / "labels.sqlite"
    result = stages.apply_taxonomy(world["taxonomy"], world["b"], labels_db=other, user="bob")
    store = LabelStore(other, user="carol")
    key = result.run_key  # a database kept apart: the run is keyed by its name and id ('b@...')
    assert key.startswith("b@") and key == store.run_key(rundir.Run.open(world["b"]))
    a = store.assignments(key)
    assert len(a) == result.n_suggested and set(a["source"]) == {"suggested"} and set(a["status"]) == {"pending"}
    assert sum(store.counts(key).values()) == 0
    clustered = a.set_index("example_id")["cluster_id"]
    assert clustered.notna().all()  # the cluster each example is in now is kept beside the suggestion
    ids = a["example_id"].tolist()
    assert stages.review(store, key, ids[:3], accept=True).changed == 3
    assert stages.review(store, key, ids[3:5], accept=False).changed == 2
    assert sum(store.counts(key).values()) == 3
    with pytest.raises(UserError, match="awaiting review"):
        stages.review(store, key, ids[:3], accept=True)
    assert store.events(limit=1)[0].user == "carol"


def test_the_run_records_the_stage_and_the_suggestions_file(world):
    result = stages.apply_taxonomy(world["taxonomy"], world["b"], labels_db=world["tmp"] / "x.sqlite", threshold=0.4)
    run = rundir.Run.open(world["b"])
    stage = run.manifest["stages"]["apply_taxonomy"]
    assert stage["status"] == "done" and stage["params"]["threshold"] == 0.4 and stage["params"]["threshold_given"]
    assert stage["n_suggested"] == result.n_suggested and stage["n_unmatched"] == result.n_unmatched
    table = rundir.readers.read_suggestions(run)
    assert list(table.columns) == list(schemas.SUGGESTIONS.columns) and len(table) == int(world["fail_b"].sum())
    unmatched = table[table["status"] == "unmatched"]
    assert unmatched["error_type"].isna().all() and (unmatched["distance"] > 0.4).all()
    assert unmatched["closest_type"].notna().all()


def test_human_labels_flags_and_rejections_are_respected(world):
    db = world["ws"] / "labels.sqlite"  # the same workspace: run b's labels live next to run a's
    store = LabelStore(db, user="alice")
    failing = [i for i, f in zip(world["ids"], world["fail_b"]) if f]
    store.assign("b", failing[:2], "Kind 1")                     # a person labeled these
    store.set_flag("b", [failing[2]], "not_error")               # and said this one is fine
    first = stages.apply_taxonomy(world["taxonomy"], world["b"], labels_db=db)
    table = first.suggestions.set_index("example_id")
    assert table.loc[failing[0], "status"] == "kept" and table.loc[failing[2], "status"] == "flagged"
    a = store.assignments("b").set_index("example_id")
    assert a.loc[failing[0], "source"] == "human" and a.loc[failing[0], "error_type"] == "Kind 1"
    assert failing[2] not in a.index
    pending = a[a["status"] == "pending"].index.tolist()
    store.set_status("b", pending[:1], "rejected")
    version = store.version()
    again = stages.apply_taxonomy(world["taxonomy"], world["b"], labels_db=db)
    assert again.suggestions.set_index("example_id").loc[pending[0], "status"] == "rejected before"
    assert store.version() == version  # idempotent: nothing changed, nothing logged
    assert store.assignments("b").set_index("example_id").loc[pending[0], "status"] == "rejected"


def test_a_stricter_threshold_withdraws_earlier_suggestions(world):
    db = world["tmp"] / "o.sqlite"
    loose = stages.apply_taxonomy(world["taxonomy"], world["b"], labels_db=db, threshold=2.0, method="centroid")
    assert loose.n_unmatched == 0
    strict = stages.apply_taxonomy(world["taxonomy"], world["b"], labels_db=db, threshold=1e-4, method="centroid")
    store = LabelStore(db)
    assert strict.n_suggested == strict.by_basis.get("same example", 0)
    assert len(store.assignments(strict.run_key)) == strict.n_suggested < loose.n_suggested
    assert any("no longer made" in e.summary for e in store.events(limit=10))


def test_the_same_example_failing_the_same_way_keeps_its_type(world):
    result = stages.suggest(world["taxonomy"], world["b"])
    table = result.suggestions.set_index("example_id")
    same = table[table["basis"] == "same example"]
    assert len(same) and (same["distance"] == 0).all() and (same.index == same["nearest_id"]).all()
    for ex, row in same.iterrows():
        assert row["error_type"] == world["truth"][ex]


def test_invalid_parameters_write_nothing(world):
    db = world["tmp"] / "never.sqlite"
    for bad in ({"threshold": 0}, {"threshold": 3}, {"k": 0}, {"method": "svm"}, {"on_clash": "merge"}):
        with pytest.raises(ParameterError):
            stages.apply_taxonomy(world["taxonomy"], world["b"], labels_db=db, **bad)
    assert not db.exists() and not (world["b"] / suggestions_stage.SUGGESTIONS).exists()
    assert "apply_taxonomy" not in rundir.Run.open(world["b"]).manifest["stages"]


# -- taxonomy files -------------------------------------------------------------------------------------------------


def _edit(world, change) -> Path:
    doc = json.loads(world["taxonomy"].read_text())
    change(doc)
    path = world["tmp"] / "edited.json"
    path.write_text(json.dumps(doc))
    return path


def test_unknown_fields_are_refused_naming_the_place(world):
    path = _edit(world, lambda d: d["run"].__setitem__("embedder", "minilm"))
    with pytest.raises(DataError, match=r"unknown field 'run/embedder'"):
        suggestions_stage.load_taxonomy(path)
    path = _edit(world, lambda d: d["error_types"][0].__setitem__("colour", "red"))
    with pytest.raises(DataError, match=r"unknown field 'error_types/0/colour'"):
        suggestions_stage.load_taxonomy(path)
    path = _edit(world, lambda d: d["assignments"][0].__setitem__("score", 1))
    with pytest.raises(DataError, match=r"unknown field 'assignments/0/score'"):
        suggestions_stage.load_taxonomy(path)
    # free-form maps (per-class counts) take any key
    path = _edit(world, lambda d: d["error_types"][0]["per_class"]["by_label"].__setitem__("new class", 3))
    assert suggestions_stage.load_taxonomy(path)["error_types"][0]["per_class"]["by_label"]["new class"] == 3


def test_other_schema_versions_and_non_taxonomies_are_refused(world, tmp_path):
    with pytest.raises(DataError, match="schema_version 3 is not supported"):
        suggestions_stage.load_taxonomy(_edit(world, lambda d: d.__setitem__("schema_version", 3)))
    with pytest.raises(DataError, match="not an erroranalysis taxonomy"):
        suggestions_stage.load_taxonomy(_edit(world, lambda d: d.__setitem__("format", "other")))
    with pytest.raises(DataError, match="is a directory"):
        suggestions_stage.load_taxonomy(tmp_path)
    (tmp_path / "bad.json").write_text("{ nope")
    with pytest.raises(DataError, match="line 1: not valid JSON"):
        suggestions_stage.load_taxonomy(tmp_path / "bad.json")
    doc = json.loads(world["taxonomy"].read_text())
    doc["schema_version"] = 9
    with pytest.raises(DataError, match="schema_version 9"):
        suggestions_stage.load_taxonomy(doc)


def test_a_taxonomy_without_labeled_examples_cannot_be_applied(world, tmp_path):
    LabelStore(tmp_path / "blank.sqlite")
    path = stages.export_taxonomy(world["a"], "json", tmp_path / "empty.json", labels_db=tmp_path / "blank.sqlite")
    with pytest.raises(DataError, match="no labeled examples"):
        stages.apply_taxonomy(path, world["b"], labels_db=tmp_path / "o.sqlite")
    assert not (tmp_path / "o.sqlite").exists()


# -- importing ------------------------------------------------------------------------------------------------------


def test_import_creates_types_and_is_idempotent(world, tmp_path):
    store = LabelStore(tmp_path / "w.sqlite", user="dan")
    first = suggestions_stage.import_taxonomy(world["taxonomy"], store)
    assert sorted(first.created) == [f"Kind {t}" for t in range(N_TYPES)] and not first.reused
    assert store.error_type("Kind 0").severity == "high"
    version = store.version()
    second = suggestions_stage.import_taxonomy(world["taxonomy"], store)
    assert not second.created and len(second.reused) == N_TYPES and store.version() == version


def test_import_name_clashes_are_reused_updated_or_refused(world, tmp_path):
    store = LabelStore(tmp_path / "w.sqlite", user="dan")
    store.create_error_type("kind 0", "our own meaning", severity="low")   # same name, other case and definition
    with pytest.raises(UserError, match="exists .* with another definition"):
        suggestions_stage.import_taxonomy(world["taxonomy"], store, on_clash="fail")
    assert [t.name for t in store.error_types()] == ["kind 0"]              # refused before writing anything
    reused = suggestions_stage.import_taxonomy(world["taxonomy"], store)
    assert "kind 0" in reused.reused and store.error_type("kind 0").definition == "our own meaning"
    assert {c["field"] for c in reused.clashes} == {"definition", "severity", "name"}
    updated = suggestions_stage.import_taxonomy(world["taxonomy"], store, on_clash="update")
    assert updated.updated == ["kind 0"]
    t = store.error_type("kind 0")
    assert (t.definition, t.severity) == ("failures of kind 0", "high")


# -- matching -------------------------------------------------------------------------------------------------------


def test_match_vectors_votes_and_leaves_far_failures_unmatched():
    refs = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], dtype=np.float32)
    types = np.array([0, 0, 1, 1])
    fails = np.array([[1, 0.05], [0.05, 1], [-1, -0.2]], dtype=np.float32)
    m = suggestions_stage.match_vectors(fails, refs, types, k=3, threshold=0.2)
    assert m.type_index.tolist() == [0, 1, -1] and m.closest[2] >= 0
    assert m.distance[0] < 0.01 and m.distance[2] > 1
    c = suggestions_stage.match_vectors(fails, refs, types, method="centroid", threshold=0.2)
    assert c.type_index.tolist() == [0, 1, -1] and (c.vote == 1).all()
    assert refs[m.nearest[0]].tolist() == [1, 0]


def test_auto_threshold_is_calibrated_on_the_labeled_examples():
    rng = np.random.default_rng(0)
    refs = np.concatenate([rng.normal([5, 0, 0], 0.5, (30, 3)), rng.normal([0, 5, 0], 0.5, (30, 3))])
    types = np.repeat([0, 1], 30)
    value, why = suggestions_stage.auto_threshold(refs, types)
    assert 0 < value < 0.1 and why.startswith("auto: 95%")
    assert suggestions_stage.auto_threshold(refs[:2], np.array([0, 1]))[0] == matching.DEFAULT_THRESHOLD


def test_agreement_scores_known_and_new_types():
    table = pd.DataFrame({"example_id": ["1", "2", "3", "4"], "status": ["suggested", "suggested", "unmatched",
                                                                          "suggested"],
                          "error_type": ["A", "B", None, "A"]})
    score = matching.agreement(table, {"1": "A", "2": "A", "3": None, "4": None})
    assert score == {"n": 4, "agreement": 0.5, "n_known": 2, "accuracy_known": 0.5, "coverage_known": 1.0,
                     "n_suggested": 3, "precision": 0.3333, "n_new": 2, "unmatched_recall": 0.5}


# -- embedders ------------------------------------------------------------------------------------------------------


def test_hidden_states_need_the_labeled_examples_in_the_run(world, tmp_path):
    df = pd.read_parquet(world["b"] / rundir.PREDICTIONS)[["example_id", "text", "label", "pred"]]
    df["example_id"] = "other-" + df["example_id"]
    hidden = np.random.default_rng(0).normal(size=(len(df), 8)).astype(np.float32)
    run = inferred_run(tmp_path / "elsewhere", df, labels=LABELS, hidden=hidden)
    with pytest.raises(DataError, match="none of its .* labeled examples is in this run .* --embedder minilm"):
        stages.suggest(world["taxonomy"], run.path, embedder="hidden")


def test_a_custom_embedder_the_run_was_clustered_with_asks_for_another(world, tmp_path):
    import shutil

    shutil.copytree(world["b"], tmp_path / "b")
    run = rundir.Run.open(tmp_path / "b")
    vectors, meta = rundir.readers.read_embeddings(run)
    meta["embedder"] = {"name": "MyEmbedder", "key": "my-embedder-v3"}  # as a clustering with a custom one leaves it
    commit(run, "cluster", embeddings_npy=np.asarray(vectors), embeddings_json=meta,
           clusters_parquet=pd.read_parquet(run.file(rundir.CLUSTERS)),
           assignments_parquet=pd.read_parquet(run.file(rundir.ASSIGNMENTS)))
    with pytest.raises(RunError, match="custom embedder 'my-embedder-v3' .* pass --embedder"):
        stages.suggest(world["taxonomy"], run.path)


def test_a_taxonomy_of_another_task_is_refused(world):
    run = rundir.Run.open(world["b"])
    files.write_json(run.path / "manifest.json", {**run.manifest, "task": "generation"})
    with pytest.raises(DataError, match="taxonomy of a classification run cannot be applied"):
        stages.suggest(world["taxonomy"], world["b"])


def test_minilm_embeds_the_taxonomy_texts_for_an_unclustered_run(tmp_path):
    topics = {"Football read as business": ["the striker scored a late goal in the cup final",
                                            "the club signed a new midfielder before the league match",
                                            "the goalkeeper saved a penalty in extra time"],
              "Chips read as sport": ["the new processor doubles the speed of graphics chips",
                                      "the smartphone maker released a faster mobile chip",
                                      "the laptop maker launched faster graphics chips"]}
    rows, i = [], 0
    for name, texts in topics.items():
        for text in texts:
            rows.append({"example_id": f"t{i}", "text": text, "label": "sport" if "Football" in name else "tech",
                         "pred": "business" if "Football" in name else "sport"})
            i += 1
    rows.append({"example_id": "t9", "text": "a recipe for lemon cake with sugar and butter", "label": "business",
                 "pred": "tech"})
    a = write_run(tmp_path / "a", pd.DataFrame(rows))
    store = LabelStore(tmp_path / "labels.sqlite")
    for name in topics:
        store.create_error_type(name)
    store.assign("a", ["t0", "t1"], "Football read as business")
    store.assign("a", ["t3", "t4"], "Chips read as sport")
    path = stages.export_taxonomy(a.path, "json", tmp_path / "tax.json")
    b = write_run(tmp_path / "b", pd.DataFrame(rows))
    result = stages.suggest(path, b.path, threshold=0.75)
    table = result.suggestions.set_index("example_id")
    assert "not clustered; matching with minilm" in result.notes[0]
    assert table.loc["t2", "error_type"] == "Football read as business"
    assert table.loc["t5", "error_type"] == "Chips read as sport"
    assert table.loc["t0", "basis"] == "same example"
    assert table.loc["t9", "status"] == "unmatched"


# -- the commands ---------------------------------------------------------------------------------------------------


def test_cli_apply_taxonomy_stores_suggestions_and_says_how_to_review(world, tmp_path):
    db = tmp_path / "cli.sqlite"
    result = CliRunner().invoke(app, ["apply-taxonomy", str(world["taxonomy"]), str(world["b"]), "--labels-db",
                                      str(db)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "new/unmatched" in result.output and "Review them in the app" in result.output
    assert "4 created" in result.output
    assert len(LabelStore(db).assignments("ws/b")) > 0
    result = CliRunner().invoke(app, ["apply-taxonomy", str(world["taxonomy"]), str(world["b"]), "--labels-db",
                                      str(db), "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["imported"]["reused"]


def test_cli_apply_taxonomy_dry_run_and_bad_input(world, tmp_path):
    db = tmp_path / "dry.sqlite"
    result = CliRunner().invoke(app, ["apply-taxonomy", str(world["taxonomy"]), str(world["b"]), "--labels-db",
                                      str(db), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "would suggest" in result.output and not db.exists() and not (world["b"] / suggestions_stage.SUGGESTIONS).exists()
    bad = _edit(world, lambda d: d.__setitem__("schema_version", 3))
    result = CliRunner().invoke(app, ["apply-taxonomy", str(bad), str(world["b"]), "--labels-db", str(db)])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "schema_version 3" in result.output
    assert not db.exists()
    result = CliRunner().invoke(app, ["apply-taxonomy", str(world["taxonomy"]), str(world["b"]), "--threshold", "5"])
    assert result.exit_code == 2 and "--threshold 5.0 is invalid" in result.output


def test_cli_import_taxonomy(world, tmp_path, monkeypatch):
    db = tmp_path / "new" / "labels.sqlite"
    result = CliRunner().invoke(app, ["import-taxonomy", str(world["taxonomy"]), "--labels-db", str(db)])
    assert result.exit_code == 0, result.output
    assert "4 created" in result.output and "created  Kind 0" in result.output
    result = CliRunner().invoke(app, ["import-taxonomy", str(world["taxonomy"]), "--labels-db", str(db)])
    assert "0 created, 4 already there" in result.output
    LabelStore(db).update_error_type("Kind 2", definition="changed here")
    result = CliRunner().invoke(app, ["import-taxonomy", str(world["taxonomy"]), "--labels-db", str(db),
                                      "--on-clash", "fail"])
    assert result.exit_code == 2 and "'Kind 2' exists" in result.output and result.output.count("\n") == 1
    result = CliRunner().invoke(app, ["import-taxonomy", str(world["taxonomy"]), "--labels-db", str(db),
                                      "--dry-run"])
    assert "reuse  Kind 2  (differs: definition)" in result.output
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["import-taxonomy", str(world["taxonomy"])])
    assert result.exit_code == 2 and "pass --labels-db" in result.output


def test_a_type_of_one_confusion_only_takes_failures_that_make_it():
    refs = pd.DataFrame({"example_id": list("abcdefg"), "error_type": ["Tech as business"] * 3 + ["Sarcasm"] * 4,
                         "label": ["tech"] * 3 + ["sport", "tech", "business", "sport"],
                         "pred": ["business"] * 3 + ["tech", "sport", "sport", "tech"], "text": None})
    rules = suggestions_stage.confusion_constraints(refs)
    assert rules == {"Tech as business": {"label": "tech", "pred": "business"}}
    assert suggestions_stage.confusion_constraints(refs, min_examples=4) == {}
    failures = pd.DataFrame({"label": ["tech", "tech", "sport"], "pred": ["business", "sport", "business"]})
    allowed = suggestions_stage.allowed_types(failures, ["Sarcasm", "Tech as business"], rules)
    assert allowed.tolist() == [[True, True], [True, False], [True, False]]
    vectors = np.array([[1, 0], [0, 1], [1, 0.01]], dtype=np.float32)   # all three close to type 1's examples
    labeled = np.array([[1, 0], [1, 0.02], [0.99, 0], [0, 1]], dtype=np.float32)
    m = suggestions_stage.match_vectors(vectors, labeled, [1, 1, 1, 0], threshold=0.1, allowed=allowed)
    assert m.type_index.tolist() == [1, 0, -1]
    only_one = np.array([[False, True], [False, True], [False, False]])
    m = suggestions_stage.match_vectors(vectors, labeled, [1, 1, 1, 0], threshold=0.1, allowed=only_one)
    assert m.excluded.tolist() == [False, False, True] and m.type_index[2] == -1 and m.closest[2] == 1


def test_a_failure_between_two_sub_types_is_suggested_as_their_parent():
    rng = np.random.default_rng(0)
    base = np.eye(8)
    a1 = base[0] + 0.15 * base[1]
    a2 = base[0] - 0.15 * base[1]  # two tight sub-types of one broad direction
    refs = np.vstack([a1 + rng.normal(0, 0.01, 8) for _ in range(6)] + [a2 + rng.normal(0, 0.01, 8) for _ in range(6)]
                     + [base[5] + rng.normal(0, 0.01, 8) for _ in range(6)])
    names = ["Rain"] * 6 + ["Snow"] * 6 + ["Sarcasm"] * 6
    parent_of = {"Rain": "Weather", "Snow": "Weather", "Weather": None, "Sarcasm": None}
    between, far = base[0], base[3]
    failures = np.vstack([between, far])
    leaf = matching.match_vectors(failures, refs, [0] * 6 + [1] * 6 + [2] * 6)
    assert (leaf.type_index == -1).all()  # too far from each sub-type alone
    family = matching.family_matches(failures, refs, names, parent_of, leaf.type_index < 0)
    assert family.tolist() == ["Weather", None]
    assert matching.family_matches(failures, refs, names, {"Rain": None, "Snow": None, "Sarcasm": None},
                                   leaf.type_index < 0).tolist() == [None, None]  # a one-level taxonomy: no families

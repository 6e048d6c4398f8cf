"""The timeline of step runs made by the real stages (planted error types), pruning old steps, `erroranalysis
timeline`, and the labeled taxonomy carried to the next step."""

from __future__ import annotations

import json

import numpy as np
import pytest
from timeline_fixtures import FAILING, eval_frame, planted_experiment, predictions_at, step_run
from typer.testing import CliRunner

from erroranalysis import rundir, stages
from erroranalysis.cli.app import app
from erroranalysis.core.errors import UserError
from erroranalysis.labels import LabelStore, labels_db_for
from erroranalysis.rundir import Run, readers

runner = CliRunner()


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    return planted_experiment(tmp_path_factory.mktemp("planted"))


def members(experiment, t: dict) -> set[str]:
    out = set()
    for occurrence in t["steps"]:
        a = readers.read_assignments(Run.open(experiment / f"step-{occurrence['step']:06d}"))
        out |= set(a.loc[(a["cluster_id"] == occurrence["cluster_id"]) & a["failure"], "example_id"])
    return out


def test_a_group_that_fails_early_and_is_fixed_later_is_reported_fixed_at_that_step(experiment):
    doc = stages.build_timeline(experiment)
    assert [r["step"] for r in doc["steps"]] == [100, 200, 300]
    frame = eval_frame().set_index("example_id")
    by_topic = {}
    for t in doc["types"]:
        topics = {frame.at[i, "topic"] for i in members(experiment, t)}
        assert len(topics) == 1, (t["type_id"], topics)  # one planted group per type, across all its steps
        by_topic[topics.pop()] = t
    assert set(by_topic) == {"weather", "football", "cooking"}
    present = {topic: [s["step"] for s in t["steps"]] for topic, t in by_topic.items()}
    assert present == {topic: [s for s in (100, 200, 300) if topic in FAILING[s]] for topic in by_topic}
    events = {(e["kind"], e["type_id"]): e for e in doc["events"] if e["type_id"]}
    weather, cooking = by_topic["weather"]["type_id"], by_topic["cooking"]["type_id"]
    assert events[("fixed", weather)]["step"] == 300
    assert "48 of its 48 failures at step 200 are right, after the learning rate dropped at 250" in \
        events[("fixed", weather)]["text"]
    assert events[("appeared", cooking)]["step"] == 200
    assert {k for k, _ in events} == {"fixed", "appeared"}  # football persists without an event
    assert "was fixed at step 300" in by_topic["weather"]["story"]


def test_the_timeline_carries_the_training_log_and_per_class_f1(experiment):
    doc = stages.build_timeline(experiment / "step-000200")  # a step run names its experiment
    assert doc["experiment"] == str(experiment)
    assert doc["signals"]["learning_rate"]["steps"][-1] == 300  # the latest step's log: the whole run so far
    assert doc["training_log"].endswith("step-000300/trainer_state.json")
    row = doc["steps"][1]
    assert row["per_class_f1"]["lifestyle"] == 0.0 and row["n_failures"] == 148
    assert row["training"]["loss"] == pytest.approx(2.0 * np.exp(-200 / 120) + 0.2)
    json.dumps(doc, allow_nan=False)


def test_labels_name_the_types_and_the_taxonomy_reaches_the_next_step(tmp_path):
    exp = planted_experiment(tmp_path, steps=(100, 200))
    db = labels_db_for(exp / "step-000100")
    assert db == labels_db_for(exp / "step-000200") == exp / "labels.sqlite"  # one database per experiment
    store = LabelStore(db, user="alice")
    store.create_error_type("Weather read as science", severity="high")
    weather = [f"weather-{i:02d}" for i in range(48)]
    store.assign("step-000100", weather, "Weather read as science")
    result = stages.apply_latest_taxonomy(Run.open(exp / "step-000200"))
    assert result is not None and result.per_type == {"Weather read as science": 48}
    doc = stages.build_timeline(exp)
    named = [t for t in doc["types"] if t["name"] == "Weather read as science"]
    assert len(named) == 1 and [s["step"] for s in named[0]["steps"]] == [100, 200]
    assert doc["labeled"] == [{"name": "Weather read as science",
                               "steps": [{"step": 100, "size": 48}, {"step": 200, "size": 48}]}]
    assert stages.apply_latest_taxonomy(Run.open(exp / "step-000100")) is None  # nothing labeled before step 100


def test_prune_commits_the_removal_and_keeps_what_the_timeline_needs(tmp_path):
    exp = planted_experiment(tmp_path)
    before = stages.build_timeline(exp)
    old = Run.open(exp / "step-000100")
    size = old.file(rundir.EMBEDDINGS).stat().st_size
    pruned = stages.prune_steps(exp, keep_last=1)
    assert [p["run"].split("/")[-1] for p in pruned] == ["step-000100", "step-000200"]
    assert pruned[0]["removed"] == [rundir.EMBEDDINGS] and pruned[0]["bytes_freed"] == size
    manifest = old.manifest
    assert manifest["stages"]["prune"]["status"] == "done"
    assert rundir.EMBEDDINGS not in manifest["artifacts"] and not old.file(rundir.EMBEDDINGS).exists()
    assert manifest["artifacts"][rundir.CENTROIDS]["stage"] == "prune"
    assert readers.read_embeddings(old, optional=True) is None
    with pytest.raises(UserError, match="removed by 'erroranalysis timeline --prune'"):
        readers.read_embeddings(old)
    assert readers.read_predictions(old) is not None and readers.read_clusters(old) is not None
    assert Run.open(exp / "step-000300").has(rundir.EMBEDDINGS)  # the latest step stays whole
    after = stages.build_timeline(exp)
    strip = lambda d: [(t["type_id"], [(s["step"], s["size"], (s["link"] or {}).get("basis")) for s in t["steps"]])
                       for t in d["types"]]
    assert strip(after) == strip(before)  # centroids kept: the same matches
    assert [r["pruned"] for r in after["steps"]] == [True, True, False]
    assert stages.prune_steps(exp, keep_last=1) == []  # nothing left to drop


def test_a_step_still_being_written_is_left_out_with_a_note(tmp_path):
    exp = planted_experiment(tmp_path, steps=(100,))
    step_run(exp / "step-000200", predictions_at(eval_frame(), 200), 200)  # inference done, metrics not yet
    doc = stages.build_timeline(exp)
    assert [r["step"] for r in doc["steps"]] == [100, 200]
    assert doc["steps"][1]["accuracy"] is None and not doc["steps"][1]["clustered"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_cli_prints_the_timeline_and_writes_json(experiment, tmp_path):
    result = invoke("timeline", experiment)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "3 analyzed steps, 3 error types" in out and "F1 per class" in out and "What happened" in out
    assert "was fixed at step 300" in out and "appeared at step 200" in out
    result = invoke("timeline", experiment, "--json", "--out", tmp_path)
    doc = json.loads(result.output)
    assert doc["format"] == "erroranalysis.timeline" and json.loads((tmp_path / "timeline.json").read_text()) == doc


@pytest.mark.parametrize("args, pattern", [
    (["{tmp}/missing"], "no such folder"),
    (["{tmp}"], "no step runs"),
    (["{exp}", "--min-overlap", "2"], "--min-overlap 2.0 is invalid"),
    (["{exp}", "--prune", "--keep-last", "-1"], "--keep-last -1 is invalid"),
    (["{exp}", "--out", "{exp}/step-000100/t.json"], "inside a run directory"),
])
def test_cli_bad_input_is_one_line(experiment, tmp_path, args, pattern):
    result = invoke("timeline", *[a.format(tmp=tmp_path, exp=experiment) for a in args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and pattern in lines[0], result.stderr


@pytest.mark.slow
def test_planted_types_with_the_packaged_sentence_model(tmp_path):
    """The same planted case clustered on the texts by MiniLM, as the callback does by default."""
    exp = planted_experiment(tmp_path, embedder="minilm")
    doc = stages.build_timeline(exp)
    frame = eval_frame().set_index("example_id")
    fixed = [e for e in doc["events"] if e["kind"] == "fixed"]
    assert fixed, doc["events"]
    for e in fixed:
        t = next(t for t in doc["types"] if t["type_id"] == e["type_id"])
        topics = {frame.at[i, "topic"] for i in members(exp, t)}
        assert e["step"] == 300 and topics == {"weather"}
    appeared = {frame.at[i, "topic"] for e in doc["events"] if e["kind"] == "appeared"
                for i in members(exp, next(t for t in doc["types"] if t["type_id"] == e["type_id"]))}
    assert appeared == {"cooking"}

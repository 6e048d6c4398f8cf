"""`--json` means one thing on every command: the result, as strict JSON, alone on stdout (progress, notes and
warnings go to stderr); `--json-out FILE` writes it to a file. Each command is run here for real, on runs made by
the real stages over the tiny checkpoint, and its stdout is parsed."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import eval_rows, write_jsonl
from typer.testing import CliRunner

from erroranalysis.cli.app import COMMANDS, app

# Commands without --json, and why.
WITHOUT_JSON = {"ui": "starts a server; it prints the address it serves",
                "labels": "a group: its where, log and check print JSON; backup, restore, archive and migrate are "
                          "maintenance actions that print one line of what they did",
                "log": "sends a run to experiment trackers and prints one line to stderr saying which; what it sent "
                       "is read back from the trackers themselves (tests/test_tracker_log.py)"}


def invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def world(tiny_checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("json")
    data = write_jsonl(root / "eval.jsonl", eval_rows(60))
    runs = root / "runs"
    run = runs / "a"
    made = invoke("run", "--model", tiny_checkpoint, "--data", data, "--out", run, "--id-column", "id",
                  "--max-length", "32", "--check-embedder", "none", "--no-merge", "--embedder", "hidden",
                  "--reducer", "pca", "--layout", "none", "--min-failures", "2", "--json")
    predictions = root / "preds.csv"
    import pandas as pd

    frame = pd.read_parquet(run / "predictions.parquet")
    frame[["example_id", "text", "label", "pred"]].assign(pred=frame["label"]).to_csv(predictions, index=False)
    state = root / "trainer_state.json"
    state.write_text(json.dumps({"global_step": 4, "log_history": [
        {"step": s, "loss": 2.0 / s, "learning_rate": 1e-4} for s in range(1, 5)]}))
    return {"root": root, "data": data, "runs": runs, "run": run, "made": made, "predictions": predictions,
            "state": state, "model": tiny_checkpoint}


def test_run_and_analyze(world):
    made = world["made"]
    assert made["run"] == str(world["run"]) and made["overall"]["n"] == 60
    assert set(made["stages"]) == {"infer", "metrics", "checks", "slices", "cluster"}
    other = invoke("analyze", "--predictions", world["predictions"], "--out", world["runs"] / "b", "--id-column",
                   "example_id", "--no-data-checks", "--no-slices", "--no-cluster", "--json")
    assert other["overall"]["accuracy"] == 1.0


def test_commands_over_a_run(world):
    run = world["run"]
    assert invoke("show", run, "--json")["metrics"]["overall"]["n"] == 60
    assert invoke("metrics", run, "--bootstrap", "10", "--json")["overall"]["n"] == 60
    assert invoke("slices", run, "--no-merge", "--json")["n_examples"] == 60
    assert invoke("data-checks", run, "--check-embedder", "none", "--json")["n_examples"] == 60
    clustered = invoke("cluster", run, "--embedder", "hidden", "--reducer", "pca", "--layout", "none", "--json")
    assert clustered["n_examples"] == 60
    assert invoke("cluster", run, "--names-only", "--json")["n_clusters"] == clustered["n_clusters"]
    assert invoke("migrate", run, "--json")[0]["changed"] == []  # already current
    assert invoke("labels", "where", run, "--json")["key"]
    written = invoke("report", run, "--out", world["root"] / "report.html", "--json")
    assert written["bytes"] == (world["root"] / "report.html").stat().st_size


def test_taxonomy_labels_and_comparison(world):
    from erroranalysis.labels import LabelStore, labels_db_for
    from erroranalysis.rundir import Run, readers

    run, root = world["run"], world["root"]
    failures = readers.read_predictions(Run.open(run)).query("~correct")["example_id"].tolist()
    store = LabelStore(labels_db_for(run), user="ann")
    store.create_error_type("Long reviews", "reviews cut at --max-length")
    store.assign(store.run_key(run), failures[:5], "Long reviews")
    exported = invoke("export", run, "--out", root / "taxonomy.json", "--json")
    assert exported["path"] == str(root / "taxonomy.json")
    db = root / "labels.sqlite"
    planned = invoke("import-taxonomy", root / "taxonomy.json", "--labels-db", db, "--dry-run", "--json")
    assert planned["labels_db"] == str(db) and isinstance(planned["plan"], list)
    invoke("import-taxonomy", root / "taxonomy.json", "--labels-db", db, "--json")
    assert invoke("labels", "check", "--labels-db", db, "--json")["integrity"] == "ok"
    assert isinstance(invoke("labels", "log", "--labels-db", db, "--json"), list)
    matched = invoke("apply-taxonomy", root / "taxonomy.json", run, "--embedder", "hidden", "--dry-run", "--json")
    assert matched["n_failures"] == len(failures)
    if not (world["runs"] / "b").exists():
        test_run_and_analyze(world)
    report = invoke("compare", run, world["runs"] / "b", "--resamples", "20", "--json")
    assert report["comparisons"][0]["overall"]["accuracy"]["candidate"] == 1.0


def test_checklist_commands(world):
    report = invoke("training", world["state"], "--json")
    assert "signals" in report
    memorized = invoke("overfit", "--model", world["model"], "--data", world["data"], "--n", "8", "--steps", "2",
                       "--no-control", "--device", "cpu", "--json")
    assert memorized["n"] == 8
    doctor = invoke("doctor", "--model", world["model"], "--data", world["data"], "--out", world["root"] / "doc",
                    "--id-column", "id", "--no-overfit", "--check-embedder", "none", "--max-length", "32",
                    "--log", world["state"], "--json")
    assert [s["key"] for s in doctor["sections"]][0] == "memorize"


def test_watch_and_timeline(world, tmp_path):
    output = tmp_path / "output"
    checkpoint = shutil.copytree(world["model"], output / "checkpoint-4")
    shutil.copy(world["state"], checkpoint / "trainer_state.json")
    steps = tmp_path / "steps"
    watched = invoke("watch", output, "--data", world["data"], "--out", steps, "--once", "--id-column", "id",
                     "--max-length", "32", "--no-cluster", "--no-slices", "--settle", "0", "--wait", "0", "--json")
    assert watched["analyzed"] == [str(steps / "step-000004")] and watched["not_analyzed"] == []
    assert invoke("timeline", steps, "--json")["steps"][0]["step"] == 4


def test_sft_check(tmp_path):
    from sft_fixtures import CLEAN_MESSAGES, save_tokenizer
    from sft_fixtures import write_jsonl as write_rows

    tok = save_tokenizer(tmp_path / "tok")
    data = write_rows(tmp_path / "train.jsonl", CLEAN_MESSAGES + CLEAN_MESSAGES[:1])
    made = invoke("sft-check", "--model", tok, "--data", data, "--out", tmp_path / "sft", "--json")
    assert made["rows"] == 5 and made["counts"]["duplicate_row"] == 1


def test_every_command_is_covered_or_says_why_not():
    """A new command gets --json (and a line here) or a reason in WITHOUT_JSON."""
    import inspect

    source = inspect.getsource(inspect.getmodule(test_every_command_is_covered_or_says_why_not))
    for name in COMMANDS:
        assert name in WITHOUT_JSON or f'invoke("{name}"' in source, name

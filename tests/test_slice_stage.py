"""The slices stage over a run directory, and the `erroranalysis slices` command."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import typer
from fake_runs import inferred_run
from typer.testing import CliRunner

from erroranalysis import rundir
from erroranalysis.core import files, schemas
from erroranalysis.core.errors import ParameterError, RunError
from erroranalysis.rundir import SLICE_MEMBERS, SLICES, create_run
from erroranalysis.rundir.readers import read_slices
from erroranalysis.stages.slices import slices_run

LABELS = ["neg", "pos"]
FILLER = [f"w{i}" for i in range(100)]


def make_run(path, *, n=600, seed=0, metadata_columns=("source", "uid"), fail_all=None, extra_columns=None,
             synonyms=False):
    """A run whose failures are planted on source == "b" and on texts containing "rain" (or "snow")."""
    rng = np.random.default_rng(seed)
    has_rain = rng.random(n) < 0.08
    texts = []
    for i in range(n):
        words = list(rng.choice(FILLER, rng.integers(5, 25)))
        if has_rain[i]:
            words.insert(1, "snow" if synonyms and i % 2 else "rain")
        texts.append(" ".join(words))
    source = rng.choice(["a", "b", "c"], n)
    fail = ((source == "b") & (rng.random(n) < 0.6)) | (has_rain & (rng.random(n) < 0.9)) | (rng.random(n) < 0.05)
    if fail_all is not None:
        fail[:] = fail_all
    label = rng.choice(LABELS, n)
    pred = np.where(fail, np.where(label == "neg", "pos", "neg"), label)
    frame = pd.DataFrame({
        "example_id": [f"ex{i}" for i in range(n)], "text": texts, "label": label, "pred": pred,
        "correct": ~fail, "confidence": np.float32(0.9), "loss": np.float32(0.1),
        "n_tokens": np.array([len(t.split()) for t in texts], dtype=np.int32), "truncated": False,
        "source": source, "uid": [f"u{i}" for i in range(n)],
    })
    for name, values in (extra_columns or {}).items():
        frame[name] = values
    data = {"metadata_columns": list(metadata_columns)} if metadata_columns is not None else {}
    return inferred_run(path, frame, labels=LABELS, data=data), has_rain, source


def test_slices_run_writes_both_files_and_records_the_stage(tmp_path):
    run, has_rain, source = make_run(tmp_path / "run")
    summary = slices_run(run.path, merge=False)
    slices, members = read_slices(run)
    assert list(slices.columns) == list(schemas.SLICES.columns)
    assert set(slices["description"]) == {'source == "b"', 'text contains "rain"'}
    assert summary["n_slices"] == 2 and summary["n_examples"] == 600
    assert [s["description"] for s in summary["slices"]] == slices["description"].tolist()
    rain_id = int(slices.loc[slices["description"] == 'text contains "rain"', "slice_id"].iloc[0])
    rain_members = set(members.loc[members["slice_id"] == rain_id, "example_id"])
    assert rain_members == {f"ex{i}" for i in np.flatnonzero(has_rain)}
    assert members["example_id"].map(type).eq(str).all()
    assert list(slices["features"].iloc[0]) in (["meta:source=b"], ["text:rain"])

    stage = run.manifest["stages"]["slices"]
    assert stage["status"] == "done"
    assert stage["params"]["min_support"] == 10 and stage["params"]["merge"] is False
    assert stage["params"]["metadata_columns"] == ["source", "uid"]
    assert stage["n_slices"] == 2 and stage["n_examples"] == 600
    assert any("'uid' skipped: every value is unique" in m for m in stage["messages"])


def test_metadata_columns_default_to_every_other_column(tmp_path):
    run, _, _ = make_run(tmp_path / "run", metadata_columns=None, extra_columns={"region": "eu"})
    summary = slices_run(run.path, merge=False)
    assert run.manifest["stages"]["slices"]["params"]["metadata_columns"] == ["source", "uid", "region"]
    assert any("'region' skipped: it has one value ('eu')" in m for m in summary["messages"])
    assert 'source == "b"' in [s["description"] for s in summary["slices"]]


def test_listed_metadata_column_missing_from_predictions(tmp_path):
    run, _, _ = make_run(tmp_path / "run", metadata_columns=("source", "gone"))
    summary = slices_run(run.path, merge=False)
    assert "['gone'] are listed in the manifest but not in predictions.parquet" in summary["messages"][0]
    assert run.manifest["stages"]["slices"]["params"]["metadata_columns"] == ["source"]


def test_no_failures_writes_empty_files(tmp_path):
    run, _, _ = make_run(tmp_path / "run", fail_all=False)
    summary = slices_run(run.path, merge=False)
    slices, members = read_slices(run)
    assert slices.empty and members.empty and list(slices.columns) == list(schemas.SLICES.columns)
    assert summary["n_slices"] == 0 and "no failures" in summary["messages"][-1]
    assert run.stage_status("slices") == "done"


def test_all_failures_writes_empty_files(tmp_path):
    run, _, _ = make_run(tmp_path / "run", fail_all=True)
    summary = slices_run(run.path, merge=False)
    assert summary["n_slices"] == 0 and "every example fails" in summary["messages"][-1]
    assert read_slices(run)[0].empty


def _snapshot(run):
    return (run.file(SLICES).read_bytes(), run.file(SLICE_MEMBERS).read_bytes(),
            json.dumps(run.manifest["stages"]["slices"], sort_keys=True))


@pytest.mark.parametrize("kwargs,error", [
    ({"max_order": 4}, "max_order=4 is invalid"), ({"alpha": 0.0}, "alpha=0.0 is invalid"),
    ({"top_k": 0}, "top_k=0 is invalid"), ({"min_support": 0}, "min_support=0 is invalid"),
    ({"correction": "none"}, "correction='none' is invalid"), ({"ngram_max": 5}, "ngram_max=5 is invalid"),
])
def test_bad_parameters_leave_previous_slices_intact(tmp_path, kwargs, error):
    run, _, _ = make_run(tmp_path / "run")
    slices_run(run.path, merge=False)
    before = _snapshot(run)
    with pytest.raises(ParameterError, match=error):
        slices_run(run.path, merge=False, **kwargs)
    assert _snapshot(run) == before


def test_bad_predictions_leave_previous_slices_intact(tmp_path):
    run, _, _ = make_run(tmp_path / "run")
    slices_run(run.path, merge=False)
    before = _snapshot(run)
    frame = run.predictions()
    frame.loc[3, "example_id"] = "ex1"
    files.write_parquet(run.file(rundir.PREDICTIONS), frame)  # changed behind the stage's back
    with pytest.raises(RunError, match="predictions.parquet: .*(damaged or replaced since|does not match the checksum)"):
        slices_run(run.path, merge=False)
    assert _snapshot(run) == before
    dup = inferred_run(tmp_path / "dup", frame, labels=LABELS)
    with pytest.raises(RunError, match=r"column 'example_id': duplicate ids 'ex1'"):
        slices_run(dup.path, merge=False)
    with create_run(tmp_path / "nocorrect", task="classification", labels=LABELS) as bare:
        with bare.stage("infer") as staging:
            staging.write_parquet(rundir.PREDICTIONS, frame.drop(columns=["correct"]))
    with pytest.raises(RunError, match=r"missing column\(s\) 'correct'"):
        slices_run(bare.path, merge=False)
    yes = inferred_run(tmp_path / "yes", frame.assign(example_id=[f"x{i}" for i in range(len(frame))], correct="yes"),
                       labels=LABELS)
    with pytest.raises(RunError, match="column 'correct': values 'yes' are not booleans"):
        slices_run(yes.path, merge=False)
    assert "slices" not in dup.manifest["stages"] and "slices" not in yes.manifest["stages"]


def test_a_failure_inside_the_stage_is_recorded_and_keeps_old_files(tmp_path, monkeypatch):
    from erroranalysis import slices as sl

    run, _, _ = make_run(tmp_path / "run")
    slices_run(run.path, merge=False)
    files = run.file(SLICES).read_bytes(), run.file(SLICE_MEMBERS).read_bytes()

    def broken(*args, **kwargs):
        raise RuntimeError("search exploded")

    monkeypatch.setattr(sl, "find_slices", broken)
    with pytest.raises(RuntimeError, match="exploded"):
        slices_run(run.path, merge=False)
    stage = run.manifest["stages"]["slices"]
    assert stage["status"] == "failed" and stage["error"] == "search exploded"
    assert (run.file(SLICES).read_bytes(), run.file(SLICE_MEMBERS).read_bytes()) == files


def test_missing_run_and_missing_predictions(tmp_path):
    with pytest.raises(RunError, match="no such run directory"):
        slices_run(tmp_path / "nope")
    with create_run(tmp_path / "empty", task="classification", labels=LABELS) as run:
        pass
    with pytest.raises(RunError, match="stage 'infer' was not run"):
        slices_run(run.path)
    with pytest.raises(RunError, match="slices.parquet is not available: stage 'infer' was not run"):
        read_slices(run)


def test_merge_uses_the_injected_embedder(tmp_path):
    run, has_word, _ = make_run(tmp_path / "run", synonyms=True)
    calls = []

    def embed(words):
        calls.append(list(words))
        return np.array([[1.0, 0.0] if w in ("rain", "snow") else [0.0, 1.0] for w in words])

    summary = slices_run(run.path, embed_fn=embed)
    assert calls and {"rain", "snow"} <= set(calls[0])
    assert run.manifest["stages"]["slices"]["params"]["embedder"] == "custom"
    merged = [s for s in summary["slices"] if "|" in s["description"]]
    assert len(merged) == 1 and merged[0]["description"] in ('text contains "rain" | "snow"',
                                                             'text contains "snow" | "rain"')
    assert merged[0]["support"] == int(has_word.sum())


# -- the command ------------------------------------------------------------------------------------------------


@pytest.fixture
def cli():
    from erroranalysis.cli import slices as command

    app = typer.Typer()

    @app.callback()
    def main() -> None:
        pass

    command.register(app)
    return app


def test_cli_prints_and_writes(tmp_path, cli):
    run, _, _ = make_run(tmp_path / "run")
    result = CliRunner().invoke(cli, ["slices", str(run.path), "--no-merge", "--max-order", "2", "--max-slices", "5",
                                      "--min-support", "12", "--alpha", "0.9"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert 'text contains "rain"' in result.output and 'source == "b"' in result.output
    assert "'uid' skipped" in result.output
    params = run.manifest["stages"]["slices"]["params"]
    assert (params["max_order"], params["top_k"], params["min_support"], params["alpha"]) == (2, 5, 12, 0.9)
    assert run.has(SLICES) and run.has(SLICE_MEMBERS)


@pytest.mark.parametrize("args,message", [
    (["--max-order", "4"], "error: --max-order 4 is invalid: expected one of 1, 2, 3."),
    (["--slice-alpha", "0"], "error: --slice-alpha 0.0 is invalid"),
    (["--min-support", "0"], "error: --min-support 0 is invalid"),
    (["--max-slices", "0"], "error: --max-slices 0 is invalid"),
])
def test_cli_bad_options_exit_2(tmp_path, cli, args, message):
    run, _, _ = make_run(tmp_path / "run")
    result = CliRunner().invoke(cli, ["slices", str(run.path), "--no-merge", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert not run.has(SLICES)


def test_cli_missing_run_exits_2(tmp_path, cli):
    result = CliRunner().invoke(cli, ["slices", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "no such run directory" in result.output

"""Bad input that used to get through: markup in user strings, damaged artifacts, a full disk, a closed pipe. Each
is one line, exit 2 (0 for the pipe), no traceback, and nothing that looks complete is left behind."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from erroranalysis import rundir
from erroranalysis.cli.app import app
from erroranalysis.rundir import Run

EA = [sys.executable, "-m", "erroranalysis.cli"]
HOSTILE = ["[/x]", "[bold]b", "plain"]


def hostile_predictions(tmp_path: Path, n: int = 90) -> Path:
    rng = np.random.default_rng(0)
    gold = np.array(HOSTILE, dtype=object)[np.arange(n) % 3]
    pred = np.where(rng.random(n) < 0.3, np.roll(gold, 1), gold)
    frame = pd.DataFrame({"id": [f"e{i}" for i in range(n)],
                          "text": [f"[red]text[/red] {g} number {i} weather" for i, g in enumerate(gold)],
                          "label": gold, "pred": pred, "source": np.where(np.arange(n) % 2, "[i]web", "app")})
    path = tmp_path / "preds.csv"
    frame.to_csv(path, index=False)
    return path


def cli(*args) -> "object":
    return CliRunner().invoke(app, [str(a) for a in args])


def test_markup_in_labels_names_and_paths_is_printed_as_it_is(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # the path on one line, however deep the temporary folder (xdist's is deeper)
    out = tmp_path / "runs" / "a[/x]"
    made = cli("analyze", "--predictions", hostile_predictions(tmp_path), "--out", out, "--id-column", "id",
               "--no-data-checks")
    assert made.exit_code == 0, made.output
    assert "a[/x]" in made.output
    for args in (["show", out], ["metrics", out], ["slices", out, "--no-merge"], ["data-checks", out, "--check-embedder", "none"],
                 ["cluster", out, "--names-only"], ["compare", out, out.with_name("b")]):
        if args[0] == "compare":
            cli("analyze", "--predictions", hostile_predictions(tmp_path), "--out", args[2], "--id-column", "id",
                "--no-data-checks", "--no-cluster", "--no-slices")
        result = cli(*args)
        assert result.exit_code == 0, (args, result.output)
        assert "Traceback" not in result.output
        if args[0] in ("show", "metrics"):
            assert "[/x]" in result.output and "[bold]b" in result.output, result.output
        if args[0] == "checks":
            assert "a[/x]" in result.output


def corrupt_a_data_page(file: Path) -> None:
    data = bytearray(file.read_bytes())
    middle = len(data) // 3
    data[middle:middle + 3] = bytes(b ^ 0x5A for b in data[middle:middle + 3])
    file.write_bytes(bytes(data))


def test_damaged_predictions_are_one_line_that_quotes_no_example_text(tmp_path):
    out = tmp_path / "run"
    assert cli("analyze", "--predictions", hostile_predictions(tmp_path), "--out", out, "--id-column", "id",
               "--no-data-checks", "--no-cluster", "--no-slices").exit_code == 0
    corrupt_a_data_page(out / rundir.PREDICTIONS)
    for args in (["metrics", out], ["cluster", out, "--reducer", "pca", "--layout", "pca"],
                 ["export", out, "--out", tmp_path / "t.json"], ["slices", out], ["data-checks", out]):
        result = cli(*args)
        assert result.exit_code == 2, (args, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and "predictions.parquet" in lines[0], (args, result.output)
        assert "text" not in lines[0].replace("predictions.parquet", "").replace("context", ""), lines[0]
    assert not (tmp_path / "t.json").exists()


def limited(max_bytes: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return apply


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_leaves_no_run_that_looks_complete(tmp_path):
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz "))
    rows = pd.DataFrame({"text": ["".join(rng.choice(letters, 2000)) for _ in range(400)],  # does not compress
                         "label": ["a", "b"] * 200, "pred": ["a"] * 400})
    rows.to_csv(tmp_path / "preds.csv", index=False)
    out = tmp_path / "run"
    child = subprocess.run([*EA, "analyze", "--predictions", str(tmp_path / "preds.csv"), "--out", str(out),
                            "--no-cluster", "--no-slices", "--no-data-checks"], capture_output=True, text=True,
                           preexec_fn=limited(200_000))
    assert child.returncode == 2, child.stderr
    assert "the file size limit was reached" in child.stderr and "Traceback" not in child.stderr
    assert len(child.stderr.strip().splitlines()) == 1
    if (out / rundir.MANIFEST).exists():
        run = Run.open(out)
        assert run.stage_status("load_predictions") != "done"
        assert not (out / rundir.PREDICTIONS).exists()


def test_a_closed_pipe_is_not_an_error(tmp_path):
    out = tmp_path / "run"
    assert cli("analyze", "--predictions", hostile_predictions(tmp_path), "--out", out, "--id-column", "id",
               "--no-data-checks", "--no-cluster", "--no-slices").exit_code == 0
    child = subprocess.Popen([*EA, "show", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.readline()
    child.stdout.close()
    assert child.wait() == 0 and child.stderr.read() == b""


def test_the_run_records_the_character_limit(tmp_path):
    rows = pd.DataFrame({"text": ["x" * 500, "short"], "label": ["a", "b"], "pred": ["a", "b"]})
    rows.to_csv(tmp_path / "p.csv", index=False)
    out = tmp_path / "run"
    result = cli("analyze", "--predictions", tmp_path / "p.csv", "--out", out, "--max-chars", "100", "--no-data-checks",
                 "--no-cluster", "--no-slices")
    assert result.exit_code == 0, result.output
    run = Run.open(out)
    assert run.manifest["data"]["max_chars"] == 100 and run.manifest["data"]["n_cut"] == 1
    frame = rundir.readers.read_predictions(run)
    assert frame["truncated"].tolist() == [True, False] and len(frame["text"].iat[0]) == 100
    assert json.loads(run.file(rundir.MANIFEST).read_text())["data"]["max_chars"] == 100
    os.environ.pop("ERRORANALYSIS_DEBUG", None)


@pytest.mark.slow
def test_a_full_disk_during_streamed_inference_is_one_line(tiny_checkpoint, tmp_path):
    from conftest import eval_rows, write_jsonl

    data = write_jsonl(tmp_path / "eval.jsonl", eval_rows(400))
    out = tmp_path / "run"
    child = subprocess.run([*EA, "run", "--model", str(tiny_checkpoint), "--data", str(data), "--id-column", "id",
                            "--out", str(out), "--max-length", "32", "--no-cluster", "--no-slices", "--no-data-checks"],
                           capture_output=True, text=True, preexec_fn=limited(20_000))
    assert child.returncode == 2, child.stderr[-2000:]
    assert "the file size limit was reached" in child.stderr and "Traceback" not in child.stderr
    run = Run.open(out)
    assert run.stage_status("infer") == "failed" and not (out / rundir.PREDICTIONS).exists()

"""`run`, `analyze`, `metrics` and `show` as a user calls them: artifacts, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import eval_rows, write_jsonl
from typer.testing import CliRunner

from erroranalysis import rundir
from erroranalysis.cli.app import app
from erroranalysis.rundir import Run

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def assert_user_error(result, pattern: str):
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    import re

    assert re.search(pattern, lines[0]), lines[0]


def test_run_writes_a_complete_run(tiny_checkpoint, tmp_path):
    data = write_jsonl(tmp_path / "eval.jsonl", eval_rows(30))
    out = tmp_path / "run"
    result = invoke("run", "--model", tiny_checkpoint, "--data", data, "--out", out, "--id-column", "id",
                    "--max-length", "16", "--batch-size", "4", "--no-cluster")
    assert result.exit_code == 0, result.output
    run = Run.open(out)
    manifest = run.manifest
    assert {s: v["status"] for s, v in manifest["stages"].items()} == {"infer": "done", "metrics": "done",
                                                                            "checks": "done", "slices": "done"}
    assert manifest["labels"] == ["negative", "neutral", "positive"]
    assert manifest["data"]["rows"] == 30 and manifest["data"]["metadata_columns"] == ["source", "stars"]
    assert len(manifest["model"]["weights_sha256"]) == 64
    assert (manifest["model"]["batch_size"], manifest["model"]["max_tokens"]) == (4, 0)  # --batch-size alone
    preds = run.predictions()
    assert list(preds.columns) == list(rundir.CORE_COLUMNS) + ["source", "stars"]
    assert preds["example_id"].tolist() == [f"ex{i:03d}" for i in range(30)]
    probs = run.probs()
    assert probs.shape == (30, 3) and probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(1), 1, atol=1e-5)
    names = np.array(manifest["labels"])
    assert (preds["pred"].to_numpy() == names[probs.argmax(1)]).all()
    assert (preds["correct"] == (preds["label"] == preds["pred"])).all()
    np.testing.assert_allclose(preds["confidence"], probs.max(1), atol=1e-6)
    gold = np.array([manifest["labels"].index(l) for l in preds["label"]])
    np.testing.assert_allclose(preds["loss"], -np.log(probs[np.arange(30), gold]), atol=1e-4)
    assert preds["truncated"].sum() == 3 and preds["n_tokens"].max() == 16
    assert run.hidden_states().shape == (30, 32)
    metrics = run.metrics()
    assert metrics["overall"]["n"] == 30
    assert np.array(metrics["confusion"]["matrix"]).sum() == 30
    assert "Per class" in invoke("show", out).output


def test_existing_run_needs_overwrite(tiny_run):
    result = invoke("run", "--model", "unused", "--data", "unused", "--out", tiny_run)
    assert result.exit_code == 2


def test_overwrite_refused_then_allowed(tiny_checkpoint, tmp_path):
    data = write_jsonl(tmp_path / "eval.jsonl", eval_rows(6))
    args = ["run", "--model", tiny_checkpoint, "--data", data, "--out", tmp_path / "run", "--no-cluster"]
    assert invoke(*args).exit_code == 0
    assert_user_error(invoke(*args), r"a run already exists here; pass --overwrite")
    assert invoke(*args, "--overwrite").exit_code == 0


@pytest.mark.parametrize("content, pattern", [
    ("", r"eval\.jsonl: the file is empty"),
    ('{"text": "a", "label": "negative"}\n{oops\n', r"eval\.jsonl, line 2: not valid JSON"),
    ('{"text": "a", "label": "sports"}\n', r"line 1, column 'label': label 'sports' is not one the model knows.*known: 'negative', 'neutral', 'positive'"),
    ('{"review": "a", "label": "negative"}\n', r"no column 'text'; columns found: 'review', 'label'"),
])
def test_bad_data_leaves_no_run(tiny_checkpoint, tmp_path, content, pattern):
    data = tmp_path / "eval.jsonl"
    data.write_text(content)
    out = tmp_path / "run"
    assert_user_error(invoke("run", "--model", tiny_checkpoint, "--data", data, "--out", out), pattern)
    assert not out.exists()


def test_bad_model_leaves_no_run(tmp_path, eval_jsonl):
    out = tmp_path / "run"
    assert_user_error(invoke("run", "--model", tmp_path / "missing", "--data", eval_jsonl, "--out", out),
                      r"missing: no such checkpoint folder")
    assert not out.exists()


def test_bad_parameter_writes_nothing(tiny_checkpoint, tmp_path, eval_jsonl):
    out = tmp_path / "run"
    assert_user_error(invoke("run", "--model", tiny_checkpoint, "--data", eval_jsonl, "--out", out,
                             "--batch-size", "0"), r"--batch-size 0 is invalid: expected an integer >= 1")
    assert not out.exists()
    assert_user_error(invoke("run", "--model", tiny_checkpoint, "--data", eval_jsonl, "--out", out,
                             "--max-tokens", "-5"), r"--max-tokens -5 is invalid: expected an integer >= 0")
    assert not out.exists()


def test_analyze_with_probabilities(tmp_path):
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(3), size=40)
    labels = ["a", "b", "c"]
    df = pd.DataFrame({"text": [f"text {i}" for i in range(40)], "label": rng.choice(labels, 40),
                       "pred": np.array(labels)[probs.argmax(1)], "region": rng.choice(["eu", "us"], 40)})
    for j, name in enumerate(labels):
        df[f"prob_{name}"] = probs[:, j]
    df.to_csv(tmp_path / "preds.csv", index=False)
    result = invoke("analyze", "--predictions", tmp_path / "preds.csv", "--out", tmp_path / "run", "--no-cluster")
    assert result.exit_code == 0, result.output
    run = Run.open(tmp_path / "run")
    assert run.labels == labels
    np.testing.assert_allclose(run.probs(), probs, atol=1e-6)
    preds = run.predictions()
    gold = np.array([labels.index(l) for l in df["label"]])
    np.testing.assert_allclose(preds["loss"], -np.log(probs[np.arange(40), gold]), atol=1e-5)
    assert run.metrics()["overall"]["ece"] is not None
    assert "region" in run.metrics()["by_metadata"]


def test_analyze_without_probabilities(tmp_path):
    df = pd.DataFrame({"text": ["x", "y", "z"], "label": ["a", "b", "b"], "pred": ["a", "a", "c"]})
    df.to_json(tmp_path / "p.jsonl", orient="records", lines=True)
    assert invoke("analyze", "-p", tmp_path / "p.jsonl", "-o", tmp_path / "run", "--no-cluster").exit_code == 0
    run = Run.open(tmp_path / "run")
    assert run.labels == ["a", "b", "c"] and run.probs() is None
    assert run.metrics()["overall"]["accuracy"] == pytest.approx(1 / 3)


def test_analyze_probabilities_must_sum_to_one(tmp_path):
    (tmp_path / "p.csv").write_text("text,label,pred,prob_a,prob_b\nx,a,a,0.9,0.1\ny,b,a,0.7,0.7\n")
    assert_user_error(invoke("analyze", "-p", tmp_path / "p.csv", "-o", tmp_path / "run"),
                      r"p\.csv, line 3: the prob_\* columns sum to 1\.4000, not 1")
    assert not (tmp_path / "run").exists()


def test_metrics_recomputes_the_same(tiny_run):
    before = json.loads((tiny_run / rundir.METRICS).read_text())
    assert invoke("metrics", tiny_run).exit_code == 0
    assert json.loads((tiny_run / rundir.METRICS).read_text()) == before


def test_show_on_a_folder_that_is_not_a_run(tmp_path):
    assert_user_error(invoke("show", tmp_path), r"not a run directory \(no manifest\.json\)")


def test_help_does_not_import_heavy_packages():
    """`erroranalysis --help` lists every command without loading one: no command module, no library."""
    code = ("import sys; from typer.testing import CliRunner; from erroranalysis.cli.app import app, COMMANDS; "
            "r = CliRunner().invoke(app, ['--help']); assert r.exit_code == 0 and all(c in r.output for c in COMMANDS); "
            "heavy = [m for m in ('torch', 'transformers', 'umap', 'hdbscan', 'sklearn', 'pandas', 'numpy', "
            "'erroranalysis.stages', 'erroranalysis.cli.run') if m in sys.modules]; "
            "print(heavy); sys.exit(1 if heavy else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr

"""The doctor: the whole checklist on a tiny checkpoint, one Markdown report."""

import json

import numpy as np
import pytest
from test_overfit import build_tiny_checkpoint, keyword_rows, write_jsonl
from typer.testing import CliRunner

from erroranalysis.checklist.overfit import OverfitParams
from erroranalysis.cli.app import app
from erroranalysis.core.errors import DataError, RunError
from erroranalysis.sources.table import DataOptions
from erroranalysis.stages import CheckParams, InferParams
from erroranalysis.stages.doctor import REPORT_JSON, REPORT_MD
from erroranalysis.stages.doctor import run_doctor as doctor

TITLES = ["Can it memorize a tiny dataset?", "Is training loss healthy?", "Is validation loss healthy?",
          "Which classes fail?", "Which examples fail?", "Is the label or the objective wrong?"]


def bow_embed(texts, dim=64):
    import hashlib

    out = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in str(text).lower().split():
            seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
            out[row] += np.random.default_rng(seed).normal(size=dim)
    return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("doctor")
    model = build_tiny_checkpoint(root / "model")
    eval_rows = keyword_rows(80, seed=3)
    data = write_jsonl(root / "eval.jsonl", eval_rows)
    train_rows = keyword_rows(120, seed=4) + [{"text": r["text"], "label": r["label"]} for r in eval_rows[:4]]
    train = write_jsonl(root / "train.jsonl", [{"text": r["text"], "label": r["label"]} for r in train_rows])
    log = root / "log.csv"
    lines = ["step,loss,eval_loss"]
    for step in range(10, 410, 10):  # training loss falls but is NaN at step 300; validation rises from 150
        loss = "nan" if step == 300 else f"{2.0 * np.exp(-step / 100) + 0.05:.4f}"
        eval_loss = "" if step % 50 else f"{1.0 - step / 400 if step <= 150 else 0.625 + (step - 150) / 200:.4f}"
        lines.append(f"{step},{loss},{eval_loss}")
    log.write_text("\n".join(lines) + "\n")
    return {"root": root, "model": model, "data": data, "train": train, "log": log}


def run_doctor(setup, out, train="given", **kwargs):
    """The doctor on the setup's files: the train file unless `train` says otherwise, a short memorization check,
    the bag-of-words embedder for the checks."""
    options = dict(log=setup["log"], data_opts=DataOptions(id_column="id"),
                   infer_opts=InferParams(batch_size=16, max_length=64, device="cpu"),
                   overfit=OverfitParams(n=16, steps=3, lr=1e-3, control=False),
                   checks=CheckParams(train=setup["train"] if train == "given" else train), embed=bow_embed)
    options.update(kwargs)
    return doctor(setup["model"], setup["data"], out, **options)


def test_doctor_writes_the_whole_checklist(setup):
    out = setup["root"] / "run"
    result = run_doctor(setup, out)
    assert [s.title for s in result.sections] == TITLES
    statuses = {s.key: s.status for s in result.sections}
    assert statuses["memorize"] == "problem"                       # 3 steps cannot memorize
    assert statuses["training_loss"] == "problem"                  # planted NaN
    assert statuses["validation_loss"] == "warning"                # planted overfitting
    assert statuses["labels"] in ("problem", "warning")            # planted leakage
    text = (out / REPORT_MD).read_text()
    assert text.startswith("# Doctor report: model on eval.jsonl")
    positions = [text.index(f"## {i}. {title}") for i, title in enumerate(TITLES, 1)]
    assert positions == sorted(positions) and text.index("## What to look at next") < positions[0]
    assert "did not memorize 16 examples" in text
    assert "training loss is NaN at step 300" in text and "overfitting starts there" in text
    assert "| class | precision | recall | F1 | support |" in text
    assert "Highest-loss failures" in text
    assert "Leakage: 4 eval examples also in the train file (4 exact" in text
    assert "domain-classifier AUC" in text
    # the first thing to fix is the first broken step of the checklist
    assert result.next_steps[0].startswith("**Can it memorize a tiny dataset?** (step 1)")
    assert any("erroranalysis ui" in s for s in result.next_steps)
    saved = json.loads((out / REPORT_JSON).read_text())
    assert [s["key"] for s in saved["sections"]] == [s.key for s in result.sections]
    stages = json.loads((out / "manifest.json").read_text())["stages"]
    assert stages["doctor"]["status"] == "done" and stages["checks"]["status"] == "done"
    assert stages["infer"]["status"] == "done" and "cluster" not in stages


def test_doctor_without_log_train_or_memorization(setup):
    out = setup["root"] / "bare"
    result = run_doctor(setup, out, train=None, log=None, overfit=None, embed=None,
                        checks=CheckParams(embedder="none"))
    statuses = {s.key: s.status for s in result.sections}
    assert statuses["memorize"] == statuses["training_loss"] == statuses["validation_loss"] == "skipped"
    text = (out / REPORT_MD).read_text()
    assert "pass --log" in text and "pass --train" in text


def test_bad_input_fails_before_any_work(setup, tmp_path):
    out = tmp_path / "run"
    bad_train = write_jsonl(tmp_path / "train.jsonl", [{"sentence": "x", "label": "pos"}])
    with pytest.raises(DataError, match="lacks the eval set's column"):
        run_doctor(setup, out, train=bad_train)
    bad_log = tmp_path / "log.csv"
    bad_log.write_text("step,accuracy\n1,0.5\n")
    with pytest.raises(DataError, match="no training loss"):
        run_doctor(setup, out, log=bad_log)
    assert not out.exists()
    (out / "manifest.json").parent.mkdir()
    (out / "manifest.json").write_text("{}")
    with pytest.raises(RunError, match="pass --overwrite"):
        run_doctor(setup, out)


def test_cli(setup, tmp_path):
    out = tmp_path / "cli"
    result = CliRunner().invoke(app, ["doctor", "--model", str(setup["model"]), "--data", str(setup["data"]),
                                      "--out", str(out), "--no-overfit", "--check-embedder", "none", "--device", "cpu",
                                      "--id-column", "id", "--log", str(setup["log"])])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "What to look at next" in text and f"report: {out / REPORT_MD}" in text
    assert "PROBLEM" in text and (out / REPORT_MD).is_file()
    bad = CliRunner().invoke(app, ["doctor", "--model", str(setup["model"]), "--data", str(tmp_path / "x.jsonl"),
                                   "--out", str(tmp_path / "o")])
    assert bad.exit_code == 2 and bad.output.strip().count("\n") == 0 and "no such file" in bad.output

import csv
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from erroranalysis.checklist.training import diagnose, training_report
from erroranalysis.checklist.training_log import find_log, load_training_log
from erroranalysis.cli.app import app
from erroranalysis.core.errors import DataError

STEPS = np.arange(10, 1001, 10)


def healthy_history(seed: int = 0) -> list[dict]:
    """HF-style log_history: loss falling with noise, warm-up then linear decay, evaluation every 100 steps."""
    rng = np.random.default_rng(seed)
    history = []
    for step in STEPS:
        lr = 5e-5 * min(step / 100, (1000 - step) / 900)
        loss = 0.3 + 2 * math.exp(-step / 250) + rng.normal(0, 0.02)
        grad_norm = float(np.exp(rng.normal(0, 0.15)) * (1 + math.exp(-step / 200)))
        history.append({"step": int(step), "epoch": step / 500, "loss": loss, "grad_norm": grad_norm,
                        "learning_rate": lr})
        if step % 100 == 0:
            history.append({"step": int(step), "epoch": step / 500, "eval_loss": 0.35 + 2 * math.exp(-step / 250)})
    history.append({"step": 1000, "train_loss": 0.6, "train_runtime": 12.0})  # the Trainer's closing summary
    return history


def entries(history, key):
    return [e for e in history if key in e]


def set_at(history, key, step, value):
    next(e for e in entries(history, key) if e["step"] == step)[key] = value


def write_state(folder: Path, history, name="trainer_state.json") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"global_step": 1000, "log_history": history}))  # writes NaN as NaN, like HF
    return path


def checks(history, tmp_path) -> dict:
    log = load_training_log(write_state(tmp_path, history))
    return {f.check: f for f in diagnose(log)}


def test_healthy_log_has_no_findings(tmp_path):
    log = load_training_log(write_state(tmp_path, healthy_history()))
    assert set(log.signals) == {"loss", "eval_loss", "grad_norm", "learning_rate"}
    assert len(log.signals["loss"]) == 100 and len(log.signals["eval_loss"]) == 10
    assert diagnose(log) == []


@pytest.mark.parametrize("seed", range(5))
def test_healthy_noise_raises_no_warning(tmp_path, seed):
    found = checks(healthy_history(seed), tmp_path)
    assert not [f for f in found.values() if f.severity != "info"]


def test_nan_loss_is_found_at_its_step(tmp_path):
    history = healthy_history()
    set_at(history, "loss", 500, float("nan"))
    finding = checks(history, tmp_path)["non_finite"]
    assert finding.severity == "error" and finding.steps == (500,)
    assert "training loss is NaN at step 500" in finding.message


def test_inf_grad_norm_is_found(tmp_path):
    history = healthy_history()
    set_at(history, "grad_norm", 300, float("inf"))
    set_at(history, "grad_norm", 310, float("inf"))
    finding = checks(history, tmp_path)["non_finite"]
    assert finding.steps == (300, 310) and "grad norm is inf at step 300" in finding.message


def test_grad_spike_is_found_at_its_step(tmp_path):
    history = healthy_history()
    spike = entries(history, "grad_norm")[36]
    spike["grad_norm"] *= 30
    found = checks(history, tmp_path)
    assert found["grad_spike"].steps == (spike["step"],)
    assert f"{spike['step']} (" in found["grad_spike"].message


def test_large_early_grad_norms_are_not_spikes(tmp_path):
    history = healthy_history()
    for e, boost in zip(entries(history, "grad_norm"), [20, 12, 7, 4, 2.5, 1.5]):
        e["grad_norm"] *= boost
    assert "grad_spike" not in checks(history, tmp_path)


def test_validation_loss_turning_up_marks_overfitting_onset(tmp_path):
    history = healthy_history()
    base = 0.35 + 2 * math.exp(-600 / 250)
    for e in entries(history, "eval_loss"):
        if e["step"] > 600:
            e["eval_loss"] = base + 0.0015 * (e["step"] - 600)
    finding = checks(history, tmp_path)["overfitting"]
    assert finding.severity == "warning" and finding.steps == (600,)
    assert "lowest at step 600" in finding.message


def test_lr_stuck_at_zero(tmp_path):
    history = healthy_history()
    for e in entries(history, "learning_rate"):
        if e["step"] >= 400:
            e["learning_rate"] = 0.0
    finding = checks(history, tmp_path)["lr_zero"]
    assert finding.severity == "error" and finding.steps == (400, 1000)


def test_lr_zero_everywhere_and_flat_loss(tmp_path):
    rng = np.random.default_rng(1)
    history = [{"step": int(s), "loss": 2.3 + rng.normal(0, 0.02), "learning_rate": 0.0} for s in STEPS]
    found = checks(history, tmp_path)
    assert found["lr_zero"].steps == (10, 1000)
    assert found["loss_not_decreasing"].steps == (10, 1000)


def test_flat_loss_alone(tmp_path):
    history = healthy_history()
    rng = np.random.default_rng(2)
    for e in entries(history, "loss"):
        e["loss"] = 1.5 + rng.normal(0, 0.05)
    found = checks(history, tmp_path)
    assert "loss_not_decreasing" in found and "divergence" not in found


def test_divergence_late_in_training(tmp_path):
    history = healthy_history()
    for e in entries(history, "loss"):
        if e["step"] > 700:
            e["loss"] = 0.35 + 0.02 * (e["step"] - 700)
    found = checks(history, tmp_path)
    assert found["divergence"].severity == "error"
    assert 650 <= found["divergence"].steps[0] <= 720 and found["divergence"].steps[1] == 1000
    assert "loss_not_decreasing" not in found


def test_constant_lr_and_no_warmup_are_info(tmp_path):
    history = healthy_history()
    for e in entries(history, "learning_rate"):
        e["learning_rate"] = 5e-5
    found = checks(history, tmp_path)
    assert found["lr_constant"].severity == "info"
    for e in entries(history, "learning_rate"):
        e["learning_rate"] = 5e-5 * (1000 - e["step"] + 10) / 1000
    found = checks(history, tmp_path)
    assert found["lr_no_warmup"].steps == (10,) and "lr_no_decay" not in found


def test_train_val_gap(tmp_path):
    history = healthy_history()
    for e in entries(history, "eval_loss"):
        e["eval_loss"] = 3 * (0.3 + 2 * math.exp(-e["step"] / 250))
    finding = checks(history, tmp_path)["train_val_gap"]
    assert finding.steps == (1000,) and "3.0x the training loss" in finding.message


# -- formats ----------------------------------------------------------------------------------------------------


def write_csv(path: Path, rows: list[dict], columns: list[str]) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_csv_log_with_aliases_and_empty_cells(tmp_path):
    rows = [{"step": e["step"], "train_loss": e.get("loss", ""), "val_loss": e.get("eval_loss", ""),
             "lr": e.get("learning_rate", "")} for e in healthy_history()[:-1]]
    rows[5]["train_loss"] = "nan"
    log = load_training_log(write_csv(tmp_path / "log.csv", rows, ["step", "train_loss", "val_loss", "lr"]))
    assert log.format == "csv" and set(log.signals) == {"loss", "eval_loss", "learning_rate"}
    assert len(log.signals["eval_loss"]) == 10
    assert [f.check for f in diagnose(log)] == ["non_finite"]


def test_jsonl_log(tmp_path):
    history = healthy_history()[:-1]
    set_at(history, "loss", 200, float("nan"))
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in history) + "\n\n")
    log = load_training_log(path)
    assert log.format == "jsonl" and len(log.signals["loss"]) == 100
    assert diagnose(log)[0].steps == (200,)


def test_checkpoint_folder_uses_latest_checkpoint(tmp_path):
    history = healthy_history()
    write_state(tmp_path / "checkpoint-9", history[:20])
    write_state(tmp_path / "checkpoint-10", history)
    path, kind = find_log(tmp_path)
    assert kind == "trainer_state" and path.parent.name == "checkpoint-10"
    write_state(tmp_path, history[:30])
    assert find_log(tmp_path)[0] == tmp_path / "trainer_state.json"


def test_report_is_strict_json(tmp_path):
    history = healthy_history()
    set_at(history, "loss", 500, float("nan"))
    report = training_report(load_training_log(write_state(tmp_path, history)))
    assert json.loads(json.dumps(report, allow_nan=False)) == report
    assert report["signals"]["loss"]["non_finite"] == 1 and report["findings"][0]["steps"] == [500]


def test_tensorboard_without_package_says_how_to_install(tmp_path, monkeypatch):
    (tmp_path / "events.out.tfevents.1.host").write_bytes(b"")
    for name in [m for m in sys.modules if m == "tensorboard" or m.startswith("tensorboard.")]:
        monkeypatch.delitem(sys.modules, name)  # imported by an earlier test's Trainer: forget it
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    with pytest.raises(DataError, match="pip install tensorboard"):
        load_training_log(tmp_path)


def test_tensorboard_events(tmp_path):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "runs" / "one"))
    for e in healthy_history()[:-1]:
        for key, tag in [("loss", "train/loss"), ("eval_loss", "eval/loss"), ("grad_norm", "train/grad_norm")]:
            if key in e:
                writer.add_scalar(tag, e[key], e["step"])
    writer.close()
    log = load_training_log(tmp_path)
    assert log.format == "tensorboard" and len(log.signals["loss"]) == 100 and diagnose(log) == []


# -- bad input --------------------------------------------------------------------------------------------------


def bad(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("name, text, match", [
    ("log.txt", "step loss\n", r"log.txt: unknown log format"),
    ("log.csv", "", r"log.csv: empty log"),
    ("log.csv", "step,loss\n", r"log.csv: empty log: only a header"),
    ("log.csv", "epoch,loss\n1,2.0\n", r"log.csv: no 'step' field \(fields found: 'epoch', 'loss'\)"),
    ("log.csv", "step,accuracy\n1,0.5\n", r"log.csv: no training loss field \('loss' or 'train_loss'"),
    ("log.csv", "step,loss\n1,2.0\n2,abc\n", r"log.csv, line 3: field 'loss' is 'abc'; expected a number"),
    ("log.csv", "step,loss\n1.5,2.0\n", r"log.csv, line 2: field 'step' is '1.5'"),
    ("log.jsonl", "", r"log.jsonl: empty log"),
    ("log.jsonl", '{"step": 1, "loss": 2}\n{"step": 2,\n', r"log.jsonl, line 2: not valid JSON"),
    ("log.jsonl", '[1, 2]\n', r"log.jsonl, line 1: expected a JSON object"),
    ("log.jsonl", '{"step": 1, "loss": true}\n', r"log.jsonl, line 1: field 'loss' is True"),
    ("trainer_state.json", '{"global_step": 3}', r"trainer_state.json: no 'log_history' field"),
    ("trainer_state.json", '{"log_history": []}', r"trainer_state.json: empty log"),
    ("trainer_state.json", '{"log_history": [{"loss": 1.0}]}', r"trainer_state.json: no 'step' field"),
    ("trainer_state.json", '{"log_history": [{"step": 1, "eval_loss": 1.0}]}', r"no training loss field"),
    ("trainer_state.json", '{"log_history": [', r"trainer_state.json, line 1: not valid JSON"),
])
def test_bad_logs_raise_one_line_errors(tmp_path, name, text, match):
    with pytest.raises(DataError, match=match) as info:
        load_training_log(bad(tmp_path, name, text))
    assert "\n" not in str(info.value)


def test_missing_path_and_empty_folder(tmp_path):
    with pytest.raises(DataError, match="no such file or folder"):
        load_training_log(tmp_path / "nope")
    with pytest.raises(DataError, match="no trainer_state.json, checkpoint-"):
        load_training_log(tmp_path)


# -- CLI --------------------------------------------------------------------------------------------------------


def test_cli_healthy_log_and_json(tmp_path):
    path = write_state(tmp_path, healthy_history())
    result = CliRunner().invoke(app, ["training", str(path), "--json-out", str(tmp_path / "report.json")])
    assert result.exit_code == 0, result.output
    assert "No problems found" in result.stdout
    assert json.loads((tmp_path / "report.json").read_text())["findings"] == []


def test_cli_reports_findings(tmp_path):
    history = healthy_history()
    set_at(history, "loss", 500, float("nan"))
    result = CliRunner().invoke(app, ["training", str(write_state(tmp_path, history))])
    assert result.exit_code == 0
    assert "ERROR" in result.stdout and "step 500" in result.stdout and "what to do" in result.stdout


@pytest.mark.parametrize("name, text", [("log.csv", "step,accuracy\n1,0.5\n"), ("log.txt", "x")])
def test_cli_bad_input_exits_2(tmp_path, name, text):
    result = CliRunner().invoke(app, ["training", str(bad(tmp_path, name, text))])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert name in result.stderr


def test_cli_missing_path_exits_2(tmp_path):
    result = CliRunner().invoke(app, ["training", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "no such file or folder" in result.stderr


def test_cli_json_to_a_folder_exits_2(tmp_path):
    path = write_state(tmp_path, healthy_history())
    result = CliRunner().invoke(app, ["training", str(path), "--json-out", str(tmp_path)])
    assert result.exit_code == 2 and "--json-out '" in result.stderr and "not a folder" in result.stderr


# -- the sample checkpoint's real log ---------------------------------------------------------------------------


@pytest.mark.skipif(not os.environ.get("ERRORANALYSIS_SAMPLE") or not (
    Path(os.environ.get("ERRORANALYSIS_SAMPLE", "")) / "checkpoint" / "trainer_state.json").is_file(),
    reason="ERRORANALYSIS_SAMPLE does not point at a folder with checkpoint/trainer_state.json")
def test_sample_checkpoint_log():
    checkpoint = Path(os.environ["ERRORANALYSIS_SAMPLE"]) / "checkpoint"
    log = load_training_log(checkpoint)
    assert log.format == "trainer_state" and len(log.signals["loss"]) >= 1
    report = training_report(log)
    assert json.loads(json.dumps(report, allow_nan=False)) == report
    assert not [f for f in report["findings"] if f["check"] == "non_finite"]
    assert CliRunner().invoke(app, ["training", str(checkpoint)]).exit_code == 0

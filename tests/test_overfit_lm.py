"""`overfit --task generation` (issue 25, part 2): memorizing SFT answers with a causal LM. A tiny random Llama
(test_generation's fixture model) for the wiring and each diagnosis; SmolLM2-135M from the packaged GGUF for the
real memorization (slow)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import write_jsonl
from test_generation import build_tiny_causal_lm
from typer.testing import CliRunner

from erroranalysis.checklist.memorize import OverfitParams
from erroranalysis.checklist.overfit import overfit_check
from erroranalysis.checklist.sft_rows import IGNORE, encode_row, encode_rows
from erroranalysis.cli.app import app
from erroranalysis.core.errors import ParameterError

ANIMALS = ["fox", "dog", "cat", "cow", "owl", "bee", "elk", "ram"]


def sft_rows(n=8):
    return [{"messages": [{"role": "user", "content": f"Name animal {i}."},
                          {"role": "assistant", "content": ANIMALS[i % len(ANIMALS)]}]} for i in range(n)]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """A 32-wide model gains nothing from threads, and on a loaded machine they cost 20x (3 s against 65 s)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("overfit_lm")
    return {"model": build_tiny_causal_lm(root / "lm"), "data": write_jsonl(root / "sft.jsonl", sft_rows()),
            "root": root}


@pytest.fixture(scope="module")
def lm(tiny):
    from erroranalysis.infer.causal_lm import load_causal_lm

    return load_causal_lm(tiny["model"], device="cpu")


def check(model, data, params):
    return overfit_check(model, data, params, task="generation")


def fast(**values) -> OverfitParams:
    return OverfitParams(**{"n": 8, "batch_size": 8, "lr": 1e-2, "steps": 150, "control": False,
                            "device": "cpu", **values})


def weights_hash(folder: Path) -> str:
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


def test_masking_is_answer_only_through_the_end_of_turn(lm):
    import pandas as pd

    row = pd.Series({"messages": sft_rows()[1]["messages"], "_line": 2})
    e = encode_row(lm, row, 1, "sft.jsonl", 512)
    tok = lm.tokenizer
    prompt = tok.apply_chat_template(sft_rows()[1]["messages"][:1], tokenize=False, add_generation_prompt=True)
    assert tok.decode(e.prompt_ids) == prompt
    assert tok.decode(e.answer_ids) == "dog<|im_end|>" and e.answer_ids[-1] in lm.eos_ids
    assert e.train_labels[:len(e.prompt_ids)] == [IGNORE] * len(e.prompt_ids)
    end = len(e.prompt_ids) + len(e.answer_ids)
    assert e.train_labels[len(e.prompt_ids):end] == e.train_ids[len(e.prompt_ids):end]
    assert set(e.train_labels[end:]) <= {IGNORE}  # the template's text after the end of turn, as TRL masks it
    # prompt/completion strings: the completion and EOS are trained
    plain = encode_row(lm, pd.Series({"prompt": "Name animal 1.", "completion": " dog", "_line": 1}), 0, "f", 512)
    assert plain.answer_ids[-1] == lm.eos_ids[0] and tok.decode(plain.answer_ids[:-1]) == " dog"


SAME_ROWS = {
    "messages": [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name one."},
                               {"role": "assistant", "content": "fox"}, {"role": "user", "content": "Another?"},
                               {"role": "assistant", "content": "owl"}]}, *sft_rows(3)],
    "prompt_completion": [{"prompt": f"Name animal {i}.", "completion": f" {a}"} for i, a in enumerate(ANIMALS[:4])],
    "conversational": [{"prompt": [{"role": "user", "content": f"Name animal {i}."}],
                        "completion": [{"role": "assistant", "content": a}]} for i, a in enumerate(ANIMALS[:4])],
}


@pytest.mark.parametrize("fmt", sorted(SAME_ROWS))
def test_the_labels_trained_are_the_spans_sft_check_reports(lm, tmp_path, fmt):
    """One masking: the check's -100 labels are, token for token, what sft-check reports as trained on the same rows
    (messages under --assistant-only, prompt/completion under TRL's default)."""
    from erroranalysis.sft import SftParams, check, facts, read_rows
    from erroranalysis.sources.table import read_table

    data = write_jsonl(tmp_path / f"{fmt}.jsonl", SAME_ROWS[fmt])
    mode = "assistant-only" if fmt == "messages" else "trl"
    reported = check(read_rows(data), facts(lm.tokenizer, str(lm.path)), SftParams(mode=mode, max_length=512)).rows
    frame, _ = read_table(data)
    examples = encode_rows(lm, frame, range(len(frame)), str(data), 512)
    assert len(examples) == len(reported) == len(SAME_ROWS[fmt])
    for e, (_, row) in zip(examples, reported.iterrows()):
        trained = np.asarray(e.train_labels) != IGNORE
        assert int(trained.sum()) == row["n_trained"] > 0
        cuts = np.flatnonzero(np.diff(trained.astype(np.int8))) + 1
        runs = np.split(np.asarray(e.train_ids), cuts)
        states = np.split(trained, cuts)
        ours = [(lm.tokenizer.decode(r.tolist()), int(s[0])) for r, s in zip(runs, states)]
        assert ours == list(zip(row["segments"], row["segment_state"]))
    if fmt == "messages":  # both assistant turns trained (TRL's assistant_only_loss); the last is the answer
        assert [s for s, state in zip(reported.iloc[0]["segments"], reported.iloc[0]["segment_state"])
                if state == 1] == ["fox<|im_end|>", "owl<|im_end|>"]
        assert examples[0].answer_text == "owl" and lm.tokenizer.decode(examples[0].answer_ids) == "owl<|im_end|>"


def test_a_healthy_setup_memorizes_and_leaves_the_model_alone(tiny):
    before = weights_hash(tiny["model"])
    result = check(tiny["model"], tiny["data"], fast())
    assert result.memorized, [f.message for f in result.findings]
    assert [f.check for f in result.findings] == ["memorized"]
    assert all(e["reproduced"] for e in result.examples)
    assert [e["output"] for e in result.examples] == [e["answer"] for e in result.examples]
    assert max(e["final_loss"] for e in result.examples) < 0.5 and result.curve.final_loss <= 0.1
    assert result.masking == "answer only" and result.inputs["n_answer_truncated"] == 0
    assert weights_hash(tiny["model"]) == before
    json.dumps(result.to_dict(), allow_nan=False)


def test_every_label_masked_is_nothing_trained_from_the_first_step(tiny, lm):
    rows = []
    for row in sft_rows():
        e = encode_row(lm, __import__("pandas").Series({**row, "_line": 1}), 0, "f", 512)
        ids = e.prompt_ids + e.answer_ids
        rows.append({"input_ids": ids, "labels": [IGNORE] * len(ids)})
    data = write_jsonl(tiny["root"] / "masked.jsonl", rows)
    result = check(tiny["model"], data, fast(steps=50))
    checks = [f.check for f in result.findings]
    assert not result.memorized and "nothing_trained" in checks
    assert result.steps_run == 1 and np.isnan(result.curve.loss[0])  # stopped at once: nothing can change
    assert "lr_too_high" not in checks and "no_gradient" not in checks and result.inputs["trained_tokens"] == 0
    assert result.masking == "given labels"


def test_labels_on_the_prompt_only_are_found(tiny, lm):
    import pandas as pd

    rows = []
    for row in sft_rows():
        e = encode_row(lm, pd.Series({**row, "_line": 1}), 0, "f", 512)
        ids = e.prompt_ids + e.answer_ids
        rows.append({**row, "input_ids": ids, "labels": e.prompt_ids + [IGNORE] * len(e.answer_ids)})
    data = write_jsonl(tiny["root"] / "prompt_labels.jsonl", rows)
    result = check(tiny["model"], data, fast(steps=60))
    checks = [f.check for f in result.findings]
    assert not result.memorized and "prompt_trained" in checks and "prompt_labeled" in checks
    assert result.inputs["prompt_labeled_share"] > 0.9


def test_truncated_answers_frozen_weights_and_a_too_high_rate(tiny):
    cut = check(tiny["model"], tiny["data"], fast(max_length=10, steps=4))
    found = {f.check: f for f in cut.findings}
    assert "answer_truncated" in found and "max_length=10" in found["answer_truncated"].message
    frozen = check(tiny["model"], tiny["data"], fast(freeze=".", steps=4))
    assert [f.check for f in frozen.findings][:2] == ["not_memorized", "no_trainable_parameters"]
    high = check(tiny["model"], tiny["data"], fast(lr=9.0, steps=20))
    assert "lr_too_high" in [f.check for f in high.findings]


def test_the_control_shuffles_answers(tiny):
    result = check(tiny["model"], tiny["data"], fast(control=True, steps=10))
    assert result.control is not None and len(result.control.eval_loss) >= 2


def test_lora_trains_adapters_only(tiny):
    result = check(tiny["model"], tiny["data"], fast(lora=True, steps=3))
    assert result.lora and result.params["adapters"] and 0 < result.params["trainable_share"] < 0.5
    assert result.curve.steps == [1, 2, 3] and "mostly_frozen" not in [f.check for f in result.findings]


def test_cli_json_and_bad_input(tiny, tmp_path):
    out = CliRunner().invoke(app, ["overfit", "--task", "generation", "--model", str(tiny["model"]), "--data",
                                   str(tiny["data"]), "--n", "8", "--steps", "3", "--no-control", "--device", "cpu",
                                   "--json"])
    assert out.exit_code == 0, out.output
    body = json.loads(out.stdout)
    assert body["task"] == "generation" and len(body["examples"]) == 8 and body["steps_run"] == 3
    text = CliRunner().invoke(app, ["overfit", "--task", "generation", "--model", str(tiny["model"]), "--data",
                                    str(tiny["data"]), "--n", "8", "--steps", "2", "--no-control", "--device", "cpu"])
    assert text.exit_code == 0 and "did not memorize" in text.output and "reproduced" in text.output
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}])
    out = CliRunner().invoke(app, ["overfit", "--task", "generation", "--model", str(tiny["model"]), "--data",
                                   str(bad), "--device", "cpu"])
    assert out.exit_code == 2 and "bad.jsonl, line 1, column 'messages': the last message is 'user'" in out.output
    with pytest.raises(ParameterError, match="lora"):
        overfit_check(tiny["model"], tiny["data"], OverfitParams(lora=True))


@pytest.mark.slow
def test_smollm2_memorizes_4_sft_examples_on_cpu(tmp_path, monkeypatch):
    """SmolLM2-135M-Instruct (the packaged GGUF, converted once and cached) memorizes 4 arbitrary short answers with
    the loss on the answer only, and greedy decoding then writes each answer exactly. 4 of the 32 rows, with a short
    system prompt (31 tokens a row instead of 45 under SmolLM2's default one), in one batch: memorized at step 18
    (answer loss 4.2 -> 0.027) in 67 s on the 2-core machine, where 8 rows took 91 s (step 22) and 16 rows in batches
    of 8 took 96 steps (290 s), so the suite stays within 10 minutes; `benchmarks/overfit_lm.py` memorizes all 32."""
    from test_generation import _smollm2

    gguf = _smollm2()
    monkeypatch.delenv("ERRORANALYSIS_CACHE_DIR", raising=False)  # share the user's conversion cache
    words = [f"{a}{b}" for a in ("amber", "basil", "cedar", "delta") for b in ("fox", "gull", "hawk", "ibis", "jay",
                                                                               "kite", "lark", "mole")]
    rows = [{"messages": [{"role": "system", "content": "Answer."},
                          {"role": "user", "content": f"Code word number {i}?"},
                          {"role": "assistant", "content": f"The code word is {w}."}]} for i, w in enumerate(words)]
    data = write_jsonl(tmp_path / "sft.jsonl", rows)
    result = check(gguf, data, OverfitParams(n=4, batch_size=4, lr=3e-4, steps=80,
                                             control=False, device="cpu", max_length=128))
    assert result.memorized, ([f.message for f in result.findings], result.curve.eval_loss)
    assert all(e["reproduced"] for e in result.examples) and len(result.examples) == 4


def test_doctor_for_a_causal_lm_walks_the_checklist(tiny, tmp_path):
    """`doctor --task generation`: memorize the SFT rows, the log (none here), a generation run, its failures and
    contamination of its prompts with the training file, in checklist order, into doctor.md."""
    long = " ".join(f"word{i}" for i in range(14))
    train = sft_rows() + [{"messages": [{"role": "user", "content": f"{long} copied"},
                                         {"role": "assistant", "content": "yes"}]}]
    sft = write_jsonl(tmp_path / "sft.jsonl", train)
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [{"id": f"p{i}", "prompt": (long if i == 0 else f"Say {i}."),
                                                       "reference": "fox"} for i in range(6)])
    out = CliRunner().invoke(app, ["doctor", "--task", "generation", "--model", str(tiny["model"]), "--data",
                                   str(prompts), "--id-column", "id", "--train", str(sft), "--out",
                                   str(tmp_path / "doc"), "--n", "8", "--steps", "3", "--no-control", "--device",
                                   "cpu", "--max-new-tokens", "4", "--output-checks", "exact", "--check-embedder",
                                   "none", "--json"])
    assert out.exit_code == 0, out.output
    body = json.loads(out.stdout)
    keys = [s["key"] for s in body["sections"]]
    assert keys == ["memorize", "training_loss", "validation_loss", "classes", "examples", "labels"]
    sections = {s["key"]: s for s in body["sections"]}
    assert sections["memorize"]["status"] == "problem"  # 3 steps memorize nothing
    assert sections["training_loss"]["status"] == "skipped"
    assert any(f["check"] == "contamination" for f in sections["labels"]["findings"])
    report = (tmp_path / "doc" / "doctor.md").read_text(encoding="utf-8")
    assert "Can it memorize a few SFT answers?" in report and "Which outputs fail?" in report
    bad = CliRunner().invoke(app, ["doctor", "--task", "generation", "--model", str(tiny["model"]), "--data",
                                   str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "doc2")])
    assert bad.exit_code == 2 and not (tmp_path / "doc2").exists()

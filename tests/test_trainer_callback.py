"""The Trainer callback on a real (tiny) fine-tune: one run per evaluation, the same predictions as a separate run of
the saved checkpoint, the training log in each run, per-class metrics in the Trainer's logs (and so in every
report_to integration: TensorBoard here), and the same for a causal LM with output checks. Plus the reuse parts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import LABELS, build_tiny_checkpoint, eval_rows, write_jsonl
from typer.testing import CliRunner

from erroranalysis import rundir, stages
from erroranalysis.cli.app import app
from erroranalysis.core.errors import DataError
from erroranalysis.integrations import IncrementalReducer
from erroranalysis.labels import labels_db_for
from erroranalysis.rundir import Run
from erroranalysis.sources.table import DataOptions

FAST = stages.AfterParams(checks=None, cluster=stages.ClusterParams(reducer="pca", layout="pca", min_failures=5))


def encode(tokenizer, rows, max_length=32):
    enc = tokenizer([r["text"] for r in rows], truncation=True, max_length=max_length)
    return [{"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i],
             "labels": LABELS.index(r["label"])} for i, r in enumerate(rows)]


def make_trainer(root: Path, *, callbacks=(), report_to=(), max_steps=6, eval_steps=2, **extra):
    import transformers
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments

    transformers.logging.set_verbosity_error()
    base = build_tiny_checkpoint(root / "base")
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForSequenceClassification.from_pretrained(base)
    rows = eval_rows(60)
    args = TrainingArguments(
        output_dir=str(root / "out"), max_steps=max_steps, per_device_train_batch_size=8, learning_rate=5e-3,
        eval_strategy="steps" if eval_steps else "no", eval_steps=eval_steps or None, save_strategy="steps",
        save_steps=eval_steps or max_steps, logging_steps=1, report_to=list(report_to),
        use_cpu=True, disable_tqdm=True, seed=0, **extra)
    from transformers import DataCollatorWithPadding

    return Trainer(model=model, args=args, train_dataset=encode(tokenizer, rows), eval_dataset=encode(tokenizer, rows),
                   data_collator=DataCollatorWithPadding(tokenizer), processing_class=tokenizer,
                   callbacks=list(callbacks))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 6-step fine-tune evaluating every 2 steps, with the callback attached and TensorBoard reporting."""
    from transformers import TrainerCallback

    from erroranalysis.integrations import attach

    class Recorder(TrainerCallback):
        """What a report_to integration sees: every on_log call, and the model's mode then."""

        logs: list = []

        def on_log(self, args, state, control, logs=None, model=None, **kwargs):
            self.logs.append(dict(logs or {}))

    root = tmp_path_factory.mktemp("trained")
    data = write_jsonl(root / "eval.jsonl", eval_rows(60))
    recorder = Recorder()
    trainer = make_trainer(root, callbacks=[recorder], report_to=["tensorboard"])
    callback = attach(trainer, data, out=root / "runs" / "exp", data=DataOptions(id_column="id"), after=FAST,
                      infer=stages.InferParams(max_length=32, batch_size=16), gate=True)
    trainer.train()
    return {"root": root, "data": data, "trainer": trainer, "callback": callback, "recorder": recorder}


@pytest.mark.slow
def test_one_run_per_evaluation_with_the_step_and_the_training_log(trained):
    exp = trained["root"] / "runs" / "exp"
    assert sorted(p.name for p in exp.iterdir() if p.is_dir()) == ["step-000002", "step-000004", "step-000006"]
    for step in (2, 4, 6):
        run = Run.open(exp / f"step-{step:06d}")
        training = run.manifest["training"]
        assert training["step"] == step and training["epoch"] == pytest.approx(step / 8)  # 8 batches an epoch
        assert training["source"] == "callback" and training["checkpoint"].endswith(f"out/checkpoint-{step}")
        assert run.manifest["model"]["in_memory"] is True
        log = json.loads(run.file(rundir.TRAINER_STATE).read_text())
        assert log["global_step"] == step and max(e["step"] for e in log["log_history"]) == step
        assert {"loss", "eval_loss"} <= {k for e in log["log_history"] for k in e}
        assert training["last"]["loss"] == next(e["loss"] for e in reversed(log["log_history"]) if "loss" in e)
        assert rundir.HIDDEN not in run.manifest["artifacts"]  # per-step runs keep no hidden states by default
        assert {s: v["status"] for s, v in run.manifest["stages"].items()} == {
            "infer": "done", "metrics": "done", "slices": "done", "cluster": "done"}
    assert len({labels_db_for(p) for p in exp.iterdir() if p.is_dir()}) == 1
    assert [p.name for p in trained["callback"].runs] == ["step-000002", "step-000004", "step-000006"]


@pytest.mark.slow
@pytest.mark.parametrize("step", [2, 6])
def test_predictions_match_a_separate_run_of_the_saved_checkpoint(trained, step, tmp_path):
    root = trained["root"]
    result = CliRunner().invoke(app, ["run", "--model", str(root / "out" / f"checkpoint-{step}"), "--data",
                                      str(trained["data"]), "--id-column", "id", "--max-length", "32",
                                      "--batch-size", "16", "--out", str(tmp_path / "separate"), "--no-cluster",
                                      "--no-data-checks", "--no-slices"])
    assert result.exit_code == 0, result.output
    separate, mine = Run.open(tmp_path / "separate"), Run.open(root / "runs" / "exp" / f"step-{step:06d}")
    assert stages.same_predictions(mine, separate)
    np.testing.assert_allclose(np.asarray(mine.probs()), np.asarray(separate.probs()), atol=1e-6)
    np.testing.assert_allclose(mine.predictions()["loss"], separate.predictions()["loss"], atol=1e-5)


@pytest.mark.slow
def test_the_trainer_logs_per_class_f1_and_error_types(trained):
    history = trained["trainer"].state.log_history
    ours = [e for e in history if any(k.startswith("eval_ea/") for k in e)]
    assert [e["step"] for e in ours] == [2, 4, 6]
    for e in ours:
        run = Run.open(trained["root"] / "runs" / "exp" / f"step-{e['step']:06d}")
        per_class = {c["label"]: c["f1"] for c in run.metrics()["per_class"]}
        assert {label: e[f"eval_ea/f1/{label}"] for label in LABELS} == pytest.approx(per_class)
        assert e["eval_ea/accuracy"] == pytest.approx(run.metrics()["overall"]["accuracy"])
        # the Trainer evaluated the same 60 examples at the same length: its loss is the callback's, computed apart
        trainer_loss = next(h["eval_loss"] for h in history if h.get("step") == e["step"] and "eval_loss" in h)
        assert e["eval_ea/loss"] == pytest.approx(trainer_loss, abs=1e-4)
        types = {k: v for k, v in e.items() if k.startswith("eval_ea/type/")}
        assert sum(types.values()) <= e["eval_ea/n_failures"] and e["eval_ea/types"] == len(types)
    assert "eval_ea/regressions" in ours[1] and "eval_ea/regressions" not in ours[0]  # gated from the 2nd step
    seen = [logs for logs in trained["recorder"].logs if "eval_ea/accuracy" in logs]
    assert len(seen) == 3  # every callback's on_log received them (report_to integrations included)


@pytest.mark.slow
def test_tensorboard_received_them(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folders = [p.parent for p in (trained["root"] / "out").rglob("events.out.tfevents.*")]
    tags = set()
    for folder in folders:
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        tags |= set(acc.Tags()["scalars"])
    assert {f"eval/ea/f1/{label}" for label in LABELS} <= tags and "eval/ea/accuracy" in tags


@pytest.mark.slow
def test_the_timeline_of_the_run(trained):
    doc = stages.build_timeline(trained["root"] / "runs" / "exp")
    assert [r["step"] for r in doc["steps"]] == [2, 4, 6]
    assert {"loss", "learning_rate", "grad_norm", "eval_loss"} <= set(doc["signals"])
    assert all(t["type_id"].startswith("T") for t in doc["types"])


@pytest.mark.slow
def test_every_n_steps_without_evaluation_and_float16_hidden_states(tmp_path):
    from erroranalysis.integrations import attach

    data = write_jsonl(tmp_path / "eval.jsonl", eval_rows(30))
    trainer = make_trainer(tmp_path, max_steps=3, eval_steps=0)
    callback = attach(trainer, data, out=tmp_path / "runs" / "every", data=DataOptions(id_column="id"),
                      after=stages.AfterParams(checks=None, slices=None, cluster=None), every=3, keep_hidden=True,
                      infer=stages.InferParams(max_length=32))
    trainer.train()
    run = Run.open(tmp_path / "runs" / "every" / "step-000003")
    assert [p.name for p in callback.runs] == ["step-000003"]
    hidden = run.hidden_states()
    assert hidden.dtype == np.float16 and hidden.shape == (30, 32)
    assert trainer.model.training  # handed back in training mode


@pytest.mark.slow
def test_labels_the_model_does_not_know_fail_before_training(tmp_path):
    from erroranalysis.integrations import attach

    rows = eval_rows(12)
    rows[3]["label"] = "furious"
    data = write_jsonl(tmp_path / "eval.jsonl", rows)
    trainer = make_trainer(tmp_path, max_steps=2)
    attach(trainer, data, out=tmp_path / "runs" / "x", data=DataOptions(id_column="id"), after=FAST)
    with pytest.raises(DataError, match="eval.jsonl, line 4, column 'label': label 'furious' is not one the model"):
        trainer.train()
    assert trainer.state.global_step == 0 and not (tmp_path / "runs" / "x").exists()


@pytest.mark.slow
def test_a_causal_lm_runs_the_generation_stage_with_its_output_checks(tmp_path):
    import transformers
    from test_generation import build_tiny_causal_lm
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    from erroranalysis.infer.generation import GenerationParams
    from erroranalysis.integrations import attach

    transformers.logging.set_verbosity_error()
    folder = build_tiny_causal_lm(tmp_path / "lm")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [
        {"id": f"p{i}", "prompt": f"Classify: item {i} is {'great' if i % 2 else 'awful'}",
         "label": "positive" if i % 2 else "negative"} for i in range(8)])
    enc = tokenizer([f"item {i} is great" for i in range(16)], truncation=True, max_length=16)
    train = [{"input_ids": ids, "attention_mask": m} for ids, m in zip(enc["input_ids"], enc["attention_mask"])]
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=4, per_device_train_batch_size=4,
                             eval_strategy="no", save_strategy="no", logging_steps=1, report_to=[], use_cpu=True,
                             disable_tqdm=True, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=train, processing_class=tokenizer,
                      data_collator=transformers.DataCollatorForLanguageModeling(tokenizer, mlm=False))
    callback = attach(trainer, prompts, out=tmp_path / "runs" / "lm", data=DataOptions(id_column="id"), every=2,
                      generation=GenerationParams(max_new_tokens=4), after=stages.AfterParams(
                          checks=None, slices=None, cluster=None))
    trainer.train()
    assert callback.task == "generation" and [p.name for p in callback.runs] == ["step-000002", "step-000004"]
    run = Run.open(tmp_path / "runs" / "lm" / "step-000004")
    assert run.task == "generation" and run.manifest["training"]["step"] == 4
    checks = run.metrics()["output_checks"]
    ours = [e for e in trainer.state.log_history if "eval_ea/pass_rate" in e]
    assert [e["step"] for e in ours] == [2, 4] and ours[-1]["eval_ea/pass_rate"] == pytest.approx(checks["pass_rate"])
    assert {f"eval_ea/check/{c['check']}" for c in checks["per_check"]} <= set(ours[-1])
    doc = stages.build_timeline(tmp_path / "runs" / "lm")
    assert doc["task"] == "generation" and doc["steps"][-1]["checks"] == {
        c["check"]: c["pass_rate"] for c in checks["per_check"]}


# -- reuse across steps (fast) ----------------------------------------------------------------------------------


@pytest.mark.parametrize("base", ["pca", "none"])
def test_the_reducer_is_reused_while_the_failures_overlap_and_refitted_after(base):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 16)).astype(np.float32)
    reducer = IncrementalReducer(base, min_shared=0.85)
    first = reducer.fit_transform(X[:80])
    assert (reducer.refits, reducer.reuses, reducer.last) == (1, 0, "refit")
    again = reducer.fit_transform(np.concatenate([X[8:80], X[80:88]]))  # 72 of 80 shared, both ways
    assert (reducer.refits, reducer.reuses, reducer.last) == (1, 1, "reused")
    np.testing.assert_array_equal(again[:72], first[8:80])  # the fitted coordinates themselves
    assert np.isfinite(again).all() and again.shape == (80, first.shape[1])
    reducer.fit_transform(X[:40])  # all of these were fitted, but half of the fit no longer fails
    assert (reducer.refits, reducer.last) == (2, "refit")
    reducer.fit_transform(np.concatenate([X[:30], X[50:60]]))  # 30 of 40 fitted: no longer fits
    assert (reducer.refits, reducer.last) == (3, "refit")
    assert "reused across steps" in reducer.key and IncrementalReducer().min_shared == 0.9


def test_memory_embedder_embeds_each_text_once(monkeypatch, tmp_path):
    from erroranalysis.embed import models as embedding
    from erroranalysis.integrations import MemoryMiniLM

    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(tmp_path / "cache"))
    emb = MemoryMiniLM(cache=False)
    texts = ["the match ended in a draw", "shares rose sharply", "the match ended in a draw"]
    first = emb.embed_texts(texts)
    assert emb.misses == 2 and emb.hits == 1  # identical texts once
    second = emb.embed_texts(texts[:2] + ["a new text"])
    assert emb.misses == 3 and emb.hits == 3
    np.testing.assert_array_equal(second[:2], first[:2])
    plain = embedding.MiniLMEmbedder(cache=False).embed_texts(texts)
    np.testing.assert_allclose(first, plain, atol=1e-6)
    assert emb.key == embedding.MiniLMEmbedder().key and embedding.describe(emb)["name"] == "minilm"



def test_stop_on_regression_stops_training_and_a_callback_without_the_trainer_still_logs(tiny_checkpoint, tmp_path):
    """The callback's own path (no Trainer loop): a step whose model is planted worse than the step before."""
    from test_watch import biased_checkpoint
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        TrainerControl,
        TrainerState,
        TrainingArguments,
    )

    from erroranalysis.integrations import ErrorAnalysisCallback

    data = write_jsonl(tmp_path / "eval.jsonl", eval_rows(30))
    callback = ErrorAnalysisCallback(data, tmp_path / "runs" / "exp", data=DataOptions(id_column="id"),
                                     after=stages.AfterParams(checks=None, slices=None, cluster=None),
                                     infer=stages.InferParams(max_length=32), stop_on_regression=True)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True)
    state, control = TrainerState(), TrainerControl()
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    for step, favor in ((1, 0), (2, 2)):  # always "negative", then always "positive": F1 of negative 0.5 -> 0
        model = AutoModelForSequenceClassification.from_pretrained(
            biased_checkpoint(tmp_path / f"m{step}", tiny_checkpoint, favor=favor)).train()
        state.global_step, state.epoch = step, step / 10
        callback.on_train_begin(args, state, control, model=model, processing_class=tokenizer)
        callback.on_evaluate(args, state, control, model=model)
        assert model.training  # handed back as it came
    assert control.should_training_stop
    assert [g.failed for g in callback.gates] == [True]
    assert any("F1 of class 'negative' fell" in r["text"] for r in callback.gates[0].regressions)
    logged = [e for e in state.log_history if "eval_ea/f1/negative" in e]  # no Trainer: still in the log history
    assert [(e["step"], e["eval_ea/f1/negative"]) for e in logged] == [(1, 0.5), (2, 0.0)]
    assert logged[1]["eval_ea/regressions"] >= 1

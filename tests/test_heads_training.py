"""The Trainer callback and `watch` for the multi-label, regression and token-classification heads (issue 36, part
3): a real `transformers.Trainer` fine-tunes a tiny checkpoint of each head for two steps with the callback
analyzing every step and a checkpoint saved at every step; then `watch` analyzes the saved checkpoints. Each step's
run is the head's own (its task, its metrics), the Trainer's log carries the head's figures, and the callback's run
of a step and watch's run of that step's checkpoint agree (the same weights)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import write_jsonl
from task_fixtures import ML_LABELS, build_head, multilabel_rows, regression_rows
from token_fixtures import TAGS, build_tiny_token_classifier, write_sentences
from typer.testing import CliRunner

from erroranalysis import stages
from erroranalysis.cli.app import app
from erroranalysis.integrations.tracker_values import OVERALL_BY_TASK
from erroranalysis.rundir import TRAINER_STATE, Run
from erroranalysis.sources.table import DataOptions

FAST = stages.AfterParams(checks=None, cluster=stages.ClusterParams(reducer="pca", layout="pca", min_failures=3))
OPTS = DataOptions(id_column="id")
HEADS = ["multilabel", "regression", "token-classification"]
# what each head's step logs beside the error types: its overall figures and (where it has classes) F1 per class
PER_CLASS = {"multilabel": [f"f1/{n}" for n in ML_LABELS], "regression": [],
             "token-classification": ["f1/PER", "f1/LOC"]}


def head(kind: str, root: Path):
    """(checkpoint, eval file, training examples) of a tiny head of `kind`."""
    from transformers import AutoTokenizer

    if kind == "token-classification":
        base = build_tiny_token_classifier(root / "base")
        data = write_sentences(root / "eval.jsonl", n=24)
        rows = [json.loads(line) for line in data.read_text().splitlines()]
        tok = AutoTokenizer.from_pretrained(base)
        enc = tok([r["tokens"] for r in rows], is_split_into_words=True, truncation=True, max_length=32)
        examples = []
        for i, r in enumerate(rows):
            labels, seen = [], set()
            for w in enc.word_ids(i):  # the first sub-token of each word is labelled
                labels.append(-100 if w is None or w in seen else TAGS.index(r["tags"][w]))
                seen.add(w)
            examples.append({"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i],
                             "labels": labels})
        return base, data, examples
    if kind == "multilabel":
        base = build_head(root / "base", labels=ML_LABELS, problem_type="multi_label_classification")
        rows = multilabel_rows(24)
        targets = [[float(n in r["label"]) for n in ML_LABELS] for r in rows]
    else:
        base = build_head(root / "base", num_labels=1, problem_type="regression")
        rows = regression_rows(24)
        targets = [float(r["label"]) for r in rows]
    data = write_jsonl(root / "eval.jsonl", rows)
    enc = AutoTokenizer.from_pretrained(base)([r["text"] for r in rows], truncation=True, max_length=32)
    return base, data, [{"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i],
                         "labels": targets[i]} for i in range(len(rows))]


@pytest.fixture(scope="module", params=HEADS)
def trained(request, tmp_path_factory):
    """Two Trainer steps with the callback analyzing each, a checkpoint saved at each; then watch over them."""
    import transformers
    from transformers import (
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
        DataCollatorForTokenClassification,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
    )

    from erroranalysis.integrations import attach
    from erroranalysis.integrations.watch import Watcher

    kind = request.param
    transformers.logging.set_verbosity_error()
    root = tmp_path_factory.mktemp(kind)
    base, data, examples = head(kind, root)
    tokenizer = AutoTokenizer.from_pretrained(base)
    tokens = kind == "token-classification"
    model = (AutoModelForTokenClassification if tokens else AutoModelForSequenceClassification).from_pretrained(base)
    args = TrainingArguments(output_dir=str(root / "out"), max_steps=2, per_device_train_batch_size=8,
                             learning_rate=1e-3, eval_strategy="no", save_strategy="steps", save_steps=1,
                             logging_steps=1, report_to=[], use_cpu=True, disable_tqdm=True, seed=0)
    collator = DataCollatorForTokenClassification(tokenizer) if tokens else DataCollatorWithPadding(tokenizer)
    trainer = Trainer(model=model, args=args, train_dataset=examples, data_collator=collator,
                      processing_class=tokenizer)
    callback = attach(trainer, data, out=root / "runs" / "callback", data=OPTS, after=FAST, every=1,
                      infer=stages.InferParams(max_length=32, batch_size=16))
    trainer.train()
    said: list[str] = []
    watcher = Watcher(root / "out", data, runs=root / "runs" / "watch", data_opts=OPTS, after=FAST, task=kind,
                      infer=stages.InferParams(max_length=32, batch_size=16, device="cpu"), settle=0,
                      say=said.append)
    outcomes, pending = watcher.once(wait=0)
    return {"kind": kind, "root": root, "data": data, "trainer": trainer, "callback": callback,
            "outcomes": outcomes, "pending": pending, "said": said}


@pytest.mark.slow
def test_the_callback_writes_a_run_of_the_head_per_step(trained):
    kind, callback = trained["kind"], trained["callback"]
    assert [p.name for p in callback.runs] == ["step-000001", "step-000002"]
    for step, path in enumerate(callback.runs, start=1):
        run = Run.open(path)
        assert run.task == kind and run.manifest["training"]["source"] == "callback"
        assert run.manifest["training"]["step"] == step and run.manifest["model"]["in_memory"]
        assert (path / TRAINER_STATE).is_file()  # the training log so far
        overall = run.metrics()["overall"]
        assert overall["n"] == 24 and "n_failures" in overall


@pytest.mark.slow
def test_the_trainer_log_carries_the_heads_figures(trained):
    kind = trained["kind"]
    logged = [e for e in trained["trainer"].state.log_history if any(k.startswith("eval_ea/") for k in e)]
    assert [e["step"] for e in logged] == [1, 2]
    for entry in logged:
        for name in OVERALL_BY_TASK[kind]:
            assert np.isfinite(entry[f"eval_ea/{name}"]), name
        for name in PER_CLASS[kind]:
            assert 0.0 <= entry[f"eval_ea/{name}"] <= 1.0, name
        assert "eval_ea/types" in entry and entry["eval_ea/seconds"] > 0 and np.isfinite(entry["eval_ea/loss"])
    if kind == "regression":  # its per-class figures are those of the gold score's quantile bins
        assert sum(k.startswith("eval_ea/f1/") for k in logged[0]) == 5


@pytest.mark.slow
def test_watch_analyzes_each_saved_checkpoint_as_its_head(trained):
    kind, outcomes = trained["kind"], trained["outcomes"]
    assert not trained["pending"] and [o.error for o in outcomes] == [None, None]
    assert [o.run.name for o in outcomes] == ["step-000001", "step-000002"]
    for o, callback_run in zip(outcomes, trained["callback"].runs):
        run, same = Run.open(o.run), Run.open(callback_run)
        assert run.task == kind and run.manifest["training"]["source"] == "watch"
        assert run.manifest["training"]["checkpoint"] == str(o.checkpoint.resolve())
        ours, theirs = run.metrics()["overall"], same.metrics()["overall"]
        for name in OVERALL_BY_TASK[kind]:  # the checkpoint of step N holds the weights the callback analyzed
            assert ours[name] == pytest.approx(theirs[name], rel=1e-4, abs=1e-6), name
    words = {"multilabel": "subset accuracy", "regression": "MAE", "token-classification": "entity micro F1"}[kind]
    assert sum(words in line for line in trained["said"]) == 2


@pytest.mark.slow
def test_cli_watch_reads_the_head_from_each_checkpoint(trained, tmp_path):
    out = CliRunner().invoke(app, ["watch", str(trained["root"] / "out"), "--data", str(trained["data"]),
                                   "--id-column", "id", "--out", str(tmp_path / "runs"), "--once", "--settle", "0",
                                   "--wait", "0", "--no-slices", "--no-cluster", "--device", "cpu", "--task", "auto",
                                   "--json"])
    assert out.exit_code == 0, out.output
    assert [Run.open(p).task for p in sorted((tmp_path / "runs").glob("step-*"))] == [trained["kind"]] * 2

"""The task registry and head detection: config.json picks the task, or the run is refused in one line."""

from __future__ import annotations

import dataclasses

import pytest

from erroranalysis import tasks
from erroranalysis.core.errors import ModelError


def seq(problem=None, k=3, arch="BertForSequenceClassification"):
    config = {"architectures": [arch], "id2label": {str(i): f"l{i}" for i in range(k)}}
    if problem:
        config["problem_type"] = problem
    return config


@pytest.mark.parametrize("config, task", [
    (seq(), "classification"),
    (seq("single_label_classification"), "classification"),
    (seq("multi_label_classification"), "multilabel"),
    (seq("regression", k=1), "regression"),
    (seq(k=1), "regression"),  # transformers reads num_labels == 1 as regression
    ({"architectures": ["GPT2LMHeadModel"]}, "generation"),
    ({"architectures": ["LlamaForCausalLM"]}, "generation"),
])
def test_detect_reads_the_head(config, task):
    assert tasks.detect(config) == task


@pytest.mark.parametrize("config, asked, task", [
    (seq(), "multilabel", "multilabel"),  # problem_type unset: the user's word decides
    (seq(k=1), "regression", "regression"),
    (seq("multi_label_classification"), "multilabel", "multilabel"),
])
def test_task_agreeing_with_config(config, asked, task):
    assert tasks.detect(config, asked) == task


@pytest.mark.parametrize("arch, what", [
    ("BertForQuestionAnswering", "question answering"),
    ("RobertaForMultipleChoice", "multiple choice"),
    ("ViTForImageClassification", "image classification"),
    ("Wav2Vec2ForCTC", "speech recognition"),
    ("BertForMaskedLM", "masked language"),
    ("BertModel", "bare backbone"),
    ("FancyNewThing", "does not know"),
])
def test_unsupported_heads_refused_in_one_line(arch, what):
    with pytest.raises(ModelError) as info:
        tasks.detect({"architectures": [arch], "id2label": {"0": "a", "1": "b"}}, source="ck/config.json")
    message = str(info.value)
    assert "\n" not in message and arch in message and what in message
    assert "supported: classification, multilabel, regression, generation" in message


@pytest.mark.parametrize("config, asked, needle", [
    (seq("single_label_classification"), "multilabel", "contradicts"),
    (seq("multi_label_classification"), "classification", "contradicts"),
    (seq("regression", k=1), "multilabel", "contradicts"),
    (seq(k=3), "regression", "multi-output regression"),
    (seq("regression", k=3), None, "multi-output regression"),
    (seq(k=1), "classification", "at least 2 labels"),
    (seq(), "generation", "sequence-classification head"),
    ({"architectures": ["GPT2LMHeadModel"]}, "classification", "--task classification was given"),
    (seq("made_up"), None, "unknown problem_type"),
    ({}, None, "names no architectures"),
])
def test_contradictions_refused(config, asked, needle):
    with pytest.raises(ModelError) as info:
        tasks.detect(config, asked)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_declared_but_unavailable_task_refused(monkeypatch):
    """A head declared for a later version (available=False) is refused in one line, by name and by config."""
    declared = dataclasses.replace(tasks.TASKS["token-classification"], available=False)
    monkeypatch.setitem(tasks.TASKS, "token-classification", declared)
    for ask in (lambda: tasks.detect({"architectures": ["BertForTokenClassification"]}),
                lambda: tasks.get("token-classification")):
        with pytest.raises(ModelError, match="not supported by this version") as info:
            ask()
        assert "\n" not in str(info.value) and "token-classification" not in tasks.supported()


def test_every_task_names_a_loader_and_a_runner_the_stages_find():
    """`analyze` and `run` ask the registry: each task's loader and runner import and take one signature each."""
    import inspect

    from erroranalysis import stages

    for name, task in tasks.TASKS.items():
        loader = task.loader_function()
        params = inspect.signature(loader).parameters
        assert list(params)[1:3] == ["out", "reading"], name
        assert {"task", "after", "overwrite", "embedder", "progress", "engine"} <= set(params), name
        runner = inspect.signature(task.runner_function()).parameters
        assert list(runner)[:4] == ["model", "data", "out", "setup"], name
        assert {"task", "after", "overwrite", "progress", "engine", "embedder", "log"} <= set(runner), name
    assert stages.Reading().pred_column_of(tasks.TASKS["token-classification"]) == "pred_tags"
    assert stages.Reading(pred_column="tags").pred_column_of(tasks.TASKS["token-classification"]) == "tags"


def test_a_task_without_a_loader_is_refused_by_analyze(monkeypatch, tmp_path):
    from erroranalysis import stages

    monkeypatch.setitem(tasks.TASKS, "regression", dataclasses.replace(tasks.TASKS["regression"], loader=None))
    with pytest.raises(ModelError, match="--task regression: cannot read predictions made elsewhere"):
        stages.analyze("regression", tmp_path / "p.jsonl", tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_threshold_rule_and_params():
    assert tasks.TaskParams(threshold="0.3").threshold == 0.3
    assert tasks.TaskParams(threshold="t.json").threshold == "t.json"
    with pytest.raises(Exception, match="threshold"):
        tasks.TaskParams(threshold=1.5)
    with pytest.raises(Exception, match="relative_tolerance"):
        tasks.TaskParams(relative_tolerance=True)


# ---------------------------------------------------------------------------- refusals at `run`, on real checkpoints

REFUSALS = [
    ({"architecture": "BertForQuestionAnswering"}, [], r"\['BertForQuestionAnswering'\] is a head for extractive question answering"),
    ({"architecture": "BertForMultipleChoice"}, [], r"is a head for multiple choice"),
    ({"edit": lambda c: c.update(architectures=["ViTForImageClassification"])}, [], r"a head for image classification"),
    ({"edit": lambda c: c.update(architectures=["MysteryForThings"])}, [], r"an architecture erroranalysis does not"),
    ({"architecture": "BertModel"}, [], r"a bare backbone"),
    ({"problem_type": "single_label_classification", "labels": ["a", "b", "c"]}, ["--task", "multilabel"],
     r"problem_type 'single_label_classification'.*contradicts"),
    ({"problem_type": "multi_label_classification", "labels": ["a", "b", "c"]}, ["--task", "classification"],
     r"contradicts"),
    ({"labels": ["a", "b", "c"]}, ["--task", "regression"], r"multi-output regression"),
    ({"labels": ["a", "b", "c"]}, ["--task", "generation"], r"sequence-classification head"),
]


@pytest.mark.parametrize("head, args, message", REFUSALS)
def test_unsupported_heads_refused_at_run(head, args, message, tmp_path):
    from task_fixtures import build_head, write_jsonl
    from test_cli_run import assert_user_error, invoke

    checkpoint = build_head(tmp_path / "ck", **head)
    data = write_jsonl(tmp_path / "e.jsonl", [{"text": "hello", "label": "a"}])
    out = tmp_path / "run"
    assert_user_error(invoke("run", "--model", checkpoint, "--data", data, "--out", out, *args), message)
    assert not out.exists()


def test_lists_for_a_single_label_head_refused(tmp_path):
    from task_fixtures import build_head, write_jsonl
    from test_cli_run import assert_user_error, invoke

    checkpoint = build_head(tmp_path / "ck", labels=["a", "b", "c"], problem_type="single_label_classification")
    data = write_jsonl(tmp_path / "e.jsonl", [{"text": "x", "label": "a"}, {"text": "y", "label": ["a", "b"]}])
    out = tmp_path / "run"
    assert_user_error(invoke("run", "--model", checkpoint, "--data", data, "--out", out),
                      r"e.jsonl, line 2, column 'label': the gold is a list .*single-label classifier \(problem_type "
                      r"'single_label_classification', 3 labels in .*config.json\); pass --task multilabel")
    assert not out.exists()

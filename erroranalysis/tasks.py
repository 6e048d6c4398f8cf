"""The task registry: which heads erroranalysis analyzes, and which task a checkpoint's config.json asks for.

A task is a small set of functions over the one pipeline, not a copy of it: how a batch of logits becomes outputs
(`erroranalysis.infer.heads`), what a failure is, which metrics it gets (`erroranalysis.metrics.<module>`) and how
the app describes an example. The registry names each task's modules by dotted path, so nothing heavy is imported
until a task runs; a task another part of the tool fills in later is declared here with `available=False`.

`detect(config, asked)` reads `architectures`, `problem_type`, `num_labels`/`id2label` and picks the task or refuses
in one line naming what it found and what is supported: a head erroranalysis does not analyze (question answering,
multiple choice, image, audio, masked LM, a bare backbone) is never loaded as a classifier, and a `--task` that the
config contradicts is never obeyed silently.
"""

from __future__ import annotations

from dataclasses import dataclass

from erroranalysis.core.errors import ModelError
from erroranalysis.core.params import Flag, Float, Params, Rule, Text, is_number, param


@dataclass(frozen=True)
class Task:
    """One head erroranalysis analyzes. `head`: the transformers Auto class that loads it; `outputs`: the function
    (dotted path) turning a batch of logits into probabilities/predictions and per-example loss; `metrics`: the
    module computing its metrics.json; `failure`: how a failure is defined, in words (docs and `--help`);
    `available`: False for a task declared for another part of the tool that does not run yet."""

    name: str
    summary: str
    head: str
    outputs: str | None = None
    metrics: str | None = None
    failure: str = ""
    available: bool = True
    sequence_head: bool = False  # an AutoModelForSequenceClassification checkpoint (softmax, sigmoid or regression)
    loader: str | None = None  # the stage `analyze` reads this task's predictions made elsewhere with
    runner: str | None = None  # the stage `run` runs this task's checkpoints with
    pred_column: str = "pred"  # where `analyze` finds the predictions by default

    def outputs_function(self):
        """The function `outputs` names, imported on first use (torch stays unimported until a task runs)."""
        return self._function(self.outputs, "has no sequence-head outputs")

    def runner_function(self):
        """The stage that `run` runs this task's checkpoints with (`erroranalysis.stages.runner`)."""
        return self._function(self.runner, "cannot run a checkpoint")

    def loader_function(self):
        """The stage that `analyze` reads this task's predictions with (`erroranalysis.stages.analyze`)."""
        return self._function(self.loader, "cannot read predictions made elsewhere")

    def _function(self, dotted: str | None, missing: str):
        import importlib

        module, _, name = (dotted or "").partition(":")
        if not name:
            raise ModelError(f"--task {self.name}: {missing}; supported: {supported()}.")
        return getattr(importlib.import_module(module), name)


TASKS: dict[str, Task] = {t.name: t for t in (
    Task("classification", "single-label sequence classification (softmax)", "AutoModelForSequenceClassification",
         outputs="erroranalysis.infer.heads:softmax_outputs", metrics="erroranalysis.metrics.classification",
         failure="the arg-max class differs from the gold label", sequence_head=True,
         loader="erroranalysis.stages.load_predictions:analyze_predictions",
         runner="erroranalysis.stages.runner:sequence_head"),
    Task("multilabel", "multi-label sequence classification (a sigmoid per label)",
         "AutoModelForSequenceClassification", outputs="erroranalysis.infer.heads:sigmoid_outputs",
         metrics="erroranalysis.metrics.multilabel",
         failure="any label wrong: a gold label missed or a label predicted without gold (at --threshold)",
         sequence_head=True, loader="erroranalysis.stages.load_task_predictions:analyze_task_predictions",
         runner="erroranalysis.stages.runner:sequence_head"),
    Task("regression", "sequence regression (one score per text)", "AutoModelForSequenceClassification",
         outputs="erroranalysis.infer.heads:regression_outputs", metrics="erroranalysis.metrics.regression",
         failure="|prediction - gold| above --tolerance, or by default in the worst decile of |error|",
         sequence_head=True, loader="erroranalysis.stages.load_task_predictions:analyze_task_predictions",
         runner="erroranalysis.stages.runner:sequence_head"),
    Task("generation", "generation by a causal LM (a folder or a .gguf file) or an encoder-decoder (T5, BART)",
         "AutoModelForCausalLM or AutoModelForSeq2SeqLM",
         metrics="erroranalysis.metrics.generation", failure="an output check fails or the reference is not matched",
         loader="erroranalysis.stages.load_generations:analyze_generations",
         runner="erroranalysis.stages.runner:generation"),
    Task("token-classification", "token classification (NER, POS, chunking)", "AutoModelForTokenClassification",
         metrics="erroranalysis.metrics.tokens",
         failure="an error span (missed, spurious, wrong type, wrong boundary, wrong type and boundary); a sentence "
                 "fails when it holds one",
         loader="erroranalysis.stages.load_token_predictions:analyze_token_predictions", pred_column="pred_tags",
         runner="erroranalysis.stages.runner:token_classification"),
)}

CHOICES = ("auto", *TASKS)  # what --task takes: auto reads the checkpoint's config.json

# Architecture-name endings of heads erroranalysis does not analyze, with what to call them in the message.
REFUSED_HEADS = (
    ("ForQuestionAnswering", "extractive question answering"),
    ("ForMultipleChoice", "multiple choice"),
    ("ForImageClassification", "image classification"),
    ("ForImageClassificationWithTeacher", "image classification"),
    ("ForObjectDetection", "object detection"),
    ("ForSemanticSegmentation", "image segmentation"),
    ("ForInstanceSegmentation", "image segmentation"),
    ("ForUniversalSegmentation", "image segmentation"),
    ("ForDepthEstimation", "depth estimation"),
    ("ForMaskedImageModeling", "masked image modelling"),
    ("ForAudioClassification", "audio classification"),
    ("ForAudioFrameClassification", "audio frame classification"),
    ("ForCTC", "speech recognition (CTC)"),
    ("ForSpeechSeq2Seq", "speech recognition"),
    ("ForVideoClassification", "video classification"),
    ("ForZeroShotImageClassification", "zero-shot image classification"),
    ("ForMaskedLM", "masked language modelling"),
    ("ForPreTraining", "pre-training heads"),
    ("ForNextSentencePrediction", "next-sentence prediction"),
    ("ForTableQuestionAnswering", "table question answering"),
    ("ForDocumentQuestionAnswering", "document question answering"),
    ("ForVisualQuestionAnswering", "visual question answering"),
)
GENERATIVE_HEADS = ("ForCausalLM", "LMHeadModel")


def supported() -> str:
    """The tasks a run takes, for messages: 'classification, multilabel, ...'."""
    return ", ".join(name for name, t in TASKS.items() if t.available)


def headline(task: str, overall: dict) -> str:
    """The task's headline metrics, for the one line `run` and `watch` print per run."""
    if task == "regression":
        return f"MAE {overall['mae']:.4g}, RMSE {overall['rmse']:.4g}, R² {overall['r2']:.3f}"
    if task == "token-classification":
        return (f"entity micro F1 {overall['micro_f1']:.3f}, macro F1 {overall['macro_f1']:.3f}, token accuracy "
                f"{overall['token_accuracy']:.3f}, {overall['n_error_spans']} error spans")
    if task == "multilabel":
        return (f"subset accuracy {overall['subset_accuracy']:.3f}, micro F1 {overall['micro_f1']:.3f}, "
                f"macro F1 {overall['macro_f1']:.3f}, Hamming loss {overall['hamming_loss']:.3f}")
    return f"accuracy {overall['accuracy']:.3f}, macro F1 {overall['macro_f1']:.3f}"


def get(name: str) -> Task:
    """The task named `name` (one of TASKS), refused in one line when it does not run in this version."""
    task = TASKS.get(name)
    if task is None:
        raise ModelError(f"--task {name!r} is not a task erroranalysis knows; supported: {supported()}.")
    if not task.available:
        raise ModelError(f"--task {name}: {task.summary} is not supported by this version; supported: {supported()}.")
    return task


def num_labels(config: dict) -> int | None:
    """The head's output size as the config states it: id2label's length, else num_labels; None if neither."""
    id2label = config.get("id2label")
    if isinstance(id2label, dict) and id2label:
        return len(id2label)
    value = config.get("num_labels")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def head_kind(architecture: str, config: dict) -> str:
    """What an architecture name's head is: a task name, "refused:<what>", "backbone" or "unknown"."""
    if architecture.endswith("ForSequenceClassification"):
        return "sequence"
    if architecture.endswith("ForTokenClassification"):
        return "token-classification"
    if architecture.endswith(GENERATIVE_HEADS):
        return "generation"
    if architecture.endswith(("ForConditionalGeneration", "ForSeq2SeqLM")) and config.get("is_encoder_decoder"):
        return "generation"  # an encoder-decoder LM (T5, BART) generates in the generation task
    for ending, what in REFUSED_HEADS:
        if architecture.endswith(ending):
            return f"refused:{what}"
    if architecture.endswith("ForConditionalGeneration"):
        return "refused:multimodal or non-encoder-decoder conditional generation"
    if architecture.endswith("Model"):
        return "backbone"
    return "unknown"


def detect(config: dict, asked: str | None = None, *, source: str = "config.json") -> str:
    """The task a checkpoint runs as: read from its config (`architectures`, `problem_type`, `num_labels`), checked
    against `asked` (the user's --task; None or "auto" to read it from the config). Raises a one-line ModelError
    naming what the config says and what is supported when the head is not one erroranalysis analyzes, or when
    `asked` contradicts the config."""
    asked = None if asked in (None, "auto") else asked
    if asked is not None:
        get(asked)
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise ModelError(f"{source}: 'architectures' is {architectures!r}, not a list of class names; re-save "
                         "the checkpoint with save_pretrained.")
    if not architectures:
        if asked is None:
            raise ModelError(f"{source}: names no architectures, so the head cannot be told; pass --task "
                             f"({supported()}) or re-save the model with save_pretrained.")
        return asked if not TASKS[asked].sequence_head else sequence_task(config, asked, source)
    kinds = {head_kind(a, config) for a in architectures}
    if len(kinds) > 1:
        raise ModelError(f"{source}: architectures {architectures} name different heads; keep the one the weights "
                         "are for.")
    kind = kinds.pop()
    found = f"{source}: architectures {architectures}"
    if kind.startswith("refused:"):
        raise ModelError(f"{found} is a head for {kind.split(':', 1)[1]}, which erroranalysis does not analyze; "
                         f"supported: {supported()}.")
    if kind in ("backbone", "unknown"):
        what = "a bare backbone without a task head" if kind == "backbone" else "an architecture erroranalysis " \
                                                                                 "does not know"
        raise ModelError(f"{found} is {what}; supported: {supported()} (sequence classification, causal LM"
                         + (", token classification" if TASKS["token-classification"].available else "")
                         + ", seq2seq LM heads).")
    if kind == "sequence":
        return sequence_task(config, asked, source)
    if asked is not None and asked != kind:
        raise ModelError(f"{found} is a {TASKS[kind].summary} head but --task {asked} was given; drop --task or "
                         "use the matching checkpoint.")
    return get(kind).name


PROBLEM_TYPES = {"single_label_classification": "classification", "multi_label_classification": "multilabel",
                 "regression": "regression"}


def sequence_task(config: dict, asked: str | None, source: str = "config.json") -> str:
    """classification, multilabel or regression for a sequence-classification head, the way transformers reads
    the config (problem_type, else regression when num_labels is 1), checked against `asked`."""
    problem = config.get("problem_type")
    k = num_labels(config)
    found = f"{source}: problem_type {problem!r}, {k} label{'s' if k != 1 else ''}"
    if problem is not None and problem not in PROBLEM_TYPES:
        raise ModelError(f"{found}: unknown problem_type; transformers knows "
                         f"{', '.join(PROBLEM_TYPES)}; fix config.json.")
    if asked is not None and not TASKS[asked].sequence_head:
        raise ModelError(f"{found}: a sequence-classification head, but --task {asked} was given; drop --task or "
                         "use the matching checkpoint.")
    configured = PROBLEM_TYPES.get(problem) if problem else None
    if configured and asked and configured != asked:
        raise ModelError(f"{found}: the head is {TASKS[configured].summary}, but --task {asked} was given; a "
                         "config that contradicts the task is not guessed: drop --task, or fix problem_type in "
                         "config.json if the model was trained otherwise.")
    task = configured or asked or ("regression" if k == 1 else "classification")
    if k is None:
        raise ModelError(f"{found}: config.json gives neither id2label nor num_labels; re-save the checkpoint.")
    if task == "regression" and k != 1:
        raise ModelError(f"{found}: regression with {k} outputs (multi-output regression) is not supported; "
                         "supported: regression with one output (num_labels 1).")
    if task == "classification" and k < 2:
        raise ModelError(f"{found}: a single-label classifier needs at least 2 labels (a softmax over one is "
                         "always 1); a one-output head is regression (--task regression).")
    return task


# ------------------------------------------------------------------------------------------------ the parameters

@dataclass(frozen=True)
class Threshold(Rule):
    """A probability in (0, 1), or the path of a JSON file {label: threshold} (read when the run starts)."""

    def ok(self, value) -> bool:
        if is_number(value):
            return 0 < value < 1
        return isinstance(value, str) and bool(value.strip())

    def coerce(self, value):
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                return value
        return str(value) if hasattr(value, "__fspath__") else value

    def describe(self) -> str:
        return "a number in (0, 1) or a JSON file of {label: threshold}"


PANEL = "Task (multi-label, regression)"


@dataclass(frozen=True)
class TaskParams(Params):
    """What the multi-label and regression heads need beyond the checkpoint: how the gold is written, the threshold
    that makes a sigmoid a prediction, the tolerance that makes an error a failure. Ignored by the other tasks."""

    threshold: float | str = param(0.5, Threshold(), "Multi-label: a label is predicted when its sigmoid is at "
                                   "least this; or a JSON file {label: threshold} (every label named).", panel=PANEL)
    label_sep: str | None = param(None, Text(empty=False), "Multi-label: the gold is one string per example, its "
                                  "labels split on this (',' or '|').", none="a list of names or ids per example",
                                  panel=PANEL)
    label_per_column: bool = param(False, Flag(), "Multi-label: the gold is one 0/1 column per label, named as the "
                                   "model's labels (instead of --label-column).", panel=PANEL)
    tolerance: float | None = param(None, Float(0, low_open=True), "Regression: a failure is |prediction - gold| "
                                    "above this.", none="the worst decile of |error| fails", panel=PANEL)
    relative_tolerance: bool = param(False, Flag(), "Regression: --tolerance is a share of |gold| (0.1: 10%), not "
                                     "an absolute error.", panel=PANEL)

    def validate(self) -> None:
        if self.relative_tolerance and self.tolerance is None:
            self.fail("relative_tolerance", True, "--tolerance as well (a relative tolerance needs its share)")

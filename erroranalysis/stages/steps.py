"""One run per analyzed training step, `<experiment>/step-000500/`, made by the same stages as `erroranalysis run`.

The Trainer callback hands a model still in memory, `watch` a checkpoint it loaded; both end here, so a step's run
is the same whichever made it:

    job = classifier_job(model, tokenizer, eval_set, InferParams(hidden="none"), path=output_dir / "checkpoint-500")
    run = analyze_step("runs/exp", job, step=500, epoch=1.0, source="callback", training_state=state_dict)

The manifest records `training` (step, epoch, experiment, source, the checkpoint folder, the last logged loss,
learning rate and grad norm); the training log so far is the run's trainer_state.json. After the usual stages, the
labeled taxonomy of the experiment's latest labeled step (when there is one) is applied to the new step, so its
failures arrive with suggested error types.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from erroranalysis import timeline as tl
from erroranalysis.core.errors import ModelError
from erroranalysis.core.validation import check_param
from erroranalysis.infer.tokens import TokenParams
from erroranalysis.rundir import Run, create_run, readers
from erroranalysis.sources.table import DataOptions, EvalSet, map_labels
from erroranalysis.stages.after import AfterParams, after_predictions
from erroranalysis.stages.infer import InferJob, InferParams, infer_stage
from erroranalysis.stages.tokens import TokenJob, token_job
from erroranalysis.tasks import TaskParams

SOURCES = ("callback", "watch")
LAST_SIGNALS = ("loss", "eval_loss", "learning_rate", "grad_norm")


def classifier_job(model, tokenizer, eval_set: EvalSet, params: InferParams, *, path: str | Path,
                   training_state: dict | None = None, label_column: str = "label") -> InferJob:
    """An InferJob over a sequence classifier already in memory (nothing is loaded or copied): class names from
    its config's id2label, the device it is on."""
    from erroranalysis.infer.classifier import Classifier

    config = getattr(model, "config", None)
    id2label = getattr(config, "id2label", None) or {}
    if not id2label:
        raise ModelError(f"{type(model).__name__}: its config has no id2label; build the model with "
                         "num_labels/id2label so the class names are known.")
    labels = [str(id2label[i]) for i in range(len(id2label))]
    refuse_other_heads(model)
    clf = Classifier(model=model, tokenizer=tokenizer, labels=labels, path=Path(path), device=_device(model),
                     weights_sha256=None)
    gold = map_labels(eval_set.frame["label"].to_numpy(), labels, source=str(eval_set.path),
                      lines=eval_set.frame["_line"].to_numpy(), column=label_column)
    return InferJob(Path(path), clf, eval_set, gold, params, training_state)


def refuse_other_heads(model) -> None:
    """`classifier_job` reads a single-label head only: a multi-label or regression head (its config's
    problem_type, or one output) is refused in one line, never read through a softmax (`head_job` reads those)."""
    found = model_task(model)
    if found != "classification":
        from erroranalysis import tasks

        raise ModelError(f"{type(model).__name__}: a {tasks.TASKS[found].summary} head (problem_type "
                         f"{getattr(model.config, 'problem_type', None)!r}); analyze it as --task {found} (the "
                         "Trainer callback's task=, or head_job / token_step_job).")


def model_task(model, asked: str | None = None) -> str:
    """The task of a model in memory, read from its config as `run` reads a checkpoint's config.json (and checked
    against `asked`; a head erroranalysis does not analyze is refused in one line)."""
    from erroranalysis import tasks

    config = model.config.to_dict() if hasattr(model.config, "to_dict") else {}
    if not config.get("architectures"):
        config["architectures"] = [type(model).__name__]
    return tasks.detect(config, asked, source=f"{type(model).__name__}.config")


def head_job(model, tokenizer, data, data_opts: DataOptions, params: InferParams, *, task: str, path: str | Path,
             task_opts: TaskParams = TaskParams(), training_state: dict | None = None) -> InferJob:
    """An InferJob over a multi-label or regression head already in memory: the gold read as `run --task` reads it
    (label lists or 0/1 columns, thresholds; scores, tolerance)."""
    from erroranalysis.infer.classifier import Classifier
    from erroranalysis.stages.infer import config_labels, task_gold

    check_param("task", task, task in ("multilabel", "regression"), "multilabel or regression")
    labels = config_labels(model.config.to_dict())
    eval_set, gold, reading = task_gold(task, data, data_opts, task_opts, labels)
    clf = Classifier(model=model, tokenizer=tokenizer, labels=labels, path=Path(path), device=_device(model),
                     weights_sha256=None, task=task)
    return InferJob(Path(path), clf, eval_set, gold, params, training_state, reading=reading, task_params=task_opts,
                    data_opts=data_opts)


def token_step_job(model, tokenizer, data, data_opts: DataOptions, params: TokenParams, *, path: str | Path,
                   training_state: dict | None = None) -> TokenJob:
    """A TokenJob over a token classifier already in memory (tag names from its config's id2label); the sentences
    are read and tokenized once: the job is reused at every step, the model being the same object."""
    from erroranalysis.infer.tokens import TokenClassifier

    if not getattr(tokenizer, "is_fast", False):
        raise ModelError(f"{type(tokenizer).__name__}: a slow tokenizer; token classification aligns words with a "
                         "fast tokenizer's word_ids: give the Trainer a fast one (AutoTokenizer, use_fast=True).")
    id2label = model.config.id2label
    clf = TokenClassifier(model=model, tokenizer=tokenizer, labels=[str(id2label[i]) for i in range(len(id2label))],
                          path=Path(path), device=_device(model), weights_sha256=None)
    job = token_job(clf, data, data_opts, params)
    job.training_state = training_state
    return job


def _device(model) -> str:
    param = next(model.parameters(), None)
    return str(param.device) if param is not None else "cpu"


def training_entry(step: int, *, epoch: float | None, experiment: Path, source: str, checkpoint: str | Path | None,
                   training_state: dict | None) -> dict:
    """The manifest's `training` section: where the step sits in its training run."""
    check_param("source", source, source in SOURCES, "one of " + ", ".join(SOURCES))
    history = (training_state or {}).get("log_history") or []
    last = {}
    for name in LAST_SIGNALS:  # the latest logged value of each signal at or before this step
        for entry in reversed(history):
            value = entry.get(name)
            if isinstance(value, (int, float)) and entry.get("step", step) <= step and math.isfinite(value):
                last[name] = float(value)
                break
    return {"step": int(step), "epoch": None if epoch is None else float(epoch),
            "experiment": str(Path(experiment).resolve()), "source": source,
            "checkpoint": None if checkpoint is None else str(Path(checkpoint).resolve()),
            "max_steps": (training_state or {}).get("max_steps"), "log_entries": len(history), "last": last}


def analyze_step(experiment: str | Path, job: InferJob, *, step: int, source: str, epoch: float | None = None,
                 checkpoint: str | Path | None = None, after: AfterParams = AfterParams(checks=None),
                 taxonomy: str | Path | None = "auto", embedder=None,
                 progress: Callable[[int, int], None] | None = None) -> Run:
    """Infer over the eval set, then metrics, slices and clusters (what `after` names), into
    `<experiment>/step-NNNNNN` (replacing an earlier run of the same step), then apply the taxonomy."""
    training = training_entry(step, epoch=epoch, experiment=experiment, source=source, checkpoint=checkpoint,
                              training_state=job.training_state)
    return _step_run(experiment, step, _job_manifest(job, after.seed), training,
                     lambda run: infer_stage(run, job, progress), after, embedder, taxonomy)


def analyze_generation_step(experiment: str | Path, lm, prepared: dict, gen_opts, *, step: int, source: str,
                            epoch: float | None = None, checkpoint: str | Path | None = None,
                            training_state: dict | None = None, after: AfterParams = AfterParams(checks=None),
                            taxonomy: str | Path | None = "auto", embedder=None,
                            progress=None) -> Run:
    """The generation stage (outputs checked) on a prompt set, then the stages `after` names, for one step
    (`progress`: a Reporter or a function of rows done, total)."""
    from erroranalysis.stages.generate import encode_eval_set, generation_manifest, generation_stage

    encoded = encode_eval_set(lm, prepared, gen_opts)
    manifest = generation_manifest(lm, prepared, gen_opts, encoded, seed=after.seed)
    training = training_entry(step, epoch=epoch, experiment=experiment, source=source, checkpoint=checkpoint,
                              training_state=training_state)
    return _step_run(experiment, step, manifest, training,
                     lambda run: generation_stage(run, lm, prepared, gen_opts, encoded, progress,
                                                  training_state=training_state), after, embedder, taxonomy)


def analyze_token_step(experiment: str | Path, job: TokenJob, *, step: int, source: str, epoch: float | None = None,
                       checkpoint: str | Path | None = None, after: AfterParams = AfterParams(checks=None),
                       taxonomy: str | Path | None = "auto", embedder=None, progress=None) -> Run:
    """A token classifier's step: the token stage (predictions, error spans, span vectors), then the stages `after`
    names over the error spans (`run --task token-classification`'s rules: spans clustered by their hidden
    states), into `<experiment>/step-NNNNNN`. `embedder` is not used: spans are embedded in their context."""
    from erroranalysis.stages.tokens import token_after, token_stage

    after = token_after(after)
    training = training_entry(step, epoch=epoch, experiment=experiment, source=source, checkpoint=checkpoint,
                              training_state=job.training_state)
    return _step_run(experiment, step, _job_manifest(job, after.seed), training,
                     lambda run: token_stage(run, job, progress), after, None, taxonomy)


def _job_manifest(job, seed: int) -> dict:
    """A checkpoint job's manifest; a model still in training (no weights file) is marked in memory."""
    manifest = job.manifest(seed=seed)
    if job.clf.weights_sha256 is None:
        manifest["model"]["in_memory"] = True
    return manifest


def _step_run(experiment, step: int, manifest: dict, training: dict, write, after: AfterParams, embedder,
              taxonomy) -> Run:
    """One step's run `<experiment>/step-NNNNNN` (replacing an earlier run of the step): `write(run)` commits its
    predictions, then the stages `after` names, then the latest labeled taxonomy is applied."""
    manifest["training"] = training
    with create_run(Path(experiment) / tl.step_name(step), overwrite=True, **manifest) as run:
        write(run)
        after_predictions(run, after, embedder=embedder)
    apply_latest_taxonomy(run, taxonomy)
    return run


def apply_latest_taxonomy(run: Run, taxonomy: str | Path | None = "auto"):
    """Apply a taxonomy to the step's failures (suggested error types, pending review): a file, or with "auto" the
    labeled taxonomy of the experiment's latest earlier step that has accepted labels. None when there is none."""
    from erroranalysis.stages.export import build_taxonomy, open_store
    from erroranalysis.stages.suggestions import apply_taxonomy

    if taxonomy is None or readers.read_predictions(run, columns=[])["correct"].all():
        return None
    if taxonomy != "auto":
        return apply_taxonomy(taxonomy, run.path)
    from erroranalysis.stages.timeline import step_runs

    store = open_store(run.path)
    if store is None:
        return None
    step = tl.step_of(run.name)
    earlier = [other for s, other in step_runs(run.path.parent) if step is not None and s < step]
    for other in reversed(earlier):
        a = store.assignments(store.run_key(other), include_rejected=False)
        if len(a) and (a["status"] == "accepted").any():
            doc = build_taxonomy(other, store)
            return apply_taxonomy(doc, run.path, store=store, name=f"taxonomy of {other.name}")
    return None


def same_predictions(a: Run, b: Run) -> bool:
    """Whether two runs predicted the same class for every example (ids in the same order)."""
    pa, pb = readers.read_predictions(a, columns=[]), readers.read_predictions(b, columns=[])
    return bool(len(pa) == len(pb) and np.array_equal(pa["example_id"].to_numpy(), pb["example_id"].to_numpy())
                and np.array_equal(pa["pred"].to_numpy(), pb["pred"].to_numpy()))


@dataclass(frozen=True)
class Gate:
    """The regression gate of one step against the one before: which regressions, as one-line descriptions."""

    base: str
    candidate: str
    regressions: list

    @property
    def failed(self) -> bool:
        return bool(self.regressions)


def gate_step(run: Run, *, alpha: float = 0.05) -> Gate | None:
    """Compare the step's run with the experiment's previous step (`compare --fail-on-regression`'s rule); None for
    the first step."""
    from erroranalysis.compare import regressions
    from erroranalysis.stages.compare import compare_runs
    from erroranalysis.stages.timeline import previous_step

    step = tl.step_of(run.name)
    before = previous_step(run.path.parent, step) if step is not None else None
    if before is None:
        return None
    report = compare_runs(before, [run.path])
    return Gate(base=str(before), candidate=str(run.path), regressions=regressions(report.doc["comparisons"][0],
                                                                                   alpha=alpha))

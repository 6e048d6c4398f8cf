"""The Python API, for notebooks: analyze data already in memory, run a checkpoint, open a run; get objects whose
parts are DataFrames.

    import erroranalysis as ea
    run = ea.analyze(df, text="text", label="label", pred="pred", out="runs/x")   # DataFrame, Dataset, dicts, path
    run = ea.run(model="ckpt/", data=ds, out="runs/y")                            # a checkpoint over in-memory data
    run = ea.open("runs/y")
    run.metrics.per_class; run.failures; run.clusters; run.examples(cluster=3); run.slices; run.checks
    run.compare(ea.open("runs/base")); run.report("report.html"); run.show()
    run.log_to("mlflow", tracker_run=training_run_id)   # or ea.analyze(..., log_to="mlflow")

A thin facade over `erroranalysis.stages` (as cleanlab's Datalab is over its functional core): every stage's
parameters are its own dataclass (`ClusterParams`, `SliceParams`, ...), passed as an instance, as a dict of its
fields, or as None (or False) to skip the stage; nothing is declared twice.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from erroranalysis.api.results import Comparison, Metrics, Run, tracker_params
from erroranalysis.core.errors import speaks_python
from erroranalysis.infer.generation import GenerationParams
from erroranalysis.sources.generations import SourceParams
from erroranalysis.sources.table import DataOptions, InMemory, as_source
from erroranalysis.stages import (
    AfterParams,
    CheckParams,
    ClusterParams,
    InferParams,
    MetricsParams,
    OutputParams,
    SliceParams,
    TokenParams,
)
from erroranalysis.tasks import CHOICES as RUN_TASKS
from erroranalysis.tasks import TASKS as ALL_TASKS
from erroranalysis.tasks import TaskParams

TASKS = tuple(name for name, task in ALL_TASKS.items() if task.loader)  # what analyze takes: what the registry reads
Stage = Any  # an instance of the stage's Params, a dict of its fields, or None / False to skip the stage


def open(path: str | Path) -> Run:  # noqa: A001 (ea.open, as the issue's quickstart spells it)
    """The run at `path` (made by `erroranalysis run`, `analyze`, or this API)."""
    return Run(path)


@speaks_python
def analyze(data, *, out: str | Path | None = None, text: str = "text", label: str = "label", pred: str | None = None,
            probs: str | None = None, labels: list[str] | None = None, id: str | None = None,  # noqa: A002
            task: str = "classification", data_options: DataOptions | None = None,
            task_options: TaskParams | dict | None = None, source: SourceParams | dict | None = None,
            generation: GenerationParams | dict | None = None, tokens: TokenParams | dict | None = None,
            metrics: Stage = None, checks: Stage = CheckParams(), slices: Stage = SliceParams(),
            cluster: Stage = ClusterParams(), overwrite: bool = False, embedder=None, progress: bool = False,
            log_to=None) -> Run:
    """Analyze predictions made elsewhere (`erroranalysis analyze`): `data` is a pandas DataFrame, a
    `datasets.Dataset`, a list of dicts or a file path.

    Classification: `text`, `label` and `pred` name the columns; the model's output per class, optional, is
    `prob_<label>` columns or one column of lists, {label: p} mappings or pipeline(top_k=None)'s outputs (`probs`
    names it; by default a `probs`, `scores` or `logits` column; `labels`: the order of plain lists; see
    docs/predictions.md). `task="multilabel"` or `"regression"`: label sets or values made elsewhere, the gold and
    `pred` read as `run` reads them (`task_options`: TaskParams; prob_<label> columns hold sigmoids).
    `task="generation"`: outputs an LLM wrote (`prompt` or `messages`, `output`, and the columns of
    docs/generation.md), with `source` (SourceParams: the file's format, the output column, your judge's score)
    and `generation` (GenerationParams: the output checks and scorers). `task="token-classification"`: words,
    gold and predicted tags per row (`tokens`: TokenParams' columns and scheme; `pred` defaults to the task's own: `pred`, `pred_tags` for tokens).
    `text`, `label` and `id` are DataOptions' `text_column`, `label_column`, `id_column` (or pass `data_options`). `out`: the run directory (default
    runs/analysis-<time>). `log_to`: trackers to log the run to when it is made ("mlflow", "wandb",
    "tensorboard", a list, or a TrackerParams for the project, folder or `tracker_run`), checked before any work."""
    from erroranalysis import stages

    _check_task(task)
    trackers = _trackers(log_to)
    options = _data_options(data_options, text, label, id)
    after = _after(metrics, checks, slices, cluster)
    outputs = _params(OutputParams, {"probs_column": probs, "labels": tuple(labels or ())})
    out = _out(out, "analysis")
    reading = stages.Reading(data=options, task=_params(TaskParams, task_options),
                             source=_params(SourceParams, source), generation=_params(GenerationParams, generation),
                             tokens=_params(TokenParams, tokens), output=outputs, pred_column=pred)
    made = stages.analyze(task, _source(data), out, reading, after=after, overwrite=overwrite, embedder=embedder,
                          progress=_progress(progress))
    return _logged(Run(made.path), trackers)


@speaks_python
def run(model: str | Path, data, *, out: str | Path | None = None, task: str = "auto",
        text: str = "text", label: str = "label", id: str | None = None,  # noqa: A002
        data_options: DataOptions | None = None, infer: InferParams | dict | None = None,
        task_options: TaskParams | dict | None = None,
        generation: GenerationParams | dict | None = None, tokens: TokenParams | dict | None = None,
        metrics: Stage = None, checks: Stage = CheckParams(), slices: Stage = SliceParams(),
        cluster: Stage = ClusterParams(), overwrite: bool = False, embedder=None, progress: bool = False,
        log_to=None) -> Run:
    """A checkpoint over an eval set (`erroranalysis run`): `data` as for `analyze`; `task` "auto" reads the head
    from the checkpoint's config.json (classification, multilabel, regression; a causal LM or a .gguf file is
    generation, run with its output checks), or names it (refused when the config contradicts it). `infer`
    (InferParams), `task_options` (TaskParams: multi-label threshold and gold layout, regression tolerance),
    `generation` (GenerationParams) and `tokens` (TokenParams: a token classifier's columns, aggregation, tag scheme;
    its error spans are what slices and clusters group) say how it runs. `log_to` as for `analyze`."""
    from erroranalysis import stages
    from erroranalysis.core.validation import check_choice

    check_choice("task", task, RUN_TASKS)
    trackers = _trackers(log_to)
    task = stages.resolve_task(model, task)
    options = _data_options(data_options, text, label, id)
    after = _after(metrics, checks, slices, cluster)
    out = _out(out, "run")
    setup = stages.Setup(data=options, infer=_params(InferParams, infer), task=_params(TaskParams, task_options),
                         generation=_params(GenerationParams, generation), tokens=_params(TokenParams, tokens))
    made = stages.run_model(task, model, _source(data), out, setup, after=after, overwrite=overwrite,
                            progress=_progress(progress), embedder=embedder)
    return _logged(Run(made.path), trackers)


@speaks_python
def sft_check(model: str | Path, data, *, out: str | Path | None = None, params=None, overwrite: bool = False,
              progress: bool = False):
    """Check SFT training data as TRL's SFTTrainer prepares it (`erroranalysis sft-check`; docs/sft-check.md):
    `model` a tokenizer or checkpoint folder or a .gguf file; `data` a file path, a DataFrame, a
    `datasets.Dataset` or a list of dicts (`messages`, `prompt`/`completion` or `text`); `params` an
    `erroranalysis.sft.SftParams` or a dict of its fields. Returns the `erroranalysis.sft.SftResult`: `findings`,
    `rows` (DataFrames) and `summary`; the run directory `out` (default runs/sft-<time>) holds the same."""
    from erroranalysis import stages
    from erroranalysis.sft import SftParams

    reporter = _progress(progress)
    phases = reporter.phases("sft-check") if reporter is not None else None
    _, result = stages.sft_check(model, _source(data), _out(out, "sft"), _params(SftParams, params),
                                 overwrite=overwrite, progress=phases)
    return result


def _trackers(log_to):
    """The trackers `log_to` names, their settings checked before any work; None for none."""
    if log_to is None or log_to == () or log_to == []:
        return None
    params = tracker_params(log_to)
    params.require()
    return params


def _logged(run: Run, trackers) -> Run:
    if trackers is not None and trackers.log_to:
        run.log_to(trackers)
    return run


def _check_task(task: str) -> None:
    from erroranalysis.core.validation import check_choice

    check_choice("task", task, TASKS)


def _params(cls, value):
    """A stage's parameters: an instance of `cls`, a dict of its fields, or None for its defaults."""
    if value is None:
        return cls()
    if isinstance(value, dict):
        return cls.of(**value)
    if isinstance(value, cls):
        return value
    from erroranalysis.core.errors import ParameterError

    raise ParameterError(cls.__name__, value, f"a {cls.__name__}, a dict of its fields, or None")


def _stage(cls, value):
    return None if value is None or value is False else _params(cls, None if value is True else value)


def _after(metrics, checks, slices, cluster) -> AfterParams:
    return AfterParams(metrics=_params(MetricsParams, metrics), checks=_stage(CheckParams, checks),
                       slices=_stage(SliceParams, slices), cluster=_stage(ClusterParams, cluster))


def _data_options(given: DataOptions | None, text: str, label: str, id: str | None) -> DataOptions:  # noqa: A002
    if given is not None:
        return given
    return DataOptions(text_column=text, label_column=label, id_column=id)


def _source(data):
    """What the stages read: a path as it is, a URL (s3://, gs://, az://) as an object-storage location; a DataFrame,
    a `datasets.Dataset` or a list of dicts in memory."""
    import pandas as pd

    if isinstance(data, (str, Path)):
        return as_source(data)
    if isinstance(data, pd.DataFrame):
        return InMemory(data)
    if hasattr(data, "to_pandas") and hasattr(data, "column_names"):  # a datasets.Dataset
        return InMemory(data.to_pandas(), name="Dataset")
    if isinstance(data, (list, tuple)) and all(isinstance(r, dict) for r in data):
        return InMemory(pd.DataFrame.from_records(list(data)), name="list of dicts")
    from erroranalysis.core.errors import DataError

    raise DataError(f"data of type {type(data).__name__} is not an eval set; pass a pandas DataFrame, a "
                    "datasets.Dataset, a list of dicts or a file path.")


def _out(out, kind: str) -> Path:
    if out is not None:
        return Path(out)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{kind}-{stamp}"


def _progress(show: bool):
    from erroranalysis.core.progress import reporter

    return reporter() if show else None


__all__ = ["Comparison", "Metrics", "Run", "analyze", "open", "run", "sft_check"]

"""The Python API, for notebooks: analyze data already in memory, run a checkpoint, open a run; get objects whose
parts are DataFrames.

    import erroranalysis as ea
    run = ea.analyze(df, text="text", label="label", pred="pred", out="runs/x")   # DataFrame, Dataset, dicts, path
    run = ea.run(model="ckpt/", data=ds, out="runs/y")                            # a checkpoint over in-memory data
    run = ea.open("runs/y")
    run.metrics.per_class; run.failures; run.clusters; run.examples(cluster=3); run.slices; run.checks
    run.compare(ea.open("runs/base")); run.report("report.html"); run.show()

A thin facade over `erroranalysis.stages` (as cleanlab's Datalab is over its functional core): every stage's
parameters are its own dataclass (`ClusterParams`, `SliceParams`, ...), passed as an instance, as a dict of its
fields, or as None (or False) to skip the stage; nothing is declared twice.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from erroranalysis.api.results import Comparison, Metrics, Run
from erroranalysis.infer.generation import GenerationParams
from erroranalysis.sources.generations import SourceParams
from erroranalysis.sources.table import DataOptions, InMemory
from erroranalysis.stages import (
    AfterParams,
    CheckParams,
    ClusterParams,
    InferParams,
    MetricsParams,
    SliceParams,
    TokenParams,
)
from erroranalysis.tasks import CHOICES as RUN_TASKS
from erroranalysis.tasks import TaskParams

TASKS = ("classification", "multilabel", "regression", "generation", "token-classification")  # what analyze takes
Stage = Any  # an instance of the stage's Params, a dict of its fields, or None / False to skip the stage


def open(path: str | Path) -> Run:  # noqa: A001 (ea.open, as the issue's quickstart spells it)
    """The run at `path` (made by `erroranalysis run`, `analyze`, or this API)."""
    return Run(path)


def analyze(data, *, out: str | Path | None = None, text: str = "text", label: str = "label", pred: str = "pred",
            id: str | None = None, task: str = "classification", data_options: DataOptions | None = None,  # noqa: A002
            task_options: TaskParams | dict | None = None, source: SourceParams | dict | None = None,
            generation: GenerationParams | dict | None = None, tokens: TokenParams | dict | None = None,
            metrics: Stage = None, checks: Stage = CheckParams(), slices: Stage = SliceParams(),
            cluster: Stage = ClusterParams(), overwrite: bool = False, embedder=None, progress: bool = False) -> Run:
    """Analyze predictions made elsewhere (`erroranalysis analyze`): `data` is a pandas DataFrame, a
    `datasets.Dataset`, a list of dicts or a file path.

    Classification: `text`, `label` and `pred` name the columns (optional `prob_<label>` columns give
    probabilities). `task="multilabel"` or `"regression"`: label sets or values made elsewhere, the gold and
    `pred` read as `run` reads them (`task_options`: TaskParams; prob_<label> columns hold sigmoids).
    `task="generation"`: outputs an LLM wrote (`prompt` or `messages`, `output`, and the columns of
    docs/generation.md), with `source` (SourceParams: the file's format, the output column, your judge's score)
    and `generation` (GenerationParams: the output checks and scorers). `task="token-classification"`: words,
    gold and predicted tags per row (`tokens`: TokenParams' columns and scheme; `pred` defaults to `pred_tags`).
    `text`, `label` and `id` are DataOptions' `text_column`, `label_column`, `id_column` (or pass `data_options`). `out`: the run directory (default
    runs/analysis-<time>)."""
    from erroranalysis import stages

    _check_task(task)
    options = _data_options(data_options, text, label, id)
    after = _after(metrics, checks, slices, cluster)
    out = _out(out, "analysis")
    if task == "generation":
        made = stages.analyze_generations(_source(data), out, data_opts=options,
                                          gen_opts=_params(GenerationParams, generation),
                                          source=_params(SourceParams, source), after=after, overwrite=overwrite,
                                          embedder=embedder, progress=_progress(progress))
    elif task == "token-classification":
        made = stages.analyze_token_predictions(_source(data), out, data_opts=options,
                                                token_opts=_params(TokenParams, tokens),
                                                pred_column="pred_tags" if pred == "pred" else pred, after=after,
                                                overwrite=overwrite, progress=_progress(progress))
    elif task in ("multilabel", "regression"):
        made = stages.analyze_task_predictions(_source(data), out, task=task, data_opts=options,
                                               task_opts=_params(TaskParams, task_options), pred_column=pred,
                                               after=after, overwrite=overwrite, embedder=embedder,
                                               progress=_progress(progress))
    else:
        made = stages.analyze_predictions(_source(data), out, data_opts=options, pred_column=pred, after=after,
                                          overwrite=overwrite, embedder=embedder, progress=_progress(progress))
    return Run(made.path)


def run(model: str | Path, data, *, out: str | Path | None = None, task: str = "auto",
        text: str = "text", label: str = "label", id: str | None = None,  # noqa: A002
        data_options: DataOptions | None = None, infer: InferParams | dict | None = None,
        task_options: TaskParams | dict | None = None,
        generation: GenerationParams | dict | None = None, tokens: TokenParams | dict | None = None,
        metrics: Stage = None, checks: Stage = CheckParams(), slices: Stage = SliceParams(),
        cluster: Stage = ClusterParams(), overwrite: bool = False, embedder=None, progress: bool = False) -> Run:
    """A checkpoint over an eval set (`erroranalysis run`): `data` as for `analyze`; `task` "auto" reads the head
    from the checkpoint's config.json (classification, multilabel, regression; a causal LM or a .gguf file is
    generation, run with its output checks), or names it (refused when the config contradicts it). `infer`
    (InferParams), `task_options` (TaskParams: multi-label threshold and gold layout, regression tolerance),
    `generation` (GenerationParams) and `tokens` (TokenParams: a token classifier's columns, aggregation, tag scheme;
    its error spans are what slices and clusters group) say how it runs."""
    from erroranalysis import stages
    from erroranalysis.core.validation import check_choice

    check_choice("task", task, RUN_TASKS)
    task = stages.resolve_task(model, task)
    options = _data_options(data_options, text, label, id)
    after = _after(metrics, checks, slices, cluster)
    out = _out(out, "run")
    if task == "generation":
        made = stages.run_generation(model, _source(data), out, data_opts=options,
                                     gen_opts=_params(GenerationParams, generation), after=after,
                                     overwrite=overwrite, progress=_progress(progress), embedder=embedder)
    elif task == "token-classification":
        made = stages.run_token_classification(model, _source(data), out, data_opts=options,
                                               token_opts=_params(TokenParams, tokens), after=after,
                                               overwrite=overwrite, progress=_progress(progress))
    else:
        made = stages.run_checkpoint(model, _source(data), out, data_opts=options,
                                     infer_opts=_params(InferParams, infer), after=after, overwrite=overwrite,
                                     progress=_progress(progress), embedder=embedder, task=task,
                                     task_opts=_params(TaskParams, task_options))
    return Run(made.path)


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
    """What the stages read: a path as it is; a DataFrame, a `datasets.Dataset` or a list of dicts in memory."""
    import pandas as pd

    if isinstance(data, (str, Path)):
        return Path(data)
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

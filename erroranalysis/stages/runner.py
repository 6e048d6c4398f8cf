"""`erroranalysis run`: a checkpoint over an eval set, by the runner its task names in the registry
(`erroranalysis.tasks.TASKS[task].runner`), so the CLI and the Python API ask one place, as `analyze` does
(`stages.analyze`). Every runner takes the same arguments: the model, the eval set, the run directory, one `Setup`
(each head uses its parts) and what follows the predictions (`AfterParams`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from erroranalysis import tasks
from erroranalysis.core.validation import check_param
from erroranalysis.engines import LOCAL, Engine
from erroranalysis.infer.generation import GenerationParams
from erroranalysis.infer.tokens import TokenParams
from erroranalysis.rundir import Run
from erroranalysis.sources.table import DataOptions
from erroranalysis.stages.after import AfterParams
from erroranalysis.stages.infer import InferParams


@dataclass(frozen=True)
class Setup:
    """How a checkpoint runs over an eval set; each head's runner takes the parts it needs: `data` (the columns),
    `infer` (batching, device, precision: sequence heads), `task` (multi-label gold and threshold, regression
    tolerance), `generation` (decoding and output checks), `tokens` (words and tags columns, scheme)."""

    data: DataOptions = DataOptions()
    infer: InferParams = InferParams()
    task: tasks.TaskParams = tasks.TaskParams()
    generation: GenerationParams = GenerationParams()
    tokens: TokenParams = TokenParams()


def run_model(task: str, model: str | Path, data, out: str | Path, setup: Setup = Setup(), *,
        after: AfterParams = AfterParams(), overwrite: bool = False, progress=None, engine: Engine = LOCAL,
        embedder=None, log=None) -> Run:
    """Run `model` over `data` as `task` (resolved: `stages.resolve_task`) into the run at `out`."""
    entry = tasks.get(task)
    return entry.runner_function()(model, data, out, setup, task=entry, after=after, overwrite=overwrite,
                                   progress=progress, engine=engine, embedder=embedder, log=log)


def sequence_head(model, data, out, setup: Setup, *, task: tasks.Task, after, overwrite, progress, engine,
                  embedder, log) -> Run:
    """A sequence-classification head (softmax, sigmoid or regression): `stages.run_checkpoint`."""
    from erroranalysis.stages.infer import run_checkpoint

    return run_checkpoint(model, data, out, data_opts=setup.data, infer_opts=setup.infer, after=after,
                          overwrite=overwrite, progress=progress, embedder=embedder, engine=engine, log=log,
                          task=task.name, task_opts=setup.task)


def generation(model, data, out, setup: Setup, *, task: tasks.Task, after, overwrite, progress, engine, embedder,
               log) -> Run:
    """A causal or seq2seq LM over a prompt set, its outputs checked: `stages.run_generation`."""
    from erroranalysis.stages.generate import run_generation

    check_param("--engine", engine.engine, not engine.distributed, "local (generation runs in-process)")
    return run_generation(model, data, out, data_opts=setup.data, gen_opts=setup.generation, after=after,
                          overwrite=overwrite, progress=progress, log=log, embedder=embedder)


def token_classification(model, data, out, setup: Setup, *, task: tasks.Task, after, overwrite, progress, engine,
                         embedder, log) -> Run:
    """A token classifier, its error spans analyzed (`embedder` is not used: spans are embedded in context)."""
    from erroranalysis.stages.tokens import run_token_classification

    return run_token_classification(model, data, out, data_opts=setup.data, token_opts=setup.tokens, after=after,
                                    overwrite=overwrite, progress=progress, log=log, engine=engine)

"""`erroranalysis analyze`: predictions made elsewhere, read by the loader its task names in the registry
(`erroranalysis.tasks.TASKS[task].loader`), so the CLI, the Python API and anything else that analyzes a file ask
one place, and a new head is one registry entry and its loader.

Every loader takes the same arguments: the file, the run directory, one `Reading` (each task uses its parts) and
what follows the predictions (`AfterParams`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from erroranalysis import tasks
from erroranalysis.core.params import Params, Strings, Text, param
from erroranalysis.infer.generation import GenerationParams
from erroranalysis.infer.tokens import TokenParams
from erroranalysis.rundir import Run
from erroranalysis.sources.generations import SourceParams
from erroranalysis.sources.table import DataOptions
from erroranalysis.stages.after import AfterParams


@dataclass(frozen=True)
class OutputParams(Params):
    """Where predictions made elsewhere hold the model's output per class (classification and multi-label)."""

    probs_column: str | None = param(
        None, Text(), "Column of the model's output per class: a list in label order, a {label: p} mapping, or "
        "pipeline(top_k=None)'s list of {label, score}. A column named (or ending in) logits holds logits "
        "(softmax, or sigmoid for multilabel); any other holds probabilities.",
        none="probs, scores or logits, whichever holds lists or mappings")
    labels: tuple[str, ...] = param((), Strings(), "Comma-separated class order of a list in --probs-column.",
                                    none="the label names sorted, numbers in numeric order")


@dataclass(frozen=True)
class Reading:
    """How a file of predictions made elsewhere is read; each task's loader takes the parts it needs: `data` (the
    columns, encoding, split), `task` (multi-label gold layout and threshold, regression tolerance), `source` and
    `generation` (a generation file's format, output column, judge, checks), `tokens` (words and tags columns,
    scheme), `output` (classification and multi-label: the column of the model's output per class), and
    `pred_column` (None: the task's own, `Task.pred_column`)."""

    data: DataOptions = DataOptions()
    task: tasks.TaskParams = tasks.TaskParams()
    source: SourceParams = SourceParams()
    generation: GenerationParams = GenerationParams()
    tokens: TokenParams = TokenParams()
    output: OutputParams = OutputParams()
    pred_column: str | None = None

    def pred_column_of(self, task: tasks.Task) -> str:
        return self.pred_column or task.pred_column


def analyze(task: str, data, out: str | Path, reading: Reading = Reading(), *, after: AfterParams = AfterParams(),
            overwrite: bool = False, embedder=None, progress=None, engine=None) -> Run:
    """Analyze `data` (a path, URL or `sources.table.InMemory`) as `task`'s predictions into the run at `out`."""
    entry = tasks.get(task)
    return entry.loader_function()(data, out, reading, task=entry, after=after, overwrite=overwrite,
                                   embedder=embedder, progress=progress, engine=engine)

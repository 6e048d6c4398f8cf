"""`erroranalysis analyze`: predictions made elsewhere, read by the loader its task names in the registry
(`erroranalysis.tasks.TASKS[task].loader`), so the CLI, the Python API and anything else that analyzes a file ask
one place, and a new head is one registry entry and its loader.

Every loader takes the same arguments: the file, the run directory, one `Reading` (each task uses its parts) and
what follows the predictions (`AfterParams`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from erroranalysis import tasks
from erroranalysis.infer.generation import GenerationParams
from erroranalysis.infer.tokens import TokenParams
from erroranalysis.rundir import Run
from erroranalysis.sources.generations import SourceParams
from erroranalysis.sources.table import DataOptions
from erroranalysis.stages.after import AfterParams


@dataclass(frozen=True)
class Reading:
    """How a file of predictions made elsewhere is read; each task's loader takes the parts it needs: `data` (the
    columns, encoding, split), `task` (multi-label gold layout and threshold, regression tolerance), `source` and
    `generation` (a generation file's format, output column, judge, checks), `tokens` (words and tags columns,
    scheme), and `pred_column` (None: the task's own, `Task.pred_column`)."""

    data: DataOptions = DataOptions()
    task: tasks.TaskParams = tasks.TaskParams()
    source: SourceParams = SourceParams()
    generation: GenerationParams = GenerationParams()
    tokens: TokenParams = TokenParams()
    pred_column: str | None = None

    def pred_column_of(self, task: tasks.Task) -> str:
        return self.pred_column or task.pred_column


def analyze(task: str, data, out: str | Path, reading: Reading = Reading(), *, after: AfterParams = AfterParams(),
            overwrite: bool = False, embedder=None, progress=None, engine=None) -> Run:
    """Analyze `data` (a path, URL or `sources.table.InMemory`) as `task`'s predictions into the run at `out`."""
    entry = tasks.get(task)
    return entry.loader_function()(data, out, reading, task=entry, after=after, overwrite=overwrite,
                                   embedder=embedder, progress=progress, engine=engine)
